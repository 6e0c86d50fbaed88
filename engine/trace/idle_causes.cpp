#include "engine/trace/idle_causes.h"

#include <algorithm>
#include <map>
#include <unordered_set>

namespace dpb::trace {

namespace {

// A device drains inside a blocking call when the call ends at or after the gap begins;
// host and device clocks of one trace agree to a few microseconds.
constexpr int64_t kDrainSlackNs = 20'000;
// Host time with nothing recorded on any thread for this long is unrecorded, not
// Python between ops.
constexpr int64_t kSilentNs = 1'000'000;

size_t index(IdleCause c) { return static_cast<size_t>(c); }

// Takes from `remaining` what lies in `spans` (disjoint, ordered) and returns it.
std::vector<Span64> take(std::vector<Span64>& remaining, const std::vector<Span64>& spans) {
  if (remaining.empty()) return {};
  const auto part = intersection(remaining, clip(spans, remaining.front().first, remaining.back().second));
  if (!part.empty()) remaining = difference(remaining, part);
  return part;
}

// Charges spans of a gap to causes, over the window and within the cold start.
class Charger {
 public:
  Charger(IdleCauses& out, int64_t cold_end) : out_(out), cold_end_(cold_end) {}
  // `cold`: the whole gap belongs to the cold start (a kernel's first launch, set-up).
  void start_gap(bool cold = false) {
    gap_.fill(0);
    cold_gap_ = cold;
  }
  void add(IdleCause c, Span64 s) {
    const int64_t len = s.second - s.first;
    if (len <= 0) return;
    out_.ns[index(c)] += len;
    gap_[index(c)] += len;
    out_.cold_ns[index(c)] +=
        cold_gap_ ? len : std::max<int64_t>(0, std::min(s.second, cold_end_) - std::max(s.first, out_.cold_start.first));
  }
  void add(IdleCause c, const std::vector<Span64>& spans) {
    for (const auto& s : spans) add(c, s);
  }
  // What most of this gap went to.
  IdleCause main() const {
    return static_cast<IdleCause>(std::max_element(gap_.begin(), gap_.end()) - gap_.begin());
  }
  int64_t in_gap(IdleCause c) const { return gap_[index(c)]; }

 private:
  IdleCauses& out_;
  int64_t cold_end_;
  bool cold_gap_ = false;
  std::array<int64_t, kIdleCauses> gap_{};
};

// CUDA set-up: creating streams and events (cuDNN and cuBLAS handles make them), reading
// device properties, loading modules.
bool is_setup_call(std::string_view name) {
  return name.find("Create") != std::string_view::npos || name.find("GetDeviceProperties") != std::string_view::npos ||
         name.find("ModuleLoad") != std::string_view::npos || name.substr(0, 6) == "cuInit";
}

void add_named(std::map<std::string, NamedTime>& to, const std::string& name, int64_t ns, int64_t longest) {
  auto& n = to[name];
  n.name = name;
  n.ns += ns;
  ++n.count;
  n.longest_ns = std::max(n.longest_ns, longest);
}

std::vector<NamedTime> most(const std::map<std::string, NamedTime>& by_name, size_t keep) {
  std::vector<NamedTime> v;
  for (const auto& [name, n] : by_name) v.push_back(n);
  std::sort(v.begin(), v.end(), [](const NamedTime& a, const NamedTime& b) { return a.ns > b.ns; });
  if (v.size() > keep) v.resize(keep);
  return v;
}

// The blocking call the thread was inside when the device went idle at `at`, if any.
const HostCall* blocked_at(const HostIndex& h, const HostIndex::Thread& th, int64_t at) {
  const auto& v = th.calls;
  auto it = std::upper_bound(v.begin(), v.end(), at, [](int64_t x, const HostCall* c) { return x < c->begin_ns; });
  while (it != v.begin()) {
    --it;
    if ((*it)->begin_ns < at - th.longest_call_ns) break;
    if ((*it)->end_ns >= at - kDrainSlackNs && h.blocking(**it)) return *it;
  }
  return nullptr;
}

class Attribution {
 public:
  Attribution(const HostIndex& h, IdleCauses& out, bool launches_known)
      : h_(h), out_(out), charge_(out, out.cold_start.second), launches_known_(launches_known) {}

  // The device's work ran `w` (in order of start): its kernels are no longer new.
  void ran(const DeviceWork& w) { seen_.insert(w.name); }

