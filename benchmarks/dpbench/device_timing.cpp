#include "benchmarks/dpbench/device_timing.h"

#include <algorithm>
#include <unordered_map>

#include "engine/core/error.h"
#include "engine/core/log.h"

namespace dpb::bench {

DeviceTimingRun start_device_timing(DeviceTiming timing, const std::vector<Device>& devices) {
  DeviceTimingRun run;
  const bool gpu = !devices.empty() && std::all_of(devices.begin(), devices.end(), [](const Device& d) { return d.is_cuda(); });
  if (!gpu || timing == DeviceTiming::off) return run;
  if (timing == DeviceTiming::events) {
    run.collector = start_event_activity(devices);
    return run;
  }
  std::string why;
  run.collector = start_cupti_activity(devices, &why);
  if (run.collector) return run;
  DPB_CHECK(timing == DeviceTiming::automatic)
      << "--device-timing=cupti: " << why << "; use --device-timing=events (CUDA timing events) or auto (CUPTI, "
      << "else events)";
  log::warn("--device-timing=auto: {}; timing device work with CUDA events instead", why);
  run.note = why + "; CUDA timing events instead";
  run.collector = start_event_activity(devices);
  return run;
}

DeviceFigures device_figures(trace::RankTimeline timeline, trace::TimelineSource source,
                             const std::vector<StepRecord>& measured) {
  DeviceFigures f;
  f.source = source;
  timeline.steps.clear();
  timeline.data_waits.clear();
  for (const auto& r : measured) {
    timeline.steps.push_back({r.begin_ns - r.data_ns, r.end_ns});
    if (r.data_ns > 0) timeline.data_waits.push_back({r.begin_ns - r.data_ns, r.begin_ns});
  }
  const Window w = measured_window(measured);
  trace::AnalysisOptions o;
  o.window = trace::Span64{w.lo, w.hi};
  // Launch calls exist only in CUPTI's records; events time spans, not launches.
  o.launches_known = source == trace::TimelineSource::cupti;
  f.analysis = trace::analyze_rank(timeline, o);
  f.timeline = std::move(timeline);
  return f;
}

std::optional<DeviceFigures> finish_device_timing(DeviceTimingRun& run, const std::vector<StepRecord>& measured) {
  if (!run.collector) return std::nullopt;
  run.collector->stop();
  const Window w = measured_window(measured);
  DeviceFigures f = device_figures(run.collector->timeline({w.lo, w.hi}), run.collector->source(), measured);
  f.dropped = run.collector->dropped();
  f.clock_residual_ns = run.collector->clock_residual_ns();
  f.note = run.note;
  if (f.dropped > 0)
    log::warn("the device timeline lost {} record(s) (its bound, or CUPTI's buffers); its figures undercount the "
              "device's work",
              f.dropped);
  return f;
}

int fill_bucket_times(const DeviceFigures& f, int device, std::vector<StepRecord>& measured) {
  if (f.source != trace::TimelineSource::cupti) return 0;
  const trace::RankTimeline& t = f.timeline;
  std::vector<std::pair<int64_t, int64_t>> kernels;  // the all-reduces on `device`, by start
  for (const auto& w : t.work)
    if (w.device == device && w.work == trace::Work::communication &&
        trace::collective_kind(t.names.name(w.name)) == trace::CollectiveKind::all_reduce)
      kernels.emplace_back(w.begin_ns, w.end_ns);
  std::sort(kernels.begin(), kernels.end());
  int filled = 0;
  for (auto& r : measured) {
    std::vector<BucketRecord*> unknown;
    for (auto& b : r.buckets)
      if (b.comm_start_ns <= 0) unknown.push_back(&b);
    if (unknown.empty()) continue;
    std::stable_sort(unknown.begin(), unknown.end(),
                     [](const BucketRecord* a, const BucketRecord* b) { return a->launch_ns < b->launch_ns; });
    const auto first = std::lower_bound(kernels.begin(), kernels.end(), std::make_pair(r.begin_ns, int64_t{0}));
    const auto last = std::lower_bound(first, kernels.end(), std::make_pair(r.end_ns, int64_t{0}));
    if (last - first != static_cast<std::ptrdiff_t>(unknown.size())) continue;
    for (size_t k = 0; k < unknown.size(); ++k) {
      unknown[k]->comm_start_ns = first[static_cast<std::ptrdiff_t>(k)].first;
      unknown[k]->comm_end_ns = first[static_cast<std::ptrdiff_t>(k)].second;
      ++filled;
    }
  }
  return filled;
}

trace::Breakdown device_breakdown(const DeviceFigures& f, int device, const Window& w) {
  if (const auto* d = f.analysis.device(device)) return d->breakdown;
  trace::Breakdown idle;  // nothing ran on it in the window
  idle.window_s = w.seconds();
  idle.idle_share = 1.0;
  idle.compute_share = idle.comm_share = idle.memory_share = 0.0;
  return idle;
}

void apply_device_figures(const DeviceFigures& f, int device, const Window& w, RankMetrics& m) {
  const trace::Breakdown b = device_breakdown(f, device, w);
  m.set_breakdown(b);
  m.busy_fraction = b.idle_share ? 1.0 - *b.idle_share : 0.0;
  const auto* d = f.analysis.device(device);
  if (!d) {
    m.compute_s = m.comm_s = m.exposed_comm_s = m.exposed_share = m.overlap_ratio = 0;
    return;
  }
  m.compute_s = d->compute_per_step_s.value_or(0);
  m.comm_s = d->comm_per_step_s.value_or(0);
  m.exposed_comm_s = d->exposed_comm_per_step_s.value_or(0);
  m.overlap_ratio = m.comm_s > 0 ? 1.0 - m.exposed_comm_s / m.comm_s : 0;
  m.exposed_share = m.step_median_s > 0 ? m.exposed_comm_s / m.step_median_s : 0;
}

}  // namespace dpb::bench

namespace dpb::bench {

std::vector<trace::Interval> device_intervals(const DeviceFigures& f) {
  const trace::RankTimeline& t = f.timeline;
  std::vector<trace::Interval> out;
  std::unordered_map<int64_t, int> device_of;  // a launch's device: its work's
  for (const auto& w : t.work) {
    trace::Interval i;
    i.name = t.names.name(w.name);
    i.cat = w.work == trace::Work::communication ? trace::Category::comm
            : w.work == trace::Work::memory      ? trace::Category::copy
                                                 : trace::Category::compute;
    i.device = w.device;
    i.lane = "gpu stream " + std::to_string(w.stream);
    i.begin_ns = w.begin_ns;
    i.end_ns = w.end_ns;
    if (w.correlation >= 0) {
      i.args.emplace_back("correlation", w.correlation);
      device_of.emplace(w.correlation, w.device);
    }
    if (w.bytes >= 0) i.args.emplace_back("bytes", w.bytes);
    out.push_back(std::move(i));
  }
  const int main = f.analysis.main_device;
  for (const auto& c : t.calls) {
    trace::Interval i;
    i.name = t.names.name(c.name);
    i.cat = trace::Category::compute;  // host time, on its own lane
    const auto it = device_of.find(c.correlation);
    i.device = it != device_of.end() ? it->second : main;
    i.lane = "cuda api";
    i.begin_ns = c.begin_ns;
    i.end_ns = c.end_ns;
    if (c.correlation >= 0 && it != device_of.end()) i.args.emplace_back("launch", c.correlation);
    out.push_back(std::move(i));
  }
  return out;
}

}  // namespace dpb::bench
