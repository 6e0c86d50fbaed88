// Past the cold start, a few long gaps in which the device waits for its host doing
// something other than launching: the caching allocator growing or freeing memory
// (cudaMalloc/cudaFree after the first iteration: fragmentation, empty_cache), slow CUDA
// calls, long host work (CPU computation, checkpoints, logging, evaluation), or time the
// profiler did not record at all. They are named one by one, with the host activity in
// them: each is a one-off to remove, not a throughput problem to tune.
#include <fmt/format.h>

#include <algorithm>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

std::optional<Finding> long_host_gaps(const Evidence& e) {
  const auto [t, share] = worst(e, [](const TimelineEvidence& x) { return x.share(x.idle.one_off_ns()); });
  // Below 10% of the window, advice: the budget charges the time to these gaps.
  if (!t || share < 0.01) return std::nullopt;
  const auto& c = t->idle;
  using trace::IdleCause;
  auto after = [&](IdleCause k) { return (c[k] - c.cold(k)) * 1e-9; };
  const std::vector<std::pair<IdleCause, std::string>> kinds{
      {IdleCause::allocator, "the caching allocator (cudaMalloc/cudaFree)"},
      {IdleCause::slow_call, "slow CUDA calls"},
      {IdleCause::host_work, "long host work recorded as ops (CPU computation, copies of CPU tensors, checkpoints)"},
      {IdleCause::unrecorded, "host time the profiler did not record (Python outside any op: logging, evaluation, "
                              "checkpoint writing; or the profiler stopping and starting)"}};
  const auto top = std::max_element(kinds.begin(), kinds.end(),
                                    [&](const auto& a, const auto& b) { return after(a.first) < after(b.first); });
  Finding f;
  f.severity = share >= 0.10 ? Severity::warning : Severity::info;
  f.title = fmt::format("{} idles {:.0f}% of the window in long one-off gaps, mostly {}", t->who(), 100 * share,
                        top->second.substr(0, top->second.find(" (")));
  f.evidence = {{"device", t->who()},
                {"share", figure(share)},
                {"allocator_s", figure(after(IdleCause::allocator))},
                {"slow_calls_s", figure(after(IdleCause::slow_call))},
                {"host_work_s", figure(after(IdleCause::host_work))},
                {"unrecorded_s", figure(after(IdleCause::unrecorded))},
                {"calls", calls_table(c.calls)},
                {"longest_gaps", gaps_table(*t, false)},
                {"time_source", trace::timeline_source_name(e.timeline_source)}};
  f.explanation = fmt::format(
      "Outside the first iteration the device waited {} in gaps of 10 ms or more (or in allocator and slow calls) "
      "while its host did something else than launch work: most of it {}. Such gaps recur only where the program "
      "does something now and then (a checkpoint, an evaluation, logging) or where memory is allocated anew each "
      "time.",
      duration_text(c.one_off_ns() * 1e-9), top->second);
  f.fix = "open the trace at the longest gaps (their offsets are in the evidence): move checkpoints, evaluation and "
          "logging off the training thread or to every N steps, avoid torch.cuda.empty_cache() in the loop, keep "
          "tensor shapes stable so the caching allocator can reuse its blocks "
          "(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation)";
  for (const auto& x : e.timelines) f.explains.push_back(claim(x, x.share(x.idle.one_off_ns())));
  return f;
}

}  // namespace dpb::doctor::check
