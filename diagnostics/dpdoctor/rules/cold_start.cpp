// The trace holds the program's cold start: the first iteration's CUDA and library
// set-up (a kernel's first launch loads its module, cuDNN and cuBLAS create handles,
// streams and events, the caching allocator grows, cuDNN's benchmark mode times
// candidate algorithms) and host time the profiler did not record. It is paid once per
// process; a trace that holds it says little about training's steady state, so the
// cold start is named as such, with its length and what the host did in it, and is not
// spread over a starved or host-sync verdict.
#include <fmt/format.h>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

std::optional<Finding> cold_start(const Evidence& e) {
  const auto [t, share] = worst(e, [](const TimelineEvidence& x) { return x.share(x.idle.warmup_ns()); });
  // Below 10% of the window it is said as advice: the budget charges it to set-up.
  if (!t || share < 0.01) return std::nullopt;
  const auto& c = t->idle;
  int64_t cold_idle = 0;
  for (auto v : c.cold_ns) cold_idle += v;
  const int64_t cold_len = c.cold_start.second - c.cold_start.first;
  const double warmup_s = c.warmup_ns() * 1e-9;
  const double of_idle = c.idle_ns > 0 ? static_cast<double>(c.warmup_ns()) / static_cast<double>(c.idle_ns) : 0.0;
  std::string calls;
  for (size_t i = 0; i < c.calls.size() && i < 3; ++i)
    calls += fmt::format("{}{} ({} call(s), {}, the longest {})", i ? ", " : "", c.calls[i].name, c.calls[i].count,
                         duration_text(c.calls[i].ns * 1e-9), duration_text(c.calls[i].longest_ns * 1e-9));
  const bool whole = c.iterations.count <= 1 || c.cold_start.second >= c.cold_start.first + c.window_ns;
  const int64_t after_len = c.window_ns - cold_len;
  std::optional<double> after_idle;
  if (!whole && after_len > 0) after_idle = static_cast<double>(c.idle_ns - cold_idle) / static_cast<double>(after_len);

  Finding f;
  f.severity = share >= 0.10 ? Severity::warning : Severity::info;
  f.title = fmt::format("{} is a cold start: {} of CUDA and library set-up in its {}{}, {:.0f}% of the window "
                        "({:.0f}% of the idle time)",
                        t->who(), duration_text(warmup_s), whole ? "only iteration" : "first iteration",
                        c.late_cold_ns > 0 && !whole ? " and later first launches" : "", 100 * share, 100 * of_idle);
  f.evidence = {{"device", t->who()},
                {"cold_start_s", figure(cold_len * 1e-9)},
                {"warmup_s", figure(warmup_s)},
                {"warmup_share", figure(share)},
                {"share_of_idle", figure(of_idle)},
                {"iterations", c.iterations.count},
                {"iterations_from", c.iterations.marker},
                {"allocator_s", figure(c.cold(trace::IdleCause::allocator) * 1e-9)},
                {"slow_calls_s", figure(c.cold(trace::IdleCause::slow_call) * 1e-9)},
                {"unrecorded_s", figure(c.cold(trace::IdleCause::unrecorded) * 1e-9)},
                {"later_first_launch_gaps_s", figure(c.late_cold_ns * 1e-9)},
                {"calls", calls_table(c.calls)},
                {"longest_gaps", gaps_table(*t, true)},
                {"idle_after_cold_start", figure(after_idle)},
                {"time_source", trace::timeline_source_name(e.timeline_source)}};
  f.explanation = fmt::format(
      "{} The device idled {} there while its host was in set-up, not training: {}{}. This is paid once per "
      "process: the first launch of each kernel loads its module, cuDNN and cuBLAS create their handles, streams "
      "and events, the caching allocator grows, and cuDNN's benchmark mode times candidate algorithms (the "
      "synchronizations inside convolutions). Judged on this trace, the job would look starved; {}",
      whole ? "The trace is one iteration (no ProfilerStep, DataLoader or optimizer step marks another)."
            : fmt::format("Its first iteration (up to the next {}) lasts {}{}.", c.iterations.marker,
                          duration_text(cold_len * 1e-9),
                          c.late_cold_ns > 0 ? fmt::format("; later gaps that waited on a kernel's first launch or on "
                                                           "CUDA set-up add {}",
                                                           duration_text(c.late_cold_ns * 1e-9))
                                             : ""),
      duration_text(warmup_s), calls.empty() ? "slow CUDA calls" : calls,
      c.cold(trace::IdleCause::unrecorded) > 0
          ? fmt::format(", and {} in which the launching thread recorded nothing (Python outside any op, the "
                        "profiler starting)",
                        duration_text(c.cold(trace::IdleCause::unrecorded) * 1e-9))
          : "",
      after_idle ? fmt::format("after the cold start the device idles {:.0f}% of the time, which the other findings "
                               "explain.",
                               100 * *after_idle)
                 : "the steady state is not in it.");
  f.fix = "profile after warm-up: torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=2, active=3)) "
          "and call prof.step() every iteration, so the trace shows training and not start-up; run a warm-up "
          "iteration before timing anything; CUDA_MODULE_LOADING=EAGER moves module loading to start-up; keep "
          "torch.backends.cudnn.benchmark=True only when input shapes stay fixed";
  for (const auto& x : e.timelines) f.explains.push_back(claim(x, x.share(x.idle.warmup_ns())));
  return f;
}

}  // namespace dpb::doctor::check
