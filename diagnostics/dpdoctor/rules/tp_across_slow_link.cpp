// Tensor parallelism over a slow link. Its all-reduces sit between the layers' products
// (a GPT-2 block makes two in the forward and two in the backward, each the size of the
// block's activations) and nothing overlaps them: every one is waited for in full. So
// Megatron-LM keeps the tensor-parallel group within the GPUs one NVLink/NVSwitch joins
// and crosses slower links with data (or pipeline) parallelism. The link's speed is
// measured from the run's own all-reduces: their bytes and the time they ran, as
// nccl-tests' bus bandwidth (bytes x 2(n-1)/n over the time).
#include <fmt/format.h>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

namespace {
constexpr double kAdviceShare = 0.05, kWarningShare = 0.10;
// Below any NVLink generation's all-reduce bus bandwidth (V100 NVLink 2 measures about
// 130 GB/s in nccl-tests, A100 230, H100 450); PCIe and network links are below it.
constexpr double kFastLinkBusbw = 50e9;
// A link of that class for the estimate of what the all-reduces would take there: the
// bus bandwidth above and 10 us an algorithm step.
constexpr double kFastLinkStep_s = 10e-6;
}  // namespace

std::optional<Finding> tp_across_slow_link(const Evidence& e) {
  if (!mode_info(e.mode).splits_layers || !e.has_tp || e.world < 2 || e.step_s <= 0 || e.tp_allreduces <= 0 ||
      e.tp_allreduce_waited_s < 0)
    return std::nullopt;
  const double share = e.tp_allreduce_waited_s / e.step_s;
  if (share < kAdviceShare) return std::nullopt;
  const double ran_s = e.tp_allreduce_s > 0 ? e.tp_allreduce_s : e.tp_allreduce_waited_s;
  const double factor = 2.0 * (e.world - 1) / e.world;
  const double busbw = static_cast<double>(e.tp_allreduce_bytes) * factor / ran_s;
  if (busbw >= kFastLinkBusbw) return std::nullopt;
  const double fast_s = static_cast<double>(e.tp_allreduces) * 2.0 * (e.world - 1) * kFastLinkStep_s +
                        static_cast<double>(e.tp_allreduce_bytes) * factor / kFastLinkBusbw;
  const int64_t per_call = e.tp_allreduce_bytes / e.tp_allreduces;
  Finding f;
  f.severity = share >= kWarningShare ? Severity::warning : Severity::info;
  f.title = fmt::format("tensor parallelism over a slow link: {:.0f}% of the step waits for its {} all-reduces, "
                        "which move {:.1f} GB/s",
                        100 * share, e.tp_allreduces, busbw / 1e9);
  f.explanation = fmt::format(
      "Tensor parallelism all-reduces each layer's partial results between its products (two per transformer block "
      "forward, two backward), so no compute hides them. Rank 0 waited {} a step for {} all-reduces of {} KiB each, "
      "{:.0f}% of its {} step; they ran at {:.1f} GB/s of bus bandwidth (nccl-tests' busbw: bytes x 2(n-1)/n over "
      "the time, {} ranks), below any NVLink's ({:.0f} GB/s and more). Over such a link they would take about {}.",
      duration_text(e.tp_allreduce_waited_s), e.tp_allreduces, per_call / 1024, 100 * share, duration_text(e.step_s),
      busbw / 1e9, e.world, kFastLinkBusbw / 1e9, duration_text(fast_s));
  f.fix = "keep the tensor-parallel group within GPUs joined by NVLink/NVSwitch (at most one node's), and cross the "
          "slower link with data parallelism (--mode=ddp) or sharding (--mode=fsdp); on one host, fewer tensor-parallel "
          "ranks with more work each";
  f.evidence = {{"allreduce_waited_s", figure(e.tp_allreduce_waited_s)},
                {"step_s", figure(e.step_s)},
                {"share", figure(share)},
                {"allreduces_per_step", e.tp_allreduces},
                {"bytes_per_allreduce", per_call},
                {"allreduce_s", e.tp_allreduce_s >= 0 ? figure(e.tp_allreduce_s) : nlohmann::json(nullptr)},
                {"bus_bandwidth_gbps", figure(busbw / 1e9)},
                {"fast_link_bus_bandwidth_gbps", figure(kFastLinkBusbw / 1e9)},
                {"fast_link_allreduce_s", figure(fast_s)},
                {"evidence", "rank 0's tensor-parallel all-reduces per step (median over the measured steps): their "
                             "bytes, the time they ran and the time the training thread waited for them"}};
  for (const auto& b : e.breakdown)
    if (b.rank) f.explains.push_back({b.rank, b.device, std::min(1.0, share)});
  return f;
}

}  // namespace dpb::doctor::check
