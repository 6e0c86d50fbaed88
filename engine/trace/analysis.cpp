#include "engine/trace/analysis.h"

#include "engine/trace/host_index.h"

#include <algorithm>
#include <limits>
#include <map>
#include <unordered_map>
#include <unordered_set>

namespace dpb::trace {

namespace {

constexpr int64_t kNone = std::numeric_limits<int64_t>::min();

double seconds(int64_t ns) { return static_cast<double>(ns) * 1e-9; }

std::optional<double> median(std::vector<double> v) {
  if (v.empty()) return std::nullopt;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}


// HTA's window: device work launched by host calls made before the last step began.
Span64 hta_window(const RankTimeline& t, std::vector<bool>* eligible) {
  eligible->assign(t.work.size(), true);
  if (t.steps.size() >= 2) {
    int64_t last_start = kNone;
    for (const auto& s : t.steps) last_start = std::max(last_start, s.first);
    std::unordered_set<int64_t> early;
    bool any_correlated = false;
    for (const auto& c : t.calls)
      if (c.correlation >= 0 && c.begin_ns < last_start) early.insert(c.correlation);
    for (const auto& w : t.work) any_correlated = any_correlated || w.correlation >= 0;
    for (size_t i = 0; i < t.work.size(); ++i) {
      const auto& w = t.work[i];
      (*eligible)[i] = any_correlated ? w.correlation >= 0 && early.count(w.correlation) > 0 : w.begin_ns < last_start;
    }
  }
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = kNone;
  for (size_t i = 0; i < t.work.size(); ++i) {
    if (!(*eligible)[i]) continue;
    lo = std::min(lo, t.work[i].begin_ns);
    hi = std::max(hi, t.work[i].end_ns);
  }
  if (hi == kNone) {  // no device work: the steps, if any
    if (t.steps.empty()) return {0, 0};
    lo = t.steps.front().first;
    hi = t.steps.front().second;
    for (const auto& s : t.steps) {
      lo = std::min(lo, s.first);
      hi = std::max(hi, s.second);
    }
  }
  return {lo, hi};
}

// The steps that count within the window: all that overlap it (HTA's window leaves out
// the last step's work, so its step is left out too); none: the window is one step.
std::vector<Span64> window_steps(const RankTimeline& t, Span64 w, bool hta) {
  std::vector<Span64> steps = t.steps;
  std::sort(steps.begin(), steps.end());
  if (hta && steps.size() >= 2) steps.pop_back();
  std::vector<Span64> out;
  for (const auto& s : steps)
    if (s.second > w.first && s.first < w.second) out.push_back(s);
  if (out.empty() && w.second > w.first) out.push_back(w);
  return out;
}

struct DeviceSpans {
  std::vector<Span64> all, compute, comm, memory;  // memory: copies, sets and other work
};

DeviceSpans spans_of(const RankTimeline& t, const std::vector<bool>& eligible, int device, Span64 w) {
  std::vector<Span64> all, compute, comm, memory;
  for (size_t i = 0; i < t.work.size(); ++i) {
    const auto& x = t.work[i];
    if (!eligible[i] || x.device != device) continue;
    const Span64 s{x.begin_ns, x.end_ns};
    all.push_back(s);
    (x.work == Work::compute ? compute : x.work == Work::communication ? comm : memory).push_back(s);
  }
  return {merged(all, w.first, w.second), merged(compute, w.first, w.second), merged(comm, w.first, w.second),
          merged(memory, w.first, w.second)};
}

Breakdown breakdown_of(const DeviceSpans& s, Span64 w) {
  Breakdown b;
  const double window = static_cast<double>(w.second - w.first);
  b.window_s = seconds(w.second - w.first);
  if (window <= 0) return b;
  const auto compute_or_comm = unite(s.compute, s.comm);
  const int64_t compute = total_length(s.compute);
  const int64_t comm = total_length(difference(s.comm, s.compute));
  const int64_t memory = total_length(difference(s.memory, compute_or_comm));
  b.compute_share = static_cast<double>(compute) / window;
  b.comm_share = static_cast<double>(comm) / window;
  b.memory_share = static_cast<double>(memory) / window;
  b.idle_share = std::max(0.0, 1.0 - static_cast<double>(total_length(s.all)) / window);
  const int64_t comm_total = total_length(s.comm);
  if (comm_total > 0) b.overlap = static_cast<double>(intersection_length(s.comm, s.compute)) / comm_total;
  return b;
}

// Idle gaps classified by what ended them (see the header); `index` holds the device's
// work sorted by start.
struct IdleParts {
  int64_t idle = 0, host = 0, kernel = 0, other = 0;
};

// Adds the gap to its cause; returns whether it was host wait.
bool classify_gap(int64_t gap_begin, int64_t gap_end, const DeviceWork* next, const HostCall* call,
                  int64_t threshold, IdleParts& p) {
  const int64_t gap = gap_end - gap_begin;
  if (gap <= 0) return false;
  p.idle += gap;
  if (next && call && call->begin_ns > gap_begin) {
    p.host += gap;
    return true;
  }
  if (next && call && gap < threshold) p.kernel += gap;
  else p.other += gap;
  return false;
}

}  // namespace

double LostEvents::share() const {
  const double l = launches > 0 ? static_cast<double>(launches_without_work) / static_cast<double>(launches) : 0.0;
  const double k = work > 0 ? static_cast<double>(work_without_launch) / static_cast<double>(work) : 0.0;
  return std::max(l, k);
}

const DeviceAnalysis* RankAnalysis::device(int d) const {
  for (const auto& a : devices)
    if (a.device == d) return &a;
  return nullptr;
}

const DeviceAnalysis& RankAnalysis::main() const {
  static const DeviceAnalysis none;
  const DeviceAnalysis* m = device(main_device);
  return m ? *m : none;
}

RankAnalysis analyze_rank(const RankTimeline& t, const AnalysisOptions& o) {
  RankAnalysis a;
  a.rank = t.rank;
  a.host = t.host;
  std::vector<bool> eligible;
  const bool hta = !o.window;
  a.hta_window = hta ? hta_window(t, &eligible) : *o.window;
  if (!hta) eligible.assign(t.work.size(), true);
  const auto steps = window_steps(t, a.hta_window, hta);
  a.steps = static_cast<int>(steps.size());
  // The model of a step: the profiled steps the kernel span falls in, host time before a
  // step's first kernel and after its last included; the kernel span where no step was
  // recorded.
  a.window = a.hta_window;
  if (hta && !t.steps.empty() && !steps.empty() && !t.work.empty()) {
    a.window_is_steps = true;
    a.window = {std::min(a.hta_window.first, steps.front().first), std::max(a.hta_window.second, steps.back().second)};
  }
  const Span64 w = a.window;

  // Steps without their wait for data (no profiler steps: the window is one step).
  {
    std::vector<double> lengths, full;
    double waited = 0, net = 0;
    for (const auto& s : steps) {
      const double wait = seconds(union_ns(t.data_waits, s.first, s.second));
      full.push_back(seconds(s.second - s.first));
      lengths.push_back(full.back() - wait);
      waited += wait;
      net += lengths.back();
    }
    a.step_s = median(lengths);
    a.full_step_s = median(full);
    a.data_wait_share = waited + net > 0 ? waited / (waited + net) : 0;
  }

  const HostIndex host(t);
  if (a.window_is_steps && o.launches_known) a.input_ahead = replay_input_ahead(t, host, steps);
  auto launch_call = [&](const DeviceWork& x) -> const HostCall* {
    return o.launches_known ? host.call_of(x.correlation) : nullptr;
  };
  const Iterations iterations = find_iterations(t, w);
  // The first step's time before the device's first work (inside the window now).
  const int64_t lead_in =
      !steps.empty() && !t.work.empty() ? std::max<int64_t>(0, a.hta_window.first - steps.front().first) : 0;

  // Per device: breakdown, idle by cause, per-step compute and communication.
  int64_t most = -1;
  for (int d : t.devices()) {
    DeviceAnalysis da;
    da.device = d;
    const DeviceSpans s = spans_of(t, eligible, d, w);
    da.breakdown = breakdown_of(s, w);
    da.breakdown.rank = t.rank;
    da.breakdown.host = t.host;
    if (a.window_is_steps) {
      da.hta_breakdown = breakdown_of(spans_of(t, eligible, d, a.hta_window), a.hta_window);
      da.hta_breakdown.rank = t.rank;
      da.hta_breakdown.host = t.host;
    } else {
      da.hta_breakdown = da.breakdown;
    }
    if (total_length(s.all) > most) {
      most = total_length(s.all);
      a.main_device = d;
    }
    std::vector<double> compute, comm, exposed;
    std::vector<std::vector<Span64>> step_compute;  // each step's compute, for the kinds below
    for (const auto& st : steps) {
      auto c = merged(s.compute, st.first, st.second);
      const auto m = merged(s.comm, st.first, st.second);
      compute.push_back(seconds(total_length(c)));
      comm.push_back(seconds(total_length(m)));
      exposed.push_back(seconds(total_length(difference(m, c))));
      step_compute.push_back(std::move(c));
    }
    da.compute_per_step_s = median(compute);
    da.compute_steps_s = compute;
    da.comm_per_step_s = median(comm);
    da.exposed_comm_per_step_s = median(exposed);
    // The same per collective kind.
    std::map<CollectiveKind, std::pair<int64_t, std::vector<Span64>>> kinds;
    for (size_t i = 0; i < t.work.size(); ++i) {
      const DeviceWork& x = t.work[i];
      if (!eligible[i] || x.device != d || x.work != Work::communication || x.end_ns <= w.first || x.begin_ns >= w.second)
        continue;
      auto& k = kinds[x.name < t.names.size() ? collective_kind(t.names.name(x.name)) : CollectiveKind::other];
      ++k.first;
      k.second.emplace_back(x.begin_ns, x.end_ns);
    }
    for (const auto& [kind, ks] : kinds) {
      std::vector<double> time, hidden_not;
      for (size_t k = 0; k < steps.size(); ++k) {
        const auto m = merged(ks.second, steps[k].first, steps[k].second);
        time.push_back(seconds(total_length(m)));
        hidden_not.push_back(seconds(total_length(difference(m, step_compute[k]))));
      }
      da.collectives.push_back({kind, ks.first, median(time).value_or(0), median(hidden_not).value_or(0)});
    }

    // The device's work in order, for the gaps: per device and per stream.
    std::vector<const DeviceWork*> mine;
    for (size_t i = 0; i < t.work.size(); ++i)
      if (eligible[i] && t.work[i].device == d && t.work[i].end_ns > w.first && t.work[i].begin_ns < w.second)
        mine.push_back(&t.work[i]);
    std::sort(mine.begin(), mine.end(), [](const DeviceWork* x, const DeviceWork* y) { return x->begin_ns < y->begin_ns; });
    IdleParts dev;
    int64_t busy_until = w.first;
    std::vector<Span64> host_waits;
    for (const DeviceWork* x : mine) {
      if (x->begin_ns > busy_until &&
          classify_gap(busy_until, x->begin_ns, x, launch_call(*x), o.kernel_wait_threshold_ns, dev))
        host_waits.emplace_back(busy_until, x->begin_ns);
      busy_until = std::max(busy_until, x->end_ns);
    }
    if (o.launches_known)
      for (const auto& st : steps) da.host_wait_steps_s.push_back(seconds(union_ns(host_waits, st.first, st.second)));
    classify_gap(busy_until, w.second, nullptr, nullptr, o.kernel_wait_threshold_ns, dev);
    if (dev.idle > 0 && o.launches_known) {
      const double idle = static_cast<double>(dev.idle);
      da.breakdown.idle_breakdown = {dev.host / idle, dev.kernel / idle, dev.other / idle};
    } else if (dev.idle == 0) {
      da.breakdown.idle_breakdown = {0.0, 0.0, 0.0};
    }
    da.idle = attribute_idle(host, mine, w, iterations, o.launches_known);
    da.idle.lead_in_ns = lead_in;
    std::map<int64_t, std::vector<const DeviceWork*>> by_stream;
    for (const DeviceWork* x : mine) by_stream[x->stream].push_back(x);
    for (const auto& [stream, items] : by_stream) {
      IdleParts p;
      for (size_t k = 1; k < items.size(); ++k)
        classify_gap(items[k - 1]->end_ns, items[k]->begin_ns, items[k], launch_call(*items[k]),
                     o.kernel_wait_threshold_ns, p);
      da.streams.push_back({d, stream, seconds(p.idle), seconds(p.host), seconds(p.kernel), seconds(p.other)});
    }
    a.devices.push_back(std::move(da));
  }

  // Launches: kernels against the host calls that queued them.
  std::vector<double> delays, durations;
  int64_t shorter = 0, linked = 0;
  for (size_t i = 0; i < t.work.size(); ++i) {
    const auto& x = t.work[i];
    if (!eligible[i] || x.work == Work::memory || x.end_ns <= w.first || x.begin_ns >= w.second) continue;
    ++a.launches.kernels;
    durations.push_back(seconds(x.end_ns - x.begin_ns));
    if (const HostCall* c = launch_call(x)) {
      ++linked;
      delays.push_back(seconds(x.begin_ns - c->end_ns));
      shorter += (x.end_ns - x.begin_ns) < (c->end_ns - c->begin_ns);
    }
  }
  a.launches.median_kernel_s = median(durations);
  a.launches.median_launch_delay_s = median(delays);
  if (linked > 0) a.launches.short_kernel_share = static_cast<double>(shorter) / static_cast<double>(linked);
  if (a.steps > 0) a.launches.kernels_per_step = static_cast<double>(a.launches.kernels) / a.steps;

  // Lost events: each side of a launch without the other, within the window.
  if (o.launches_known) {
    // Work that ran before any linked work was queued before the trace began: not lost.
    int64_t first_linked = std::numeric_limits<int64_t>::max();
    for (const auto& x : t.work)
      if (host.call_of(x.correlation)) first_linked = std::min(first_linked, x.begin_ns);
    std::unordered_set<int64_t> launched_work;
    for (const auto& x : t.work) {
      if (x.correlation >= 0) launched_work.insert(x.correlation);
      if (x.end_ns <= w.first || x.begin_ns >= w.second) continue;
      ++a.lost.work;
      if (host.call_of(x.correlation)) continue;
      if (x.begin_ns < first_linked) ++a.lost.work_queued_before;
      else ++a.lost.work_without_launch;
    }
    for (const auto& c : t.calls) {
      if (c.kind != CallKind::launch || c.begin_ns < w.first || c.end_ns > w.second) continue;
      ++a.lost.launches;
      a.lost.launches_without_work += launched_work.count(c.correlation) == 0;
    }
  }

  // Host syncs: synchronize calls, and copy calls that returned only after their copy
  // finished, attributed to the outermost aten:: op they ran in.
  std::map<std::string, SyncOp> by_op;
  for (const auto& c : t.calls) {
    if (c.end_ns <= w.first || c.begin_ns >= w.second || !host.blocking(c)) continue;
    const int64_t blocked = c.end_ns - c.begin_ns;
    ++a.syncs.calls;
    a.syncs.blocked_s += seconds(blocked);
    std::string name = host.op_around(c.thread, c.begin_ns, c.end_ns);
    if (name.empty()) name = t.names.name(c.name);
    auto& op = by_op[name];
    op.name = name;
    op.seconds += seconds(blocked);
    ++op.calls;
  }
  for (auto& [name, op] : by_op) a.syncs.top_ops.push_back(op);
  std::sort(a.syncs.top_ops.begin(), a.syncs.top_ops.end(),
            [](const SyncOp& x, const SyncOp& y) { return x.seconds > y.seconds; });
  if (a.syncs.top_ops.size() > 5) a.syncs.top_ops.resize(5);
  double step_total = 0;
  for (const auto& s : steps) step_total += seconds(s.second - s.first);
  if (a.steps > 0) a.syncs.per_step_s = a.syncs.blocked_s / a.steps;
  if (step_total > 0) a.syncs.share = std::min(1.0, a.syncs.blocked_s / step_total);

  // Copies.
  int64_t h2d_timed_bytes = 0, d2h_timed_bytes = 0, h2d_ns = 0, d2h_ns = 0;
  for (size_t i = 0; i < t.work.size(); ++i) {
    const auto& x = t.work[i];
    if (!eligible[i] || x.work != Work::memory || x.copy == CopyKind::memset) continue;
    if (x.end_ns <= w.first || x.begin_ns >= w.second) continue;
    auto& c = a.copies;
    ++c.copies;
    const int64_t dur = x.end_ns - x.begin_ns;
    c.copy_s += seconds(dur);
    const int64_t bytes = std::max<int64_t>(0, x.bytes);
    if (x.copy == CopyKind::h2d) c.h2d_bytes += bytes;
    if (x.copy == CopyKind::d2h) c.d2h_bytes += bytes;
    if (x.copy == CopyKind::d2d || x.copy == CopyKind::p2p) c.d2d_bytes += bytes;
    if (x.pinned == 0) {
      c.pageable_bytes += bytes;
      c.pageable_s += seconds(dur);
    } else if (x.pinned == 1) {
      c.pinned_bytes += bytes;
    }
    if (x.bytes >= 0 && x.copy == CopyKind::h2d) {
      h2d_timed_bytes += x.bytes;
      h2d_ns += dur;
    }
    if (x.bytes >= 0 && x.copy == CopyKind::d2h) {
      d2h_timed_bytes += x.bytes;
      d2h_ns += dur;
    }
  }
  if (h2d_ns > 0) a.copies.h2d_gbps = static_cast<double>(h2d_timed_bytes) / static_cast<double>(h2d_ns);
  if (d2h_ns > 0) a.copies.d2h_gbps = static_cast<double>(d2h_timed_bytes) / static_cast<double>(d2h_ns);
  if (a.steps > 0) a.copies.per_step_s = a.copies.copy_s / a.steps;
  return a;
}

CrossRank analyze_ranks(const std::vector<RankTimeline>& timelines, const std::vector<RankAnalysis>& analyses) {
  CrossRank x;
  const size_t n = timelines.size();
  x.last_starts.assign(n, 0);
  x.wait_exposed_ns.assign(n, 0);
  x.made_others_wait_ns.assign(n, 0);
  x.step_start_offset_ns.assign(n, 0);
  x.compute_before_first_ns.assign(n, 0);
  std::vector<double> steps;
  for (const auto& a : analyses)
    if (a.step_s) steps.push_back(*a.step_s);
  if (steps.size() >= 2) {
    const auto [lo, hi] = std::minmax_element(steps.begin(), steps.end());
    if (*lo > 0) x.step_spread = (*hi - *lo) / *lo;
  }
  if (n < 2 || n != analyses.size()) return x;
  // Each rank's collectives on its main device, in order: the k-th are the same call.
  std::vector<std::vector<const DeviceWork*>> comm(n);
  std::vector<std::vector<Span64>> compute(n);
  size_t common = std::numeric_limits<size_t>::max();
  for (size_t r = 0; r < n; ++r) {
    const auto& a = analyses[r];
    std::vector<Span64> c;
    for (const auto& wk : timelines[r].work) {
      if (wk.device != a.main_device) continue;
      if (wk.work == Work::communication && wk.begin_ns >= a.window.first && wk.begin_ns < a.window.second)
        comm[r].push_back(&wk);
      if (wk.work == Work::compute) c.emplace_back(wk.begin_ns, wk.end_ns);
    }
    std::sort(comm[r].begin(), comm[r].end(),
              [](const DeviceWork* p, const DeviceWork* q) { return p->begin_ns < q->begin_ns; });
    compute[r] = merged(std::move(c), a.window.first, a.window.second);
    common = std::min(common, comm[r].size());
  }
  std::vector<double> end_spreads, lengths;
  std::vector<std::vector<Span64>> waits(n);
  for (size_t k = 0; k < common; ++k) {
    CollectiveArrival c;
    c.name = timelines[0].names.name(comm[0][k]->name);
    int64_t first = comm[0][k]->begin_ns, first_end = comm[0][k]->end_ns, last_end = first_end;
    for (size_t r = 1; r < n; ++r) {
      if (comm[r][k]->begin_ns > comm[c.last][k]->begin_ns) c.last = r;
      first = std::min(first, comm[r][k]->begin_ns);
      first_end = std::min(first_end, comm[r][k]->end_ns);
      last_end = std::max(last_end, comm[r][k]->end_ns);
    }
    const int64_t last_start = comm[c.last][k]->begin_ns;
    c.spread_ns = last_start - first;
    end_spreads.push_back(static_cast<double>(last_end - first_end));
    for (size_t r = 0; r < n; ++r) {
      lengths.push_back(static_cast<double>(comm[r][k]->end_ns - comm[r][k]->begin_ns));
      const int64_t until = std::min(comm[r][k]->end_ns, last_start);
      if (until > comm[r][k]->begin_ns) waits[r].emplace_back(comm[r][k]->begin_ns, until);
      x.made_others_wait_ns[c.last] += std::max<int64_t>(0, until - comm[r][k]->begin_ns);
    }
    ++x.last_starts[c.last];
    ++x.collectives;
    x.arrivals.push_back(std::move(c));
  }
  if (x.collectives == 0) return x;
  const double end_spread = *median(end_spreads);
  x.end_spread_ns = static_cast<int64_t>(end_spread);
  x.clocks_agree = end_spread <= std::max(100e3, 0.1 * *median(lengths));
  for (size_t r = 0; r < n; ++r) {
    const auto& a = analyses[r];
    x.wait_exposed_ns[r] = total_length(difference(merged(waits[r], a.window.first, a.window.second), compute[r]));
    // The step holding the first collective, and the compute before it.
    const int64_t at = comm[r][0]->begin_ns;
    int64_t step_begin = a.window.first;
    for (const auto& s : timelines[r].steps)
      if (s.first <= at && at < s.second) step_begin = s.first;
    x.step_start_offset_ns[r] = step_begin;
    x.compute_before_first_ns[r] = total_length(clip(compute[r], step_begin, at));
  }
  const int64_t earliest = *std::min_element(x.step_start_offset_ns.begin(), x.step_start_offset_ns.end());
  for (auto& v : x.step_start_offset_ns) v -= earliest;
  return x;
}

}  // namespace dpb::trace
