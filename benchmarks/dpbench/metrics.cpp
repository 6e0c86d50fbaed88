#include "benchmarks/dpbench/metrics.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>
#include <utility>

#include "engine/core/stats.h"
#include "engine/trace/analysis.h"
#include "engine/trace/timeline.h"

namespace dpb::bench {

namespace {

// Total length of the union of intervals, and of its intersection with [lo, hi).
void merged(std::vector<std::pair<int64_t, int64_t>> iv, int64_t lo, int64_t hi, int64_t* total, int64_t* inside) {
  std::sort(iv.begin(), iv.end());
  int64_t cur_a = -1, cur_b = -1;
  auto flush = [&] {
    if (cur_b <= cur_a) return;
    *total += cur_b - cur_a;
    *inside += std::max<int64_t>(0, std::min(cur_b, hi) - std::max(cur_a, lo));
  };
  for (const auto& [a, b] : iv) {
    if (a > cur_b) {
      flush();
      cur_a = a;
      cur_b = b;
    } else {
      cur_b = std::max(cur_b, b);
    }
  }
  flush();
}

double seconds(int64_t ns) { return static_cast<double>(ns) * 1e-9; }

}  // namespace

Window measured_window(const std::vector<StepRecord>& measured) {
  if (measured.empty()) return {};
  return {measured.front().begin_ns - measured.front().data_ns, measured.back().end_ns};
}

double busy_fraction(int device, const Window& w) {
  return w.hi > w.lo ? seconds(trace::timeline().busy_ns(device, w.lo, w.hi)) / w.seconds() : 0.0;
}

trace::Breakdown host_breakdown(int device, const Window& w) {
  trace::RankTimeline t;
  for (const auto& i : trace::timeline().intervals()) {
    if (i.device != device || i.cat == trace::Category::data) continue;
    trace::DeviceWork x;
    x.device = device;
    x.begin_ns = i.begin_ns;
    x.end_ns = i.end_ns;
    x.work = i.cat == trace::Category::comm   ? trace::Work::communication
             : i.cat == trace::Category::copy ? trace::Work::memory
                                              : trace::Work::compute;
    t.work.push_back(x);
  }
  trace::AnalysisOptions o;
  o.window = trace::Span64{w.lo, w.hi};
  o.launches_known = false;
  const trace::RankAnalysis a = trace::analyze_rank(t, o);
  if (const auto* d = a.device(device)) return d->breakdown;
  trace::Breakdown idle;  // nothing ran on it
  idle.window_s = w.seconds();
  idle.idle_share = 1.0;
  idle.compute_share = idle.comm_share = idle.memory_share = 0.0;
  return idle;
}

std::vector<double> compute_per_step(const std::vector<StepRecord>& measured, int device) {
  const Window w = measured_window(measured);
  std::vector<std::pair<int64_t, int64_t>> compute;
  for (const auto& i : trace::timeline().intervals())
    if (i.device == device && i.cat == trace::Category::compute && i.begin_ns >= w.lo && i.end_ns <= w.hi)
      compute.emplace_back(i.begin_ns, i.end_ns);
  std::vector<double> per_step;
  for (const auto& r : measured) per_step.push_back(seconds(trace::union_ns(compute, r.begin_ns, r.end_ns)));
  return per_step;
}

RankMetrics rank_metrics(const std::vector<StepRecord>& measured, const std::vector<StepRecord>& all, int device) {
  RankMetrics m;
  std::vector<double> times;
  double step_s = 0, data_s = 0;
  int64_t comm = 0, overlap = 0;
  // DDP: its buckets' all-reduces against backward. FSDP (no buckets): the collectives
  // on the communication lane, of which the exposed part is what the training thread
  // waited for them (its own lane's communication spans).
  std::vector<std::pair<int64_t, int64_t>> lane_comm, waits;
  for (const auto& i : trace::timeline().intervals()) {
    if (i.device != device || i.cat != trace::Category::comm) continue;
    (i.lane == "comm" ? lane_comm : waits).emplace_back(i.begin_ns, i.end_ns);
  }
  for (const auto& r : measured) {
    times.push_back(r.seconds());
    step_s += r.seconds();
    data_s += seconds(r.data_ns);
    if (r.buckets.empty() && !lane_comm.empty()) {
      const int64_t c = trace::union_ns(lane_comm, r.begin_ns, r.end_ns);
      comm += c;
      overlap += std::max<int64_t>(0, c - trace::union_ns(waits, r.begin_ns, r.end_ns));
      continue;
    }
    std::vector<std::pair<int64_t, int64_t>> iv;
    for (const auto& b : r.buckets)
      if (b.comm_start_ns > 0 && b.comm_end_ns >= b.comm_start_ns) iv.emplace_back(b.comm_start_ns, b.comm_end_ns);
    merged(iv, r.backward_begin_ns, r.backward_end_ns, &comm, &overlap);
  }
  const Summary st = summarize(times);
  m.step_median_s = st.median;
  m.step_p90_s = st.p90;
  m.data_wait_share = data_s + step_s > 0 ? data_s / (data_s + step_s) : 0;
  const Window w = measured_window(measured);
  if (!measured.empty() && w.hi > w.lo) {
    m.busy_fraction = busy_fraction(device, w);
    std::vector<double> optim;
    for (const auto& i : trace::timeline().intervals())
      if (i.device == device && i.begin_ns >= w.lo && i.end_ns <= w.hi && i.cat == trace::Category::optim)
        optim.push_back(seconds(i.end_ns - i.begin_ns));
    if (!optim.empty()) m.optimizer_s = summarize(optim).median;
    // Compute per step, the median over the measured steps: one step that the machine
    // interrupted does not make a rank look slow.
    m.compute_s = summarize(compute_per_step(measured, device)).median;
  }
  // Per step: communication time, and the part of it outside backward.
  const double nsteps = std::max<double>(1.0, static_cast<double>(measured.size()));
  m.comm_s = seconds(comm) / nsteps;
  m.overlap_ratio = comm > 0 ? static_cast<double>(overlap) / static_cast<double>(comm) : 0;
  m.exposed_comm_s = seconds(comm - overlap) / nsteps;
  m.exposed_share = step_s > 0 ? m.exposed_comm_s * nsteps / step_s : 0;
  for (const auto& r : all) m.samples += static_cast<double>(r.samples);
  m.steps = static_cast<double>(measured.size());
  if (w.hi > w.lo) m.set_breakdown(host_breakdown(device, w));
  return m;
}

void RankMetrics::set_breakdown(const trace::Breakdown& b) {
  window_s = b.window_s;
  idle_share = b.idle_share.value_or(-1);
  compute_share = b.compute_share.value_or(-1);
  comm_share = b.comm_share.value_or(-1);
  memory_share = b.memory_share.value_or(-1);
  overlap = b.overlap.value_or(-1);
}

std::vector<double> wait_for_peers(const std::vector<RankRecord>& ranks) {
  if (ranks.size() < 2) return {};
  for (const auto& r : ranks)
    if (r.placement.host != ranks.front().placement.host || r.collectives.size() != ranks.front().collectives.size())
      return {};
  const size_t steps = ranks.front().collectives.size();
  if (steps == 0) return {};
  std::vector<double> wait(ranks.size(), 0.0);
  for (size_t k = 0; k < steps; ++k) {
    const size_t buckets = ranks.front().collectives[k].size();
    for (const auto& r : ranks)
      if (r.collectives[k].size() != buckets) return {};
    for (size_t b = 0; b < buckets; ++b) {
      int64_t last = 0;
      for (const auto& r : ranks) last = std::max(last, r.collectives[k][b].start_ns);
      for (size_t i = 0; i < ranks.size(); ++i) {
        const auto& c = ranks[i].collectives[k][b];
        if (c.start_ns <= 0 || c.end_ns < c.start_ns) return {};  // not recorded
        wait[i] += seconds(std::clamp<int64_t>(last - c.start_ns, 0, c.end_ns - c.start_ns));
      }
    }
  }
  for (auto& w : wait) w /= static_cast<double>(steps);
  return wait;
}

std::optional<CollectiveCosts> collective_costs(const RankRecord& rank) {
  if (rank.collectives.empty()) return std::nullopt;
  CollectiveCosts c;
  for (const auto& step : rank.collectives) {
    int64_t free_from = 0;  // the communication thread finished the step's previous bucket
    for (const auto& b : step) {
      if (b.launch_ns <= 0 || b.start_ns < b.launch_ns || b.end_ns < b.start_ns || b.done_ns < b.end_ns)
        return std::nullopt;  // not recorded
      c.collective_s += seconds(b.end_ns - b.start_ns);
      const int64_t takeable = std::max(b.launch_ns, free_from);
      const int64_t awaited = b.wait_ns > 0 ? std::max(b.end_ns, b.wait_ns) : b.end_ns;
      c.handoff_s += seconds(std::max<int64_t>(0, b.start_ns - takeable)) +
                     seconds(std::max<int64_t>(0, b.done_ns - awaited));
      free_from = b.end_ns;
    }
  }
  const double steps = static_cast<double>(rank.collectives.size());
  c.collective_s /= steps;
  c.handoff_s /= steps;
  return c;
}

reports::SameData same_data(const std::vector<RankRecord>& ranks) {
  size_t steps = ranks.empty() ? 0 : ranks.front().data_hashes.size();
  for (const auto& r : ranks) steps = std::min(steps, r.data_hashes.size());
  int64_t identical = 0;
  for (size_t k = 0; k < steps; ++k) {
    bool same = true;
    for (const auto& r : ranks) same = same && r.data_hashes[k] == ranks.front().data_hashes[k];
    identical += same ? 1 : 0;
  }
  return {static_cast<int64_t>(steps), identical};
}

std::vector<reports::BucketStats> bucket_stats(const StepRecord& step) {
  std::vector<reports::BucketStats> rows;
  const auto ms = [&](int64_t t) {
    return t > 0 ? reports::Num(static_cast<double>(t - step.backward_begin_ns) * 1e-6) : reports::Num();
  };
  for (const auto& b : step.buckets)
    rows.push_back({b.index, b.bytes, b.params, ms(b.ready_ns), ms(b.launch_ns), ms(b.comm_start_ns),
                    ms(b.comm_end_ns), ms(b.done_ns)});
  return rows;
}

namespace {
using Spans = std::vector<std::pair<int64_t, int64_t>>;
// Per step over the window: the primary's own work, its replica's, and the time no device
// worked while the loop was not waiting for data.
void set_split(reports::DpStats& s, Spans own, Spans replica, Spans any_device, Spans data, const Window& w,
               size_t measured_steps) {
  const double per_step = 1e-9 / static_cast<double>(std::max<size_t>(1, measured_steps));
  s.primary_only_s = static_cast<double>(trace::union_ns(std::move(own), w.lo, w.hi)) * per_step;
  s.primary_replica_s = static_cast<double>(trace::union_ns(std::move(replica), w.lo, w.hi)) * per_step;
  const auto busy_or_waiting = trace::unite(trace::merged(std::move(any_device), w.lo, w.hi),
                                            trace::merged(std::move(data), w.lo, w.hi));
  s.host_only_s = static_cast<double>(w.hi - w.lo - trace::total_length(busy_or_waiting)) * per_step;
}

// Each device's replica work per step, in the devices' order; null where nothing of the
// device's was recorded in the window.
void set_replicas(reports::DpStats& s, std::map<int, Spans> replicas, const std::vector<int>& devices,
                  const Window& w, size_t measured_steps) {
  const double per_step = 1e-9 / static_cast<double>(std::max<size_t>(1, measured_steps));
  s.replica_s.clear();
  for (int d : devices) {
    auto it = replicas.find(d);
    const int64_t ns = it == replicas.end() ? 0 : trace::union_ns(std::move(it->second), w.lo, w.hi);
    s.replica_s.push_back(ns > 0 ? reports::Num(static_cast<double>(ns) * per_step) : reports::Num());
  }
}
}  // namespace

std::vector<reports::Num> replica_waits(const std::vector<trace::Interval>& host, const std::vector<int>& devices,
                                        const Window& w, size_t measured_steps) {
  // Per phase name, per device, the ends of its replica spans in the window, in order:
  // the k-th of each device's is the same step's.
  std::map<std::string, std::map<int, std::vector<int64_t>>> ends;
  for (const auto& i : host)
    if (i.lane == "replica" && i.begin_ns >= w.lo && i.end_ns <= w.hi) ends[i.name][i.device].push_back(i.end_ns);
  std::map<int, int64_t> waited;
  for (int d : devices) waited[d] = 0;
  bool any = false;
  for (auto& [name, by_device] : ends) {
    size_t n = SIZE_MAX;
    for (int d : devices) {
      auto it = by_device.find(d);
      if (it == by_device.end()) return {};  // a device without this phase: not measured
      std::sort(it->second.begin(), it->second.end());
      n = std::min(n, it->second.size());
    }
    for (size_t k = 0; k < n; ++k) {
      int64_t latest = 0;
      for (int d : devices) latest = std::max(latest, by_device[d][k]);
      for (int d : devices) waited[d] += latest - by_device[d][k];
      any = true;
    }
  }
  if (!any) return {};
  const double per_step = 1e-9 / static_cast<double>(std::max<size_t>(1, measured_steps));
  std::vector<reports::Num> out;
  for (int d : devices) out.push_back(static_cast<double>(waited[d]) * per_step);
  return out;
}

reports::DpStats dp_stats(const DataParallel& dp, bool bypass, bool replicate_input, const std::vector<int>& devices,
                          const Window& w, size_t measured_steps, const std::vector<trace::Interval>& host,
                          const trace::RankTimeline* device) {
  const int primary = devices.front();
  reports::DpStats s;
  s.forward = bypass ? "bypass" : "scatter";
  s.input = replicate_input ? "list" : "tensor";
  s.scatter_calls = dp.stats().forwards;
  s.last_chunks = dp.stats().last_chunks;
  s.full_chunks = dp.stats().full_chunks;
  if (device) {
    dp_device_split(s, *device, host, devices, w, measured_steps);
    return s;
  }
  Spans own, replica, any_device, data;
  std::map<int, Spans> replicas;
  for (const auto& i : host) {
    if (i.cat == trace::Category::data) {
      data.emplace_back(i.begin_ns, i.end_ns);
      continue;
    }
    any_device.emplace_back(i.begin_ns, i.end_ns);
    if (i.lane == "replica") replicas[i.device].emplace_back(i.begin_ns, i.end_ns);
    if (i.device != primary) continue;
    (i.lane == "replica" ? replica : own).emplace_back(i.begin_ns, i.end_ns);
  }
  set_split(s, std::move(own), std::move(replica), std::move(any_device), std::move(data), w, measured_steps);
  set_replicas(s, std::move(replicas), devices, w, measured_steps);
  s.replica_waited_s = replica_waits(host, devices, w, measured_steps);
  return s;
}

void dp_device_split(reports::DpStats& s, const trace::RankTimeline& device, const std::vector<trace::Interval>& host,
                     const std::vector<int>& devices, const Window& w, size_t measured_steps) {
  const int primary = devices.front();
  Spans replica_spans, data, own, replica, any_device;
  std::map<int, Spans> replicas;  // every other device's work is its replica's
  std::set<std::string> replica_names;
  for (const auto& i : host) {
    if (i.cat == trace::Category::data) data.emplace_back(i.begin_ns, i.end_ns);
    else if (i.device == primary && i.lane == "replica") {
      replica_spans.emplace_back(i.begin_ns, i.end_ns);
      replica_names.insert(i.name);
    }
  }
  std::sort(replica_spans.begin(), replica_spans.end());
  const auto in_replica_span = [&](int64_t t) {
    auto it = std::upper_bound(replica_spans.begin(), replica_spans.end(), std::make_pair(t, INT64_MAX));
    // The spans one worker thread recorded do not overlap; the latest one begun by t.
    return it != replica_spans.begin() && std::prev(it)->second >= t;
  };
  std::unordered_map<int64_t, int64_t> launched_at;  // correlation -> the launch call's host time
  for (const auto& c : device.calls)
    if (c.correlation >= 0) launched_at.emplace(c.correlation, c.begin_ns);
  for (const auto& work : device.work) {
    any_device.emplace_back(work.begin_ns, work.end_ns);
    if (work.device != primary) {
      replicas[work.device].emplace_back(work.begin_ns, work.end_ns);
      continue;
    }
    bool mine = false;
    if (work.correlation >= 0) {
      const auto it = launched_at.find(work.correlation);
      mine = it != launched_at.end() && in_replica_span(it->second);
    } else {
      mine = replica_names.count(device.names.name(work.name)) > 0;
    }
    (mine ? replica : own).emplace_back(work.begin_ns, work.end_ns);
    if (mine) replicas[primary].emplace_back(work.begin_ns, work.end_ns);
  }
  set_split(s, std::move(own), std::move(replica), std::move(any_device), std::move(data), w, measured_steps);
  set_replicas(s, std::move(replicas), devices, w, measured_steps);
}

PipelineMetrics pipeline_metrics(PipelineParallel& pp, const std::vector<StepRecord>& measured,
                                 const std::vector<double>& unit_costs, bool split_given,
                                 const std::vector<std::string>& device_ids, const std::vector<double>& busy) {
  const int p = static_cast<int>(pp.devices().size());
  std::vector<double> idle(static_cast<size_t>(p), 0.0);
  double bubble = 0;
  for (const auto& r : measured) {
    for (int s = 0; s < p; ++s) idle[static_cast<size_t>(s)] += r.pipeline.stage_idle[static_cast<size_t>(s)];
    bubble += r.pipeline.bubble;
  }
  const double n = static_cast<double>(std::max<size_t>(1, measured.size()));
  for (auto& v : idle) v /= n;
  bubble /= n;
  const auto& last = measured.back().pipeline;
  const auto units = pp.stage_units();
  const auto params = pp.stage_parameters();
  PipelineMetrics out;
  for (int s = 0; s < p; ++s)
    out.stages.push_back({s, device_ids[static_cast<size_t>(s)], units[static_cast<size_t>(s)],
                          params[static_cast<size_t>(s)], busy[static_cast<size_t>(s)], idle[static_cast<size_t>(s)]});
  auto& ps = out.pipeline;
  ps.schedule = pp.options().schedule;
  ps.micro_batches = static_cast<int>(last.micro_sizes.size());
  ps.micro_batch_sizes = last.micro_sizes;
  for (int k : pp.split()) ps.split.push_back(pp.units()[static_cast<size_t>(k)].name);
  ps.split_by = split_given ? "--split" : "measured time";
  if (!unit_costs.empty()) {
    ps.unit_costs.emplace();
    for (size_t k = 0; k < pp.units().size() && k < unit_costs.size(); ++k)
      ps.unit_costs->push_back({pp.units()[k].name, unit_costs[k]});
  }
  ps.bubble_measured = bubble;
  ps.bubble_theory = last.theory;
  for (const auto& e : last.events)
    ps.last_step_events.push_back({e.stage, e.micro, e.kind, seconds(e.begin_ns - last.begin_ns),
                                   seconds(e.end_ns - last.begin_ns)});
  return out;
}

}  // namespace dpb::bench
