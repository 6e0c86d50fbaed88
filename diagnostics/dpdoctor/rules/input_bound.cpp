// The training loop waits for batches: the input pipeline, not the devices, sets the pace.
// On a device timeline (a profiler trace), the idle gaps the host spent in the
// DataLoader's __next__; else (a dpbench report) the loop's measured wait for data.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

namespace {

constexpr const char* kFix =
    "load ahead in parallel (DataLoader num_workers > 0 with prefetch, pin_memory; in dpbench --workers=N), cache "
    "decoded data, or make the input on the device (torch.randn(..., device=\"cuda\"), augmentation and "
    "preprocessing on the GPU)";

// The step with the input made ahead: the profiled steps replayed without the waits for
// the input (trace/replay.h), each batch's hand-over kept.
Prediction input_ahead_prediction(const TimelineEvidence& t) {
  Prediction p;
  p.method =
      "replay: the profiled steps replayed with the DataLoader's waits and the input made on the CPU cut from the "
      "host; device work keeps its measured durations and starts when its launch (moved) queued it and its stream "
      "was free; blocking calls wait for the replayed device; each batch's copy to the device from pageable memory "
      "is read once more (a batch from a worker arrives in shared memory); the workers' own load on the host's "
      "cores is not modelled";
  if (!t.input_ahead || t.input_ahead->replay.replayed_ns.empty()) {
    p.reason = "the trace has no profiled steps (ProfilerStep#N) to replay";
    return p;
  }
  const auto& in = *t.input_ahead;
  const double measured = static_cast<double>(in.replay.measured_median_ns) * 1e-9;
  const double replayed = static_cast<double>(in.replay.replayed_median_ns) * 1e-9;
  p.step_time_s = figure(replayed).get<double>();
  p.measured_step_time_s = figure(measured).get<double>();
  p.gain_share = measured > 0 ? figure(1 - replayed / measured).get<double>() : 0.0;
  const double steps = static_cast<double>(in.replay.measured_ns.size());
  p.inputs = {{"device", t.who()},
              {"steps", in.replay.measured_ns.size()},
              {"batches", in.batches},
              {"cut_per_step_s", figure(static_cast<double>(in.replay.cut_ns) * 1e-9 / steps)},
              {"handover_per_step_s", figure(static_cast<double>(in.handover_ns) * 1e-9 / steps)},
              {"given_back_to_device_waits_per_step_s",
               figure(static_cast<double>(in.replay.device_waited_ns) * 1e-9 / steps)}};
  return p;
}

// A dpbench run: with W workers each making a batch in L, the loop gets one every L / W,
// so an iteration takes max(C, L / W) for a step of C; the run measured C and the wait
// (with no workers the loop makes every batch itself: L is the wait). Enough workers,
// W >= L / C, leave the step alone; the fix asks for a fifth more.
Prediction workers_prediction(const Evidence& e, double wait) {
  Prediction p;
  p.method =
      "loader model: with W workers each making a batch in L, the loop gets one every L / W, so an iteration takes "
      "max(step, L / W); L from the measured wait (no workers: L is the wait; W workers: W x (step + wait)); the "
      "workers' own load on the cores is not modelled";
  if (e.step_s <= 0 || e.workers < 0) {
    p.reason = "the run recorded no step time or no worker count";
    return p;
  }
  const double step = e.step_s;
  const double load = e.workers == 0 ? wait : e.workers * (step + wait);
  // A fifth more than L / C: a worker late by a little would otherwise set the pace.
  const int needed = std::max(e.workers + 1, static_cast<int>(std::ceil(1.2 * load / step)));
  p.measured_step_time_s = figure(step + wait).get<double>();
  p.step_time_s = figure(std::max(step, load / needed)).get<double>();
  p.gain_share = figure(1 - *p.step_time_s / (step + wait)).get<double>();
  p.inputs = {{"step_s", figure(step)},
              {"wait_per_step_s", figure(wait)},
              {"workers", e.workers},
              {"load_per_batch_s", figure(load)},
              {"workers_needed", needed}};
  return p;
}

std::optional<Finding> from_timelines(const Evidence& e) {
  const auto [t, share] = worst(e, [](const TimelineEvidence& x) { return x.share(trace::IdleCause::data_loading); });
  if (!t || share < 0.01) return std::nullopt;
  const auto& c = t->idle;
  const int64_t data = c[trace::IdleCause::data_loading];
  // After a cold start (which cold-start names), judged on the steady state: the window
  // past the first iteration, and its idle time.
  const int64_t cold_len = c.cold_start.second - c.cold_start.first;
  const bool cold = c.warmup_ns() > 0 && c.window_ns > cold_len;
  int64_t cold_idle = 0;
  for (auto v : c.cold_ns) cold_idle += v;
  const int64_t steady_data = cold ? data - c.cold(trace::IdleCause::data_loading) : data;
  const int64_t steady_idle = std::max<int64_t>(1, cold ? c.idle_ns - cold_idle : c.idle_ns);
  const double of_idle = static_cast<double>(steady_data) / static_cast<double>(steady_idle);
  const double steady = cold ? static_cast<double>(steady_data) / static_cast<double>(c.window_ns - cold_len) : share;
  Finding f;
  f.severity = std::max(share, steady) >= 0.05 && of_idle >= 0.25 ? Severity::warning : Severity::info;
  const auto& ops = c.ops_of(trace::IdleCause::data_loading);
  f.title = fmt::format("{} waits for the input: {:.0f}% of the window ({:.0f}% of its idle time{}) passes while "
                        "the host makes the next input ({})",
                        t->who(), 100 * share, 100 * of_idle, cold ? " after the cold start" : "",
                        ops.empty() ? std::string("DataLoader __next__") : ops_text(ops, 2));
  f.evidence = {{"device", t->who()},
                {"data_loading_share", figure(share)},
                {"share_of_idle", figure(of_idle)},
                {"share_after_cold_start", cold ? figure(steady) : nlohmann::json(nullptr)},
                {"data_loading_s", figure(data * 1e-9)},
                {"iterations", c.iterations.count},
                {"wait_per_iteration_s", figure(data * 1e-9 / std::max(1, c.iterations.count))},
                {"loop_data_wait_share", figure(e.data_wait_share)},
                {"host_ops", ops_table(ops)},
                {"time_source", trace::timeline_source_name(e.timeline_source)}};
  f.explanation = fmt::format(
      "Between iterations the device idled {} (about {} an iteration) while the host made the next input: the "
      "DataLoader's __next__, ops that make the input on the CPU (random generation on CPU tensors, decoding, "
      "preprocessing), and host work in a profiled step before its first launch. Loading and preparing run in the "
      "training process, behind the compute, so a faster GPU would not help. The host ops charged: {}.",
      duration_text(data * 1e-9), duration_text(data * 1e-9 / std::max(1, c.iterations.count)),
      ops.empty() ? std::string("none named") : ops_text(ops, 5));
  f.fix = kFix;
  for (const auto& x : e.timelines) f.explains.push_back(claim(x, x.share(trace::IdleCause::data_loading)));
  f.predicted = input_ahead_prediction(*t);
  return f;
}

}  // namespace

