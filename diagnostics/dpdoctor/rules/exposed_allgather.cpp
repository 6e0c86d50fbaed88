// FSDP: the training thread waits for its all-gathers. Each unit's parameters must be
// gathered before it computes; what the previous unit's compute does not hide is
// exposed. Measured as rank 0's waits for its all-gathers per step (dpbench's
// runs[].fsdp), with why: prefetch off (every all-gather waits in full), units so small
// that a collective's fixed cost dominates, or all-gathers that take longer than the
// compute they could hide behind.
#include <fmt/format.h>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

namespace {
constexpr double kAdviceShare = 0.02, kWarningShare = 0.10;
constexpr int64_t kSmallUnitBytes = 256 << 10;  // below this an all-gather is mostly its fixed cost
// A profiler trace: the NCCL all-gather kernels not under compute, per step; what the
// trace does not say (prefetch, unit sizes) is named in the fix rather than judged.
Finding from_kernels(const Evidence& e, double share) {
  Finding f;
  f.severity = share >= kWarningShare ? Severity::warning : Severity::info;
  f.title = fmt::format("{:.0f}% of the step waits for parameters to be all-gathered: the first rank's {} all-gather "
                        "kernels a step run {} of it with no compute beside them",
                        100 * share, e.allgathers, duration_text(e.allgather_waited_s));
  const double compute_per_unit = (e.step_s - e.allgather_waited_s) / static_cast<double>(e.allgathers);
  f.explanation = fmt::format(
      "Sharded data parallelism gathers each unit's parameters before it computes; while an all-gather is not done "
      "the unit cannot start. On the first rank's GPU the all-gather kernels take {} a step, {} of it with no compute "
      "kernel running ({:.0f}% of its {} step), against {} of the rest of the step per all-gather. {}",
      duration_text(e.allgather_s), duration_text(e.allgather_waited_s), 100 * share, duration_text(e.step_s),
      duration_text(compute_per_unit),
      e.allgather_waited_s > 0.5 * e.allgather_s
          ? "Most of each all-gather runs alone: it was issued late (no prefetch) or the unit before it computes too "
            "briefly to hide it."
          : "Part of each all-gather runs beside compute: prefetch works, but the link or the unit size leaves the rest "
            "exposed.");
  f.fix = "prefetch the next unit's all-gather (FSDP2 does by default; FSDP1: forward_prefetch=True and "
          "backward_prefetch=BACKWARD_PRE), wrap coarser units (several layers or blocks per fully_shard), a larger "
          "per-rank batch, or reshard_after_forward=False for the units used again soon (no second all-gather, at "
          "their memory); the trace does not record which of these the job used";
  f.evidence = {{"allgather_waited_s", figure(e.allgather_waited_s)},
                {"allgather_s", figure(e.allgather_s)},
                {"step_s", figure(e.step_s)},
                {"share", figure(share)},
                {"allgathers_per_step", e.allgathers},
                {"evidence", "the first rank's NCCL all-gather kernels on its GPU, per step (medians over the trace's "
                             "steps): their time, and the part with no compute kernel beside it"}};
  for (const auto& t : e.timelines) {
    if (!t.rank) continue;
    const auto r = static_cast<size_t>(*t.rank);
    if (r < e.rank_allgather_waited_s.size() && t.step_s && *t.step_s > 0)
      f.explains.push_back({t.rank, t.breakdown.device, std::min(1.0, e.rank_allgather_waited_s[r] / *t.step_s)});
  }
  return f;
}

}  // namespace

