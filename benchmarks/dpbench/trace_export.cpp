#include "benchmarks/dpbench/trace_export.h"

#include <fmt/format.h>

#include <limits>

#include "benchmarks/dpbench/gather.h"
#include "engine/core/log.h"
#include "engine/trace/chrome_trace.h"
#include "engine/trace/timeline.h"
#include "reports/report.h"

namespace dpb::bench {

reports::TimelineExcerpt timeline_excerpt(const StepRecord& step, trace::TimelineSource source, const RankContext* rank,
                                          const std::vector<trace::Interval>& device) {
  const int64_t lo = step.begin_ns - step.data_ns, hi = step.end_ns;
  reports::TimelineExcerpt out;
  out.source = source;
  out.span_s = static_cast<double>(hi - lo) * 1e-9;
  out.step = step.step;
  // This process's intervals in the window; under DDP labelled with the rank.
  std::vector<reports::TimelineInterval> rows;
  std::vector<trace::Interval> intervals = trace::timeline().intervals();
  intervals.insert(intervals.end(), device.begin(), device.end());
  for (const auto& i : intervals) {
    if (i.end_ns < lo || i.begin_ns > hi) continue;
    rows.push_back({rank ? rank->group->rank() : i.device, i.lane, i.name, trace::category_name(i.cat),
                    static_cast<double>(std::max(i.begin_ns, lo) - lo) * 1e-9,
                    static_cast<double>(std::min(i.end_ns, hi) - lo) * 1e-9});
  }
  if (!rank) {
    out.intervals = std::move(rows);
    return out;
  }
  // Each rank's rows are relative to its own window of the same step.
  nlohmann::json mine = nlohmann::json::array();
  for (const auto& r : rows) mine.push_back({r.device, r.lane, r.name, r.cat, *r.begin_s, *r.end_s});
  for (const auto& text : gather_strings(*rank->group, mine.dump(), rank->device))
    for (const auto& r : nlohmann::json::parse(text))
      out.intervals.push_back({r[0].get<int>(), r[1].get<std::string>(), r[2].get<std::string>(),
                               r[3].get<std::string>(), r[4].get<double>(), r[5].get<double>()});
  return out;
}

void write_trace(const BenchOptions& o, const TrainResult& result, const std::vector<std::string>& device_ids,
                 const RankContext* rank, const std::vector<trace::Interval>& device) {
  std::vector<trace::Interval> intervals = trace::timeline().intervals();
  intervals.insert(intervals.end(), device.begin(), device.end());
  std::vector<trace::TraceStep> steps;
  for (const auto& r : result.steps) steps.push_back({r.step, r.warmup, r.begin_ns, r.end_ns});
  std::vector<trace::TraceProcess> processes;
  if (rank) {
    nlohmann::json js = nlohmann::json::array();
    for (const auto& s : steps) js.push_back({s.step, s.warmup, s.begin_ns, s.end_ns});
    const nlohmann::json mine = {{"intervals", trace::intervals_json(intervals)}, {"steps", js}};
    const auto all = gather_strings(*rank->group, mine.dump(), rank->device);
    if (rank->group->rank() != 0) return;
    for (size_t r = 0; r < all.size(); ++r) {
      const auto j = nlohmann::json::parse(all[r]);
      trace::TraceProcess p;
      p.pid = static_cast<int>(r);
      p.name = fmt::format("rank {} ({})", r, device_kind_name(o.device.kind));
      p.intervals = trace::intervals_from_json(j["intervals"]);
      for (const auto& s : j["steps"])
        p.steps.push_back({s[0].get<int64_t>(), s[1].get<bool>(), s[2].get<int64_t>(), s[3].get<int64_t>()});
      processes.push_back(std::move(p));
    }
  } else {
    for (int d = 0; d < o.device.count; ++d) {
      trace::TraceProcess p;
      p.pid = d;
      p.name = device_ids[static_cast<size_t>(d)];
      for (const auto& i : intervals)
        if (i.device == bench_device(o, d).index) p.intervals.push_back(i);
      if (d == 0) p.steps = steps;
      processes.push_back(std::move(p));
    }
  }
  int64_t origin = std::numeric_limits<int64_t>::max();
  for (const auto& p : processes) {
    for (const auto& i : p.intervals) origin = std::min(origin, i.begin_ns);
    for (const auto& s : p.steps) origin = std::min(origin, s.begin_ns);
  }
  if (origin == std::numeric_limits<int64_t>::max()) origin = 0;
  const nlohmann::json meta = {{"tool", "dpbench"},
                               {"mode", parallel_mode_name(o.mode)},
                               {"model", o.data.model},
                               {"devices", device_kind_name(o.device.kind)},
                               {"world_size", rank ? rank->group->size() : o.device.count},
                               // ts 0 on the host's steady clock (CLOCK_MONOTONIC; rank 0's host for
                               // ranks' traces): lines the trace up with other processes' times.
                               {"clock_origin_ns", origin}};
  reports::write_report(o.out.trace_path, trace::chrome_trace(processes, origin, meta));
  log::info("trace written to {} (open in ui.perfetto.dev)", o.out.trace_path);
}

}  // namespace dpb::bench
