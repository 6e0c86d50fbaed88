// Input copied from pageable host memory (the driver stages it through a pinned buffer
// and the copy cannot overlap compute), or copies taking a large share of the device's
// time: the input pipeline's transfers, not the model, set the pace.
#include <fmt/format.h>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

std::optional<Finding> pageable_copies(const Evidence& e) {
  for (const auto& t : e.timelines) {
    if (!t.step_s || *t.step_s <= 0 || t.steps <= 0) continue;
    const double steps = t.steps, step = *t.step_s;
    const double pageable_share = t.copies.pageable_s / steps / step;
    const double memory = t.breakdown.memory_share.value_or(0);
    const bool pageable = t.copies.pageable_bytes > 0 && pageable_share >= 0.05;
    const bool copy_bound = memory >= 0.25;
    if (!pageable && !copy_bound) continue;
    const std::string who = t.rank ? fmt::format("rank {} ({})", *t.rank, t.device) : t.device;
    Finding f;
    f.severity = Severity::warning;
    f.title = pageable ? fmt::format("{} copies its input from pageable memory: {:.0f}% of the step", who,
                                     100 * pageable_share)
                       : fmt::format("{} is copy-bound: copies take {:.0f}% of its time", who, 100 * memory);
    f.evidence = {{"device", who},
                  {"h2d_bytes_per_step", static_cast<double>(t.copies.h2d_bytes) / steps},
                  {"pageable_bytes_per_step", static_cast<double>(t.copies.pageable_bytes) / steps},
                  {"pinned_bytes_per_step", static_cast<double>(t.copies.pinned_bytes) / steps},
                  {"pageable_copy_share", pageable_share},
                  {"memory_share", memory},
                  {"h2d_gbps", figure(t.copies.h2d_gbps)},
                  {"copies_per_step", t.copies.copies / steps},
                  {"time_source", trace::timeline_source_name(e.timeline_source)}};
    f.explanation = pageable
                        ? "A copy from pageable memory goes through a driver-side pinned staging buffer: it is slower "
                          "than a copy from pinned memory and it cannot run asynchronously, so the step waits for it "
                          "instead of overlapping it with compute."
                        : "The device spends a large share of its time moving data rather than computing on it: the "
                          "transfers are too large, too frequent, or not overlapped with compute.";
    f.fix = "pin the input (DataLoader(pin_memory=True)) and copy with .to(device, non_blocking=True) so copies overlap "
            "compute; send compact data (uint8 images, normalised on the device); keep tensors on the device between "
            "steps";
    return f;
  }
  return std::nullopt;
}

}  // namespace dpb::doctor::check
