// dp with fewer samples than devices: torch.chunk gives one sample to each of the first
// B devices and nothing to the rest, which sit idle every step.
#include <fmt/format.h>

#include <algorithm>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

std::optional<Finding> batch_smaller_than_devices(const Evidence& e) {
  if (!e.has_dp || !e.samples_known || e.world < 2 || e.scatter_calls == 0 || e.global_batch >= e.world)
    return std::nullopt;
  int idle = 0;
  for (const auto& d : e.device) idle += d.samples == 0;
  if (idle == 0) return std::nullopt;
  Finding f;
  f.severity = Severity::error;
  f.title = fmt::format("the batch of {} is smaller than the {} devices: {} device(s) never got a sample",
                        e.global_batch, e.world, idle);
  f.evidence = {{"batch", e.global_batch}, {"devices", e.world}, {"chunks", e.chunks}, {"per_device", device_table(e)}};
  f.explanation = fmt::format(
      "DataParallel scatters the batch along dim 0 in torch.chunk pieces of ceil(B/N) samples; with B = {} < N = {} "
      "only {} chunk(s) exist, so the remaining devices run nothing while the step still waits for the busiest one.",
      e.global_batch, e.world, e.chunks.size());
  std::vector<std::string> starved;
  for (const auto& d : e.device)
    if (d.samples == 0) starved.push_back(d.id);
  f.explains = claim_idle(e, [&](const std::string& id) { return std::find(starved.begin(), starved.end(), id) != starved.end(); });
  f.fix = fmt::format("use a batch of at least {} (a multiple of {} keeps the chunks equal), or --gpus={}",
                      e.world, e.world, std::max<int64_t>(1, e.global_batch));
  return f;
}

}  // namespace dpb::doctor::check