std::optional<Finding> input_bound(const Evidence& e) {
  const bool attributed = std::any_of(e.timelines.begin(), e.timelines.end(),
                                      [](const TimelineEvidence& t) { return t.launches_known && t.idle.window_ns > 0; });
  if (attributed) return from_timelines(e);
  // Below the warning, a wait of a tenth of the time or more is said as info (the budget
  // then charges the devices' idle time to the loop's wait, not to nothing).
  if (e.data_wait_share < 0.1) return std::nullopt;
  Finding f;
  f.severity = e.data_wait_share >= 0.3 ? Severity::warning : Severity::info;
  const double wait_per_step = e.step_s > 0 ? e.data_wait_share / (1 - e.data_wait_share) * e.step_s : 0;
  f.title = fmt::format("the training loop waited for data {:.0f}% of the time", 100 * e.data_wait_share);
  f.evidence = {{"data_wait_share", e.data_wait_share},
                {"step_time_s", e.step_s},
                {"wait_per_step_s", wait_per_step},
                {"per_device", device_table(e)}};
  f.explanation = fmt::format(
      "Between steps the devices idled about {:.1f} ms waiting for the next batch, against {:.1f} ms of step: "
      "loading and augmenting runs behind the compute, so faster devices or more of them would not help.",
      wait_per_step * 1e3, e.step_s * 1e3);
  f.fix = kFix;
  f.explains = claim_all(e, e.data_wait_share);
  f.predicted = workers_prediction(e, wait_per_step);
  if (f.predicted->inputs.contains("workers_needed"))
    f.fix += fmt::format(" (here --workers={} make a batch each step)", f.predicted->inputs["workers_needed"].get<int>());
  return f;
}

}  // namespace dpb::doctor::check
