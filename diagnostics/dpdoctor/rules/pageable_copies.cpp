// Input copied from pageable host memory (the driver stages it through a pinned buffer
// and the copy cannot overlap compute), a copy the host blocks on (a copy to the device
// that the host waits for: the device then idles until the host launches again), or
// copies taking a large share of the device's time: the input pipeline's transfers, not
// the model, set the pace. The idle time charged to blocking copies (the `copy` cause) is
// what this finding explains; below its warning line it is said as advice, so that the
// budget charges it to the copies and not to nothing.
#include <fmt/format.h>

#include <algorithm>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

namespace {

// A timeline's copy figures: the share of its steps its pageable copies took, its window's
// copies, and its idle time charged to blocking copies.
struct CopyShares {
  double pageable = 0, memory = 0, idle = 0;
  bool pageable_warns = false, warns = false;
  explicit CopyShares(const TimelineEvidence& t) {
    const double step = t.step_s.value_or(0);
    pageable = step > 0 ? t.copies.pageable_s / std::max(1, t.steps) / step : 0.0;
    memory = t.breakdown.memory_share.value_or(0);
    idle = t.share(trace::IdleCause::copy);
    pageable_warns = t.copies.pageable_bytes > 0 && pageable >= 0.05;
    warns = pageable_warns || memory >= 0.25 || idle >= 0.10;
  }
  double weight() const { return std::max({idle, pageable, memory}); }
};

}  // namespace

std::optional<Finding> pageable_copies(const Evidence& e) {
  using trace::IdleCause;
  const TimelineEvidence* pick = nullptr;
  std::optional<CopyShares> picked;
  for (const auto& t : e.timelines) {
    const CopyShares c(t);
    if (!c.warns && c.idle < 0.005) continue;
    if (!picked || c.warns > picked->warns || (c.warns == picked->warns && c.weight() > picked->weight())) {
      pick = &t;
      picked = c;
    }
  }
  if (!pick) return std::nullopt;
  const auto& t = *pick;
  const double steps = std::max(1, t.steps);
  const double pageable_share = picked->pageable, memory = picked->memory, idle = picked->idle;
  const bool warn = picked->warns, pageable = picked->pageable_warns;
  const auto& ops = t.idle.ops_of(IdleCause::copy);
  Finding f;
  f.severity = warn ? Severity::warning : Severity::info;
  if (idle >= std::max(pageable_share, 0.10) || (!pageable && memory < 0.25))
    f.title = fmt::format("{} idles {:.0f}% of the window around copies to the device that its host blocks on ({})",
                          t.who(), 100 * idle, ops.empty() ? std::string("blocking copies") : ops_text(ops, 2));
  else if (pageable)
    f.title = fmt::format("{} copies its input from pageable memory: {:.0f}% of the step", t.who(), 100 * pageable_share);
  else
    f.title = fmt::format("{} is copy-bound: copies take {:.0f}% of its time", t.who(), 100 * memory);
  f.evidence = {{"device", t.who()},
                {"idle_after_blocking_copies_share", figure(idle)},
                {"h2d_bytes_per_step", static_cast<double>(t.copies.h2d_bytes) / steps},
                {"pageable_bytes_per_step", static_cast<double>(t.copies.pageable_bytes) / steps},
                {"pinned_bytes_per_step", static_cast<double>(t.copies.pinned_bytes) / steps},
                {"pageable_copy_share", figure(pageable_share)},
                {"memory_share", figure(memory)},
                {"h2d_gbps", figure(t.copies.h2d_gbps)},
                {"copies_per_step", t.copies.copies / steps},
                {"host_ops", ops_table(ops)},
                {"time_source", trace::timeline_source_name(e.timeline_source)}};
  f.explanation =
      "A copy from pageable memory goes through a driver-side pinned staging buffer: it is slower than a copy from "
      "pinned memory and the host waits for it (PyTorch's .to(device) from pageable memory ends with a "
      "synchronize), so the host cannot queue the next work while it runs and the device idles after it until the "
      "host has launched again. That is the copy's cost, not a host sync's: the sync returns as soon as the copy is "
      "done." +
      (idle > 0 ? fmt::format(" Gaps charged to such copies hold {:.1f}% of the window.", 100 * idle) : std::string()) +
      (memory >= 0.25 ? " The device also spends a large share of its time moving data rather than computing on it."
                      : "");
  f.fix = "pin the input (DataLoader(pin_memory=True), or tensor.pin_memory()) and copy with .to(device, "
          "non_blocking=True) so copies overlap compute; send compact data (uint8 images, normalised on the device); "
          "keep tensors on the device between steps";
  for (const auto& x : e.timelines) f.explains.push_back(claim(x, x.share(IdleCause::copy)));
  return f;
}

}  // namespace dpb::doctor::check