  void gap(int64_t g0, int64_t g1, const DeviceWork* next) {
    if (g1 <= g0) return;
    ++out_.gaps;
    if (g1 - g0 < IdleCauses::kLongGapNs) out_.small_gap_ns += g1 - g0;
    out_.idle_ns += g1 - g0;
    const bool cold = cold_gap(g0, g1, next);
    if (cold && g0 >= out_.cold_start.second) out_.late_cold_ns += g1 - g0;
    charge_.start_gap(cold);
    IdleGap info;
    info.begin_ns = g0;
    info.end_ns = g1;
    const auto& names = h_.timeline().names;
    if (next && next->name < names.size()) info.next = names.name(next->name);
    const HostCall* c = launches_known_ && next ? h_.call_of(next->correlation) : nullptr;
    if (!c) {
      charge_.add(IdleCause::unknown, Span64{g0, g1});
    } else if (c->end_ns <= g0) {
      charge_.add(IdleCause::device_wait, Span64{g0, g1});  // queued before the gap: waited on the device
    } else {
      host_gap(g0, g1, *c, info);
    }
    info.cause = charge_.main();
    keep_longest(std::move(info));
  }

 private:
  // A gap of the cold start wherever it falls: its launching thread spent 1 ms or more in
  // the first launch of a kernel this device had not run yet (lazy module loading), or in
  // CUDA set-up.
  bool cold_gap(int64_t g0, int64_t g1, const DeviceWork* next) const {
    const HostCall* c = launches_known_ && next ? h_.call_of(next->correlation) : nullptr;
    if (!c || c->end_ns <= g0) return false;
    const HostIndex::Thread* th = h_.thread(c->thread);
    if (!th) return false;
    const auto& names = h_.timeline().names;
    const int64_t issue = std::min(c->end_ns, g1);
    const auto& v = th->calls;
    auto it = std::upper_bound(v.begin(), v.end(), issue, [](int64_t x, const HostCall* k) { return x < k->begin_ns; });
    while (it != v.begin()) {
      --it;
      const HostCall& k = **it;
      if (k.begin_ns < g0 - th->longest_call_ns) break;
      if (k.end_ns <= g0 || k.end_ns - k.begin_ns < HostIndex::kSlowCallNs) continue;
      if (is_setup_call(names.name(k.name))) return true;
      if (&k == c && k.kind == CallKind::launch && !seen_.count(next->name)) return true;
    }
    return false;
  }

