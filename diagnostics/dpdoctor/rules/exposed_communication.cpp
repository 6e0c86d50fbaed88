// The step waits for communication that is not hidden behind compute: DDP's gradient
// all-reduce (or any collective) running while the device has nothing else to do.
// Measured on the device timeline where one exists (NCCL kernels against compute
// kernels, per rank; on logical CPU devices the host timeline is the device timeline),
// and by dpbench's A/B against no_sync. Part of an exposed collective can be waiting for
// a rank that arrives late: on profiler traces whose ranks' clocks agree that part is
// measured and said here, and straggler-rank names the late ranks and why they are late
// (it explains why this time is exposed; the time is counted once, here). In dpbench
// runs a straggler's extra compute is its own finding's time and is left out here.
#include <fmt/format.h>

#include <algorithm>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

namespace {

// Exposed communication below the warning is said, as advice, from this share of the
// step (a rank's window) on: the budget charges it to communication, not to nothing.
constexpr double kAdviceShare = 0.02;

constexpr const char* kFix =
    "give each rank more work per exchange: a larger per-rank batch, or gradient accumulation with no_sync "
    "(--accum-steps); overlap the all-reduce with backward (DDP's buckets, not a manual all-reduce after backward); "
    "or a faster interconnect/backend (NCCL on GPUs)";

// The fix for what the mode's collectives are: DDP's gradient all-reduces can hide behind
// the backward; tensor parallelism's activation all-reduces sit between layers by design;
// FSDP's all-gathers hide behind the previous unit's compute.
// Modes whose collectives move layers' activations or sharded state (tp, fsdp), not
// gradients after backward.
bool layer_or_state_collectives(const Evidence& e) {
  const ModeInfo& m = mode_info(e.mode);
  return m.splits_layers || m.shards_state;
}

std::string mode_fix(const Evidence& e, bool tiny) {
  if (mode_info(e.mode).splits_layers)
    return "tensor parallelism all-reduces activations between layers, so nothing hides them by default: keep the "
           "tensor-parallel group within one node's fastest link (NVLink; tp-across-slow-link says when it is not), "
           "overlap them with compute (sequence parallelism, Megatron's --tp-comm-overlap, PyTorch's async tensor "
           "parallelism), or use a smaller tensor-parallel degree with more data parallelism";
  if (mode_info(e.mode).shards_state)
    return "prefetch the next unit's all-gather while the current one computes (FSDP2 does by default), wrap coarser "
           "units, a larger per-rank batch, or a faster interconnect";
  return std::string(tiny ? "use larger buckets (bucket_cap_mb=25, the default; --bucket-mb=25); " : "") + kFix;
}

// Why so little overlaps, from the buckets (dpbench): many tiny buckets each pay a
// collective's latency; one bucket holding every gradient can only start once backward
// is over.
std::string bucket_cause(const Evidence& e, bool* tiny) {
  *tiny = e.bucket_bytes_max > 0 && e.bucket_bytes_max < (1 << 20) && e.buckets > 4;
  if (*tiny)
    return fmt::format(" {} buckets of at most {} KiB each pay a collective's latency, {} times a step.", e.buckets,
                       e.bucket_bytes_max / 1024, e.buckets);
  if (e.buckets == 1)
    return fmt::format(" All {} KiB of gradients fit in one bucket, whose all-reduce can only start when backward has "
                       "finished: there is nothing left to overlap it with.",
                       e.bucket_bytes_max / 1024);
  return "";
}

// The device's communication by collective kind (NCCL's kernel names), most exposed first:
// the evidence rows, and a sentence naming them ("" when the kernels say no kind).
std::pair<nlohmann::json, std::string> by_kind(const TimelineEvidence& t) {
  auto kinds = t.collectives;
  std::sort(kinds.begin(), kinds.end(),
            [](const auto& a, const auto& b) { return a.exposed_per_step_s > b.exposed_per_step_s; });
  nlohmann::json rows = nlohmann::json::array();
  std::string text;
  for (const auto& k : kinds) {
    rows.push_back({{"kind", trace::collective_kind_name(k.kind)},
                    {"kernels", k.kernels},
                    {"per_step_s", figure(k.per_step_s)},
                    {"exposed_per_step_s", figure(k.exposed_per_step_s)}});
    if (k.kind == trace::CollectiveKind::other) continue;
    text += fmt::format("{}{} {} of {} a step ({} kernels in the window)", text.empty() ? "" : ", ",
                        trace::collective_kind_name(k.kind),
                        duration_text(k.exposed_per_step_s), duration_text(k.per_step_s), k.kernels);
  }
  return {rows, text.empty() ? text : " Exposed by collective: " + text + "."};
}

std::optional<Finding> on_timelines(const Evidence& e) {
  const auto exposed = [](const TimelineEvidence& t) { return t.breakdown.overlap ? t.breakdown.comm_share.value_or(0) : 0.0; };
  const auto waited = [](const TimelineEvidence& t) { return t.wait_exposed_s && t.window_s() > 0 ? *t.wait_exposed_s / t.window_s() : 0.0; };
  const auto [t, share] = worst(e, exposed);
  // Below the warning (20% of a window), advice from kAdviceShare on: the budget charges
  // the time to communication, not to nothing.
  if (!t || share < kAdviceShare) return std::nullopt;
  const bool warn = share >= 0.20;
  const auto late = late_arrivals(e);
  const bool others_late = late && late->significant;
  const double step = t->step_s.value_or(0);
  const double wait = waited(*t);
  Finding f;
  f.severity = warn ? Severity::warning : Severity::info;
  f.title = fmt::format("{:.0f}% of {}'s window is communication that compute does not hide{}", 100 * share, t->who(),
                        others_late && wait > 0
                            ? fmt::format(" ({:.0f} points of it waiting for a late rank to arrive)", 100 * wait)
                            : "");
  f.evidence = {{"device", t->who()},
                {"exposed_share", figure(share)},
                {"waiting_share", late ? figure(wait) : nlohmann::json(nullptr)},
                {"overlap_ratio", figure(t->breakdown.overlap)},
                {"exposed_per_step_s", figure(t->exposed_comm_per_step_s)},
                {"step_time_s", figure(step > 0 ? std::optional<double>(step) : std::nullopt)},
                {"measured_on", "device timeline"},
                {"time_source", trace::timeline_source_name(e.timeline_source)},
                {"per_rank", breakdown_table(e)}};
  const auto [kinds, kinds_text] = by_kind(*t);
  if (!kinds.empty()) f.evidence["by_collective"] = kinds;
  bool tiny = false;
  const std::string cause = bucket_cause(e, &tiny);
  f.explanation = fmt::format(
      "Only {:.0f}% of the communication ran while the device was still computing; the rest is added to every step{}."
      "{} {}{}",
      100 * t->breakdown.overlap.value_or(0),
      e.batch_per_device > 0 ? fmt::format(" with {} sample(s) per rank", e.batch_per_device) : "", kinds_text,
      late ? fmt::format("Of it, {:.0f} points of the window are this rank's collectives waiting for a later rank to "
                         "reach them{}, and {:.0f} points the transfer itself.",
                         100 * wait, others_late ? " (straggler-rank says which rank and why)" : "",
                         100 * std::max(0.0, share - wait))
           : "",
      cause);
  f.fix = mode_fix(e, tiny);
  for (const auto& x : e.timelines) f.explains.push_back(claim(x, exposed(x)));
  return f;
}

// dpbench on logical CPU devices: the host timeline is the device timeline; the A/B
// against no_sync measures what communication costs the step, contention included.
std::optional<Finding> on_host(const Evidence& e) {
  if (!mode_info(e.mode).all_reduces_gradients || e.world < 2 || e.exposed_share < 0) return std::nullopt;
  const bool ab = e.exposed_share_ab >= 0;
  // A straggler's wait is not the network's: the time it explains (straggler-rank) is
  // left out, and what remains must still be a problem.
  double straggling = 0;
  if (const auto slow = slowest_rank(e); slow && slow->significant && e.step_s > 0)
    straggling = (slow->seconds - slow->typical_s) / e.step_s;
  // The rank timeline is the device timeline here: 20% of the step exposed on it is
  // enough. The A/B alone, on a machine the ranks share, moves by several points from run
  // to run: it counts where the timeline shows a tenth of the step exposed too.
  // Below that, exposed time of a few percent is still said, as advice: the budget then
  // charges it to communication rather than to nothing.
  const double timeline = e.exposed_share - straggling;
  const bool warn = !(timeline < 0.2 && (!ab || e.exposed_share_ab - straggling < 0.3 || timeline < 0.1));
  if (!warn && timeline < kAdviceShare) return std::nullopt;
  // Rank 0's measures (the A/B and the overlap are rank 0's): where the cost goes.
  const bool waits_known = !e.wait_for_peers_s.empty();
  const bool costs_known = !e.allreduce_s.empty();
  const double wait = waits_known ? e.wait_for_peers_s[0] : 0.0;
  const double compute = e.ranks.empty() ? 0.0 : e.ranks[0].compute_s;
  const double slowdown = e.step_without_comm_s > 0 ? std::max(0.0, compute - e.step_without_comm_s) : -1;
  Finding f;
  f.severity = warn ? Severity::warning : Severity::info;
  const double share = std::max(e.exposed_share, ab ? e.exposed_share_ab : 0.0);
  if (warn)
    f.title = fmt::format("{:.0f}% of the step waits for communication that compute does not hide ({})", 100 * share,
                          ab ? fmt::format("A/B: {} a step with the all-reduce, {} without",
                                           duration_text(e.step_s), duration_text(e.step_s * (1 - e.exposed_share_ab)))
                             : "exposed communication, rank 0");
  else
    f.title = fmt::format("{:.0f}% of the step is communication that compute does not hide{}", 100 * e.exposed_share,
                          costs_known ? fmt::format(": rank 0's all-reduce takes {} a step{}", duration_text(e.allreduce_s[0]),
                                                    waits_known ? fmt::format(", {} of it waiting for the slower rank",
                                                                              duration_text(std::min(wait, e.allreduce_s[0])))
                                                                : "")
                                      : "");
  f.evidence = {{"exposed_share_timeline", figure(e.exposed_share)},
                {"exposed_share_ab", ab ? figure(e.exposed_share_ab) : nlohmann::json(nullptr)},
                {"overlap_ratio", figure(e.overlap >= 0 ? std::optional<double>(e.overlap) : std::nullopt)},
                {"allreduce_s", costs_known ? figure(e.allreduce_s[0]) : nlohmann::json(nullptr)},
                {"wait_for_slower_rank_s", waits_known ? figure(wait) : nlohmann::json(nullptr)},
                {"transfer_s", costs_known && waits_known ? figure(std::max(0.0, e.allreduce_s[0] - wait)) : nlohmann::json(nullptr)},
                {"handoff_s", costs_known ? figure(e.allreduce_handoff_s[0]) : nlohmann::json(nullptr)},
                {"compute_slowdown_s", slowdown >= 0 ? figure(slowdown) : nlohmann::json(nullptr)},
                {"measured_on", "rank 0's timeline (host = device), its A/B against no_sync and its all-reduces"},
                {"time_source", trace::timeline_source_name(e.timeline_source)},
                {"step_time_s", figure(e.step_s)},
                {"compute_per_step_s", figure(compute)},
                {"buckets", e.buckets},
                {"largest_bucket_bytes", e.bucket_bytes_max},
                {"bucket_mb", e.bucket_mb},
                {"batch_per_rank", e.batch_per_device}};
  bool tiny = false;
  const std::string cause = bucket_cause(e, &tiny);
  const double cost = ab ? e.exposed_share_ab * e.step_s : e.exposed_share * e.step_s;
  std::string where;
  if (costs_known)
    where += fmt::format(" Rank 0's all-reduces run {} a step on the communication thread{}; hand-offs between the "
                         "training and communication threads add {}.",
                         duration_text(e.allreduce_s[0]),
                         waits_known ? fmt::format(", {} of it waiting for the slower rank to reach them and {} moving "
                                                   "the data",
                                                   duration_text(std::min(wait, e.allreduce_s[0])),
                                                   duration_text(std::max(0.0, e.allreduce_s[0] - wait)))
                                     : "",
                         duration_text(e.allreduce_handoff_s[0]));
  else if (waits_known)
    where += fmt::format(" Of it, {} a step is waiting for the slower rank to reach the all-reduce.", duration_text(std::min(wait, cost)));
  if (slowdown > 0.05 * e.step_s)
    where += fmt::format(" And with communication running, the rank's compute also slows down ({} a step against {} "
                         "without): the ranks and their communication threads share the cores.",
                         duration_text(compute), duration_text(e.step_without_comm_s));
  f.explanation = fmt::format(
      "Communication costs each step {} ({}).{} Only {:.0f}% of the all-reduce ran during backward.{}{}{}",
      duration_text(cost), ab ? "the A/B against no_sync" : "its exposed span on rank 0", where,
      100 * std::max(0.0, e.overlap), cause,
      e.batch_per_device > 0 && warn
          ? fmt::format(" With {} sample(s) per rank, backward is too short to hide it.", e.batch_per_device)
          : "",
      warn ? "" : fmt::format(" At {:.0f}% of the step on the timeline this is advice, not a problem: part of what "
                              "the scaling efficiency loses to communication.",
                              100 * e.exposed_share));
  f.fix = std::string(tiny ? "use larger buckets (bucket_cap_mb=25, the default; --bucket-mb=25); " : "") + kFix;
  // What the timeline shows as exposed is what this explains (the rest of the A/B cost
  // is compute slowed by contention, not idle time).
  for (const auto& b : e.breakdown)
    f.explains.push_back({b.rank, b.device, std::clamp(b.comm_share.value_or(0) - straggling, 0.0, 1.0)});
  return f;
}

}  // namespace