std::optional<Finding> exposed_allgather(const Evidence& e) {
  if (!mode_info(e.mode).shards_state || !(e.has_fsdp || e.allgathers_from_kernels) || e.world < 2 || e.step_s <= 0 ||
      e.allgather_waited_s < 0 || e.allgathers <= 0)
    return std::nullopt;
  const double share = e.allgather_waited_s / e.step_s;
  if (share < kAdviceShare) return std::nullopt;
  if (!e.has_fsdp) return from_kernels(e, share);
  const int64_t per_gather = e.allgather_bytes / e.allgathers;  // this rank's shard of a unit
  const int64_t gathered = per_gather * e.world;                // the unit each all-gather assembles
  const double compute_per_unit = (e.step_s - e.allgather_waited_s) / static_cast<double>(e.allgathers);
  Finding f;
  f.severity = share >= kWarningShare ? Severity::warning : Severity::info;
  f.title = fmt::format("{:.0f}% of the step waits for parameters to be all-gathered: rank 0 waits {} a step for "
                        "{} all-gathers",
                        100 * share, duration_text(e.allgather_waited_s), e.allgathers);
  std::string why, fix;
  if (e.fsdp_prefetch == 0) {
    why = "Prefetch is off: each unit's all-gather is issued only when the unit is about to run, so every one is "
          "waited for in full.";
    fix = "prefetch the next unit's all-gather while the current one computes (--fsdp-prefetch=1; FSDP2 does by "
          "default, FSDP1 with forward_prefetch=True and backward_prefetch=BACKWARD_PRE)";
  } else if (gathered < kSmallUnitBytes) {
    why = fmt::format("The units are small: each all-gather assembles {} KiB, so its fixed cost (a collective's "
                      "latency and hand-offs) dominates, {} times a step, and one unit's compute ({} on average) is "
                      "too short to hide the next one's.",
                      gathered / 1024, e.allgathers, duration_text(compute_per_unit));
    fix = "wrap coarser units (several layers or blocks per fully_shard unit), or a larger per-rank batch so each "
          "unit computes longer";
  } else {
    why = fmt::format("The all-gathers take longer than the compute they could hide behind: {} of all-gathers a "
                      "step{} against {} of compute per unit; the link is the bound.",
                      e.allgather_s >= 0 ? duration_text(e.allgather_s) : std::string("(time not measured)"),
                      e.fsdp_reshard ? " (each unit gathered twice: forward and backward)" : "",
                      duration_text(compute_per_unit));
    fix = e.fsdp_reshard ? "keep gathered units until their backward (--fsdp-reshard=false, ZeRO-2: no second "
                           "all-gather, at the memory of the gathered units), prefetch further ahead "
                           "(--fsdp-prefetch=2), a larger per-rank batch, or a faster link"
                         : "prefetch further ahead (--fsdp-prefetch=2), a larger per-rank batch, or a faster link";
  }
  f.explanation = fmt::format(
      "Sharded data parallelism gathers each unit's parameters before its forward{} and frees them after; while an "
      "all-gather is not done the unit cannot start. Rank 0 waited {} a step for {} all-gathers ({} KiB of shard "
      "each, prefetch {}), {:.0f}% of its {} step. {}",
      e.fsdp_reshard ? " and again before its backward" : "", duration_text(e.allgather_waited_s), e.allgathers,
      per_gather / 1024, e.fsdp_prefetch, 100 * share, duration_text(e.step_s), why);
  f.fix = fix;
  f.evidence = {{"allgather_waited_s", figure(e.allgather_waited_s)},
                {"step_s", figure(e.step_s)},
                {"share", figure(share)},
                {"allgathers_per_step", e.allgathers},
                {"shard_bytes_per_allgather", per_gather},
                {"allgather_s", e.allgather_s >= 0 ? figure(e.allgather_s) : nlohmann::json(nullptr)},
                {"prefetch", e.fsdp_prefetch},
                {"reshard_after_forward", e.fsdp_reshard},
                {"units", e.fsdp_units},
                {"evidence", "rank 0's waits for its all-gathers, per step (median over the measured steps)"}};
  // Each rank's own waits where they were measured, else rank 0's.
  for (const auto& b : e.breakdown) {
    if (!b.rank) continue;
    const auto r = static_cast<size_t>(*b.rank);
    if (r < e.rank_allgather_waited_s.size()) {
      if (b.window_s > 0 && e.steps > 0)
        f.explains.push_back({b.rank, b.device, std::min(1.0, e.rank_allgather_waited_s[r] / e.step_s)});
    } else if (r == 0) {
      f.explains.push_back({b.rank, b.device, share});
    }
  }
  if (e.fsdp_prefetch == 0) {
    // Prefetch one unit ahead: each all-gather after the first runs beside the unit before
    // it, and only what outlasts that unit's compute is still waited for.
    const double n = static_cast<double>(e.allgathers), g = e.allgather_waited_s / n;
    const double hidden = (n - 1) * std::min(g, compute_per_unit);
    f.predicted = scaled_step(e, 1 - hidden / e.step_s,
                              "prefetch model: each all-gather after the first issued one unit ahead, beside that "
                              "unit's compute, so only what outlasts the compute is waited for (the wait per "
                              "all-gather and the compute per unit are rank 0's means); a wait that is the other "
                              "rank arriving late, not the transfer, is not hidden by prefetch",
                              {{"allgathers_per_step", e.allgathers},
                               {"wait_per_allgather_s", figure(g)},
                               {"compute_per_unit_s", figure(compute_per_unit)}});
  }
  return f;
}

}  // namespace dpb::doctor::check