  void host_gap(int64_t g0, int64_t g1, const HostCall& c, IdleGap& info) {
    const auto& names = h_.timeline().names;
    info.call = names.name(c.name);
    info.call_ns = c.end_ns - c.begin_ns;
    const int64_t issue = std::clamp(c.end_ns, g0, g1);  // until the call returned the work was not queued
    const HostIndex::Thread* th = h_.thread(c.thread);
    std::vector<Span64> rest;
    if (issue > g0) rest.emplace_back(g0, issue);
    const auto data = take(rest, h_.data_waits());
    charge_.add(IdleCause::data_loading, data);
    info.data_ns = total_length(data);
    if (!data.empty()) name(IdleCause::data_loading, "DataLoader __next__", total_length(data));
    const HostCall* sync = nullptr;
    if (th) {
      const auto input = take(rest, th->input);
      charge_.add(IdleCause::data_loading, input);
      for (const auto& part : input) name_input_ops(*th, part);
      charge_.add(IdleCause::allocator, take(rest, th->allocator));
      charge_.add(IdleCause::slow_call, take(rest, th->slow));
      charge_.add(IdleCause::copy, take(rest, th->copy_blocking));
      charge_.add(IdleCause::host_sync, take(rest, th->blocking));
      sync = blocked_at(h_, *th, g0);
      // A profiled step's ops on CPU tensors before its first launch make the step's input.
      if (const int64_t step = step_start_in(g0, issue); step >= 0) {
        const auto before_first = take(rest, clip(th->cpu_ops, step, issue));
        charge_.add(IdleCause::data_loading, before_first);
        for (const auto& part : before_first) {
          const std::string op = h_.op_around(c.thread, part.first, part.second);
          name(IdleCause::data_loading, op.empty() ? std::string("ops on CPU tensors") : op, part.second - part.first);
        }
      }
    }
    // Nothing recorded on any thread for 1 ms or more: unrecorded, whatever the gap.
    std::vector<Span64> silent;
    for (const auto& part : difference(rest, clip(h_.recorded_any(), g0, issue)))
      if (part.second - part.first >= kSilentNs) silent.push_back(part);
    if (!silent.empty()) {
      rest = difference(rest, silent);
      charge_.add(IdleCause::unrecorded, silent);
      name(IdleCause::unrecorded, "(nothing recorded on any thread)", total_length(silent));
    }
    const auto optimizer = th ? take(rest, th->optimizer) : std::vector<Span64>{};
    const auto recorded = th ? take(rest, th->recorded) : std::vector<Span64>{};
    const bool long_gap = g1 - g0 >= IdleCauses::kLongGapNs;
    const bool copy_drain = sync && h_.blocking_copy(*sync);
    const IdleCause drain = copy_drain ? IdleCause::copy : IdleCause::host_sync;
    if (sync) {  // the device drained while the thread was blocked: the gap is the refill
      for (const auto* part : std::initializer_list<const std::vector<Span64>*>{&optimizer, &recorded, &rest})
        charge_.add(drain, *part);
    } else {
      out_.optimizer_ns += total_length(optimizer);
      charge_.add(long_gap ? IdleCause::host_work : IdleCause::launch_overhead, optimizer);
      charge_.add(long_gap ? IdleCause::host_work : IdleCause::launch_overhead, recorded);
      charge_.add(long_gap ? IdleCause::unrecorded : IdleCause::launch_overhead, rest);
    }
    if (issue < g1) charge_.add(sync ? drain : IdleCause::launch_overhead, Span64{issue, g1});
    info.op = h_.op_around(c.thread, c.begin_ns, c.end_ns);
    const std::string where = info.op.empty() ? info.call : info.op;
    for (IdleCause k : {IdleCause::launch_overhead, IdleCause::host_work})
      if (charge_.in_gap(k) > 0) name(k, where, charge_.in_gap(k));
    if (!th) return;
    // The thread's calls within the gap: the longest for the gap's description, the
    // allocator and slow ones for the whole, a blocking one to name a sync.
    std::map<std::string, NamedTime> in_gap;
    const HostCall* blocking_inside = nullptr;
    const auto& v = th->calls;
    auto it = std::upper_bound(v.begin(), v.end(), issue, [](int64_t x, const HostCall* k) { return x < k->begin_ns; });
    while (it != v.begin()) {
      --it;
      const HostCall& k = **it;
      if (k.begin_ns < g0 - th->longest_call_ns) break;
      const int64_t overlap = std::min(k.end_ns, issue) - std::max(k.begin_ns, g0);
      if (overlap <= 0) continue;
      const std::string& name = names.name(k.name);
      add_named(in_gap, name, overlap, k.end_ns - k.begin_ns);
      if (h_.blocking(k)) blocking_inside = &k;
      else if (is_allocator_call(name) || k.end_ns - k.begin_ns >= HostIndex::kSlowCallNs)
        add_named(calls_, name, overlap, k.end_ns - k.begin_ns);
    }
    info.calls = most(in_gap, 3);
    if (const HostCall* named = sync ? sync : blocking_inside; named) {
      const std::string op = h_.op_around(named->thread, named->begin_ns, named->end_ns);
      const std::string what = op.empty() ? names.name(named->name) : op;
      if (const int64_t ns = charge_.in_gap(IdleCause::host_sync); ns > 0) {
        add_named(sync_ops_, what, ns, ns);
        name(IdleCause::host_sync, what, ns);
      }
      if (const int64_t ns = charge_.in_gap(IdleCause::copy); ns > 0) name(IdleCause::copy, what, ns);
    }
  }

  // A profiled step that began within [g0, issue): its start, else -1.
  int64_t step_start_in(int64_t g0, int64_t issue) const {
    const auto& v = out_.iterations.step_starts;
    auto it = std::lower_bound(v.begin(), v.end(), g0);
    return it != v.end() && *it < issue ? *it : -1;
  }

  void name(IdleCause k, const std::string& what, int64_t ns) {
    if (ns > 0) add_named(ops_[static_cast<size_t>(k)], what, ns, ns);
  }

  // Names the input ops (is_input_op) over `part` on the thread, by their overlap with it
  // (the outermost where they nest: preprocess, not the helpers it calls).
  void name_input_ops(const HostIndex::Thread& th, Span64 part) {
    const auto& names = h_.timeline().names;
    const auto& v = th.input_ops;
    auto it = std::lower_bound(v.begin(), v.end(), part.first - th.longest_input_ns,
                               [](const HostOp* op, int64_t x) { return op->begin_ns < x; });
    const HostOp* outer = nullptr;
    for (; it != v.end() && (*it)->begin_ns < part.second; ++it)
      if ((*it)->end_ns > part.first && (!outer || (*it)->end_ns - (*it)->begin_ns > outer->end_ns - outer->begin_ns))
        outer = *it;
    name(IdleCause::data_loading, outer ? names.name(outer->name) : std::string("input ops"), part.second - part.first);
  }

