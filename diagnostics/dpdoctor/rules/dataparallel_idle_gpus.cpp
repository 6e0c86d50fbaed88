// A PyTorch trace of DataParallel whose kernels ran on fewer GPUs than the process sees:
// the batch was smaller than the GPUs, device_ids named fewer of them, or the forward
// went around the wrapper. The trace does not record samples, so it names the idle GPUs
// and the causes that leave them idle (dpbench runs, which count samples, get the
// specific rules instead).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

std::optional<Finding> dataparallel_idle_gpus(const Evidence& e) {
  if (!e.has_dp || e.samples_known || e.visible < 2) return std::nullopt;
  std::vector<std::string> idle, used;
  for (const auto& d : e.device) (d.busy <= 0.02 ? idle : used).push_back(d.id);
  if (idle.empty()) return std::nullopt;
  Finding f;
  f.severity = Severity::error;
  f.title = fmt::format("DataParallel ran on {} of the {} GPUs this process sees; idle: {}", used.size(), e.visible,
                        fmt::join(idle, ", "));
  f.evidence = {{"visible_gpus", e.visible},
                {"gpus_used", used},
                {"gpus_idle", idle},
                {"dataparallel_forwards", e.scatter_calls},
                {"per_device", device_table(e)}};
  f.explanation =
      "DataParallel.forward ran, but kernels appeared on only some of the GPUs the process can see. Its replicas run "
      "on the devices in device_ids (all visible GPUs by default) that receive a chunk of the batch: a device_ids list "
      "naming fewer GPUs, a batch smaller than the GPUs (torch.chunk gives the rest nothing), or a forward that calls "
      "the wrapped module directly leaves the others idle.";
  f.explains = claim_idle(e, [&](const std::string& id) { return std::find(idle.begin(), idle.end(), id) != idle.end(); });
  f.fix = "construct DataParallel without device_ids (or with all of them), give it a batch of at least one sample "
          "per GPU, and call the wrapper (dp(x)) rather than dp.module(x); better, use DistributedDataParallel";
  return f;
}

}  // namespace dpb::doctor::check