// Tensor parallelism and FSDP on logical CPU devices: each rank's window shows its
// collectives not under compute. Said as advice from kAdviceShare of a window, so that the
// budget charges it to communication; the warnings are tp-across-slow-link's and
// exposed-allgather's, which say why (or the verdict's, when a quarter is lost).
std::optional<Finding> on_host_ranks(const Evidence& e) {
  if (!layer_or_state_collectives(e) || e.world < 2 || e.breakdown.empty())
    return std::nullopt;
  const trace::Breakdown* worst = nullptr;
  for (const auto& b : e.breakdown)
    if (!worst || b.comm_share.value_or(0) > worst->comm_share.value_or(0)) worst = &b;
  const double share = worst->comm_share.value_or(0);
  if (share < kAdviceShare) return std::nullopt;
  const std::string who = worst->rank ? fmt::format("rank {} ({})", *worst->rank, worst->device) : worst->device;
  Finding f;
  f.severity = Severity::info;  // the warning is the mode's own rule's, which says why
  f.title = fmt::format("{:.0f}% of {}'s window is communication that compute does not hide", 100 * share, who);
  f.evidence = {{"device", who},
                {"exposed_share", figure(share)},
                {"measured_on", "each rank's timeline (host = device)"},
                {"time_source", trace::timeline_source_name(e.timeline_source)},
                {"per_rank", breakdown_table(e)}};
  f.explanation = fmt::format(
      "The {}'s collectives run with nothing computing beside them for {:.0f}% of {}'s window; on a machine the "
      "ranks share, part of it is a rank waiting for another that was slowed by its neighbours.",
      mode_info(e.mode).splits_layers ? "tensor-parallel all-reduces" : "FSDP all-gathers and reduce-scatters", 100 * share,
      who);
  f.fix = mode_fix(e, false);
  for (const auto& b : e.breakdown) f.explains.push_back({b.rank, b.device, b.comm_share.value_or(0)});
  return f;
}

std::optional<Finding> exposed_communication(const Evidence& e) {
  const bool device = std::any_of(e.timelines.begin(), e.timelines.end(),
                                  [](const TimelineEvidence& t) { return t.breakdown.overlap.has_value(); });
  if (device) return on_timelines(e);
  if (layer_or_state_collectives(e)) return on_host_ranks(e);
  return on_host(e);
}

}  // namespace dpb::doctor::check