  void keep_longest(IdleGap info) {
    auto& v = out_.longest;
    const int64_t len = info.end_ns - info.begin_ns;
    if (v.size() == 5 && len <= v.back().end_ns - v.back().begin_ns) return;
    v.push_back(std::move(info));
    std::sort(v.begin(), v.end(),
              [](const IdleGap& a, const IdleGap& b) { return a.end_ns - a.begin_ns > b.end_ns - b.begin_ns; });
    if (v.size() > 5) v.pop_back();
  }

 public:
  void finish() {
    out_.calls = most(calls_, 6);
    out_.sync_ops = most(sync_ops_, 5);
    for (size_t k = 0; k < kIdleCauses; ++k) out_.ops[k] = most(ops_[k], 5);
  }

 private:
  const HostIndex& h_;
  IdleCauses& out_;
  Charger charge_;
  bool launches_known_;
  std::map<std::string, NamedTime> calls_, sync_ops_;
  std::array<std::map<std::string, NamedTime>, kIdleCauses> ops_;
  std::unordered_set<uint32_t> seen_;
};

}  // namespace

const char* idle_cause_name(IdleCause c) {
  switch (c) {
    case IdleCause::data_loading:
      return "data_loading";
    case IdleCause::allocator:
      return "allocator";
    case IdleCause::slow_call:
      return "slow_call";
    case IdleCause::host_sync:
      return "host_sync";
    case IdleCause::launch_overhead:
      return "launch_overhead";
    case IdleCause::host_work:
      return "host_work";
    case IdleCause::unrecorded:
      return "unrecorded";
    case IdleCause::device_wait:
      return "device_wait";
    case IdleCause::unknown:
      return "unknown";
    case IdleCause::copy:
      return "copy";
  }
  return "unknown";
}

int64_t IdleCauses::warmup_ns() const {
  return cold(IdleCause::allocator) + cold(IdleCause::slow_call) + cold(IdleCause::unrecorded) +
         cold(IdleCause::host_work);
}

int64_t IdleCauses::one_off_ns() const {
  int64_t all = 0;
  for (auto c : {IdleCause::allocator, IdleCause::slow_call, IdleCause::unrecorded, IdleCause::host_work})
    all += (*this)[c];
  return all - warmup_ns();
}

Iterations find_iterations(const RankTimeline& t, Span64 w) {
  Iterations it;
  auto within = [&](const std::vector<Span64>& v) {
    std::vector<Span64> out;
    for (const auto& s : v)
      if (s.first < w.second && s.second > w.first) out.push_back(s);
    return out;
  };
  // The first boundary after the window's start (a boundary before it opened the first
  // iteration).
  auto first_after = [&](const std::vector<int64_t>& boundaries) {
    for (int64_t b : boundaries)
      if (b > w.first) return b;
    return w.second;
  };
  const auto steps = within(t.steps);
  std::vector<int64_t> loads, optim;
  for (const auto& s : t.data_waits)
    if (s.first < w.second) loads.push_back(s.first);
  for (const auto& s : t.optimizer_steps)
    if (s.first < w.second && s.second > w.first) optim.push_back(s.second);
  if (!steps.empty()) {
    it.count = static_cast<int>(steps.size());
    it.marker = "ProfilerStep";
    for (const auto& s : steps) it.step_starts.push_back(s.first);
    std::sort(it.step_starts.begin(), it.step_starts.end());
    // Only a profile that began with the program's first step holds its cold start.
    it.first_end_ns = t.first_step_number == 0 ? (steps.size() >= 2 ? steps[1].first : w.second) : w.first;
  } else if (loads.size() >= 2) {
    it.count = static_cast<int>(loads.size());
    it.marker = "DataLoader";
    it.first_end_ns = first_after(loads);
  } else if (optim.size() >= 2) {
    it.count = static_cast<int>(optim.size());
    it.marker = "optimizer step";
    it.first_end_ns = first_after(optim);
  } else {
    it.first_end_ns = w.second;
  }
  it.first_end_ns = std::clamp(it.first_end_ns, w.first, w.second);
  return it;
}

IdleCauses attribute_idle(const HostIndex& host, const std::vector<const DeviceWork*>& work, Span64 window,
                          const Iterations& iterations, bool launches_known) {
  IdleCauses out;
  out.window_ns = window.second - window.first;
  out.iterations = iterations;
  out.cold_start = {window.first, iterations.first_end_ns};
  Attribution a(host, out, launches_known);
  int64_t busy_until = window.first;
  for (const DeviceWork* x : work) {
    if (x->begin_ns > busy_until) a.gap(busy_until, std::min(x->begin_ns, window.second), x);
    a.ran(*x);
    busy_until = std::max(busy_until, x->end_ns);
  }
  a.gap(busy_until, window.second, nullptr);
  a.finish();
  return out;
}

}  // namespace dpb::trace
