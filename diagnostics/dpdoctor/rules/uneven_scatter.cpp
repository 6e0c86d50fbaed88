// dp with a batch that torch.chunk cannot split evenly: the devices with the big chunks
// set the step time, the small ones wait (and with B % N small, fewer chunks than
// devices exist at all: 5 samples on 4 devices are 2, 2, 1). Judged on a full step's
// chunks, not on an epoch's partial last batch.
#include <fmt/format.h>

#include <algorithm>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

std::optional<Finding> uneven_scatter(const Evidence& e) {
  int64_t batch = 0;
  for (int64_t c : e.chunks) batch += c;
  if (!e.has_dp || !e.samples_known || e.world < 2 || e.scatter_calls == 0 || e.chunks.empty() || batch < e.world)
    return std::nullopt;
  const int64_t big = *std::max_element(e.chunks.begin(), e.chunks.end());
  const int64_t small = *std::min_element(e.chunks.begin(), e.chunks.end());
  const bool missing = static_cast<int>(e.chunks.size()) < e.world;
  // The work lost: devices idle for the share (big - own) / big of the replica compute.
  double lost = 0;
  for (int d = 0; d < e.world; ++d) {
    const int64_t own = d < static_cast<int>(e.chunks.size()) ? e.chunks[static_cast<size_t>(d)] : 0;
    lost += static_cast<double>(big - own) / static_cast<double>(big);
  }
  lost /= e.world;
  if (!missing && static_cast<double>(small) >= 0.8 * static_cast<double>(big)) return std::nullopt;
  Finding f;
  f.severity = Severity::warning;
  f.title = fmt::format("batch {} splits unevenly over {} devices: chunks {}", batch, e.world,
                        fmt::format("{}", fmt::join(e.chunks, ", ")));
  f.evidence = {{"batch", batch},
                {"devices", e.world},
                {"chunks", e.chunks},
                {"replica_capacity_lost", lost},
                {"per_device", device_table(e)}};
  f.explanation = fmt::format(
      "torch.chunk gives ceil({}/{}) = {} samples per device until the batch runs out{}; every step waits for a device "
      "with {} samples, so about {:.0f}% of the devices' compute capacity idles.",
      batch, e.world, big,
      missing ? fmt::format(", so only {} of the {} devices get any", e.chunks.size(), e.world) : "", big, 100 * lost);
  const int64_t even = (batch + e.world - 1) / e.world * e.world;
  f.fix = fmt::format("use a batch divisible by {} (e.g. {} or {})", e.world, even - e.world > 0 ? even - e.world : even,
                      even);
  return f;
}

}  // namespace dpb::doctor::check
