#include "engine/trace/replay.h"

#include <algorithm>
#include <map>
#include <queue>
#include <unordered_map>

namespace dpb::trace {

namespace {

int64_t median_of(std::vector<int64_t> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The host's clock moved: from each checkpoint's (original) time on, every time moves by
// the sum of the deltas so far; a time inside a cut span moves to where the span began.
class Moves {
 public:
  Moves(const std::vector<HostEdit>& edits, std::vector<std::pair<int64_t, int64_t>> changes) : edits_(edits) {
    std::sort(changes.begin(), changes.end());
    int64_t sum = 0;
    for (const auto& [at, delta] : changes) {
      sum += delta;
      at_.push_back(at);
      sum_.push_back(sum);
    }
  }
  int64_t operator()(int64_t t) const {
    auto e = std::upper_bound(edits_.begin(), edits_.end(), t,
                              [](int64_t x, const HostEdit& ed) { return x < ed.begin_ns; });
    if (e != edits_.begin() && t < std::prev(e)->end_ns) t = std::prev(e)->begin_ns;
    return t + shift(t);
  }

 private:
  int64_t shift(int64_t t) const {
    const auto i = std::upper_bound(at_.begin(), at_.end(), t) - at_.begin();
    return i == 0 ? 0 : sum_[static_cast<size_t>(i - 1)];
  }
  const std::vector<HostEdit>& edits_;
  std::vector<int64_t> at_, sum_;
};

}  // namespace

StepReplay replay_steps(const RankTimeline& t, const HostIndex& host, const std::vector<Span64>& steps,
                        const std::vector<HostEdit>& edits) {
  StepReplay r;
  if (steps.empty()) return r;
  std::unordered_map<int64_t, std::vector<const DeviceWork*>> launched;
  for (const auto& w : t.work)
    if (w.correlation >= 0) launched[w.correlation].push_back(&w);
  std::vector<const HostCall*> calls;
  calls.reserve(t.calls.size());
  for (const auto& c : t.calls) calls.push_back(&c);
  std::stable_sort(calls.begin(), calls.end(),
                   [](const HostCall* a, const HostCall* b) { return a->begin_ns < b->begin_ns; });

  // Changes to the shift, by the original time they take effect: each edit's at its end,
  // each blocking call's at its return (known only as the walk reaches it).
  std::vector<std::pair<int64_t, int64_t>> changes;
  for (const auto& e : edits) changes.emplace_back(e.end_ns, e.added_ns - (e.end_ns - e.begin_ns));
  using Change = std::pair<int64_t, int64_t>;
  std::priority_queue<Change, std::vector<Change>, std::greater<>> pending(changes.begin(), changes.end());
  int64_t shift = 0;
  auto advance_to = [&](int64_t time) {
    while (!pending.empty() && pending.top().first <= time) {
      shift += pending.top().second;
      pending.pop();
    }
  };
  auto edit_around = [&](int64_t time) -> const HostEdit* {
    auto e = std::upper_bound(edits.begin(), edits.end(), time,
                              [](int64_t x, const HostEdit& ed) { return x < ed.begin_ns; });
    return e != edits.begin() && time < std::prev(e)->end_ns ? &*std::prev(e) : nullptr;
  };

  // Per stream: when its work queued so far ends, as measured and as replayed.
  using Stream = std::pair<int, int64_t>;
  std::map<Stream, int64_t> measured_done, replayed_done;
  for (const HostCall* c : calls) {
    advance_to(c->begin_ns);
    const HostEdit* in = edit_around(c->begin_ns);
    const int64_t begin = (in ? in->begin_ns : c->begin_ns) + shift;
    const int64_t length = c->end_ns - c->begin_ns;
    std::vector<Stream> own_streams;
    if (auto it = launched.find(c->correlation); it != launched.end()) {
      for (const DeviceWork* w : it->second) {
        const Stream st{w->device, w->stream};
        const int64_t queued = std::clamp<int64_t>(w->begin_ns - c->begin_ns, 0, length);
        int64_t& free = replayed_done.try_emplace(st, INT64_MIN).first->second;
        free = std::max(begin + queued, free) + (w->end_ns - w->begin_ns);
        int64_t& measured = measured_done.try_emplace(st, INT64_MIN).first->second;
        measured = std::max(measured, w->end_ns);
        own_streams.push_back(st);
      }
    }
    if (!host.blocking(*c)) continue;
    // What it waited for: a copy, its own stream; a synchronize, every stream whose work
    // queued before it had ended when it returned (the streams it could have waited for).
    int64_t done_m = INT64_MIN, done_r = INT64_MIN;
    for (const auto& [st, end] : measured_done) {
      const bool target = c->kind == CallKind::copy
                              ? std::find(own_streams.begin(), own_streams.end(), st) != own_streams.end()
                              : end <= c->end_ns;
      if (!target) continue;
      done_m = std::max(done_m, end);
      done_r = std::max(done_r, replayed_done[st]);
    }
    if (done_m == INT64_MIN) continue;
    // Its own cost: all of it where that work was done before it began, else what it took
    // after; paid once the replayed work is done.
    const int64_t own = done_m <= c->begin_ns ? length : std::clamp<int64_t>(c->end_ns - done_m, 0, length);
    const int64_t returns = std::max(begin, done_r) + own;
    const int64_t delta = returns - (begin + length);
    if (delta != 0) {
      pending.emplace(c->end_ns, delta);
      changes.emplace_back(c->end_ns, delta);
      if (delta > 0) r.device_waited_ns += delta;
    }
  }

  const Moves moved(edits, std::move(changes));
  for (const auto& s : steps) {
    r.measured_ns.push_back(s.second - s.first);
    r.replayed_ns.push_back(moved(s.second) - moved(s.first));
    for (const auto& e : edits) {
      r.cut_ns += std::max<int64_t>(0, std::min(e.end_ns, s.second) - std::max(e.begin_ns, s.first));
      if (e.end_ns > s.first && e.end_ns <= s.second) r.added_ns += e.added_ns;
    }
  }
  r.measured_median_ns = median_of(r.measured_ns);
  r.replayed_median_ns = median_of(r.replayed_ns);
  return r;
}

std::optional<InputAhead> replay_input_ahead(const RankTimeline& t, const HostIndex& host,
                                             const std::vector<Span64>& steps) {
  if (steps.empty()) return std::nullopt;
  const int64_t lo = steps.front().first, hi = steps.back().second;
  const auto waits = merged(t.data_waits, lo, hi);
  const auto cut = unite(waits, merged(host.input_any(), lo, hi));
  if (cut.empty()) return std::nullopt;
  // Copies to the device from pageable memory, by start.
  std::unordered_map<int64_t, bool> pageable_to_device;
  for (const auto& w : t.work)
    if (w.correlation >= 0 && w.copy == CopyKind::h2d && w.pinned != 1) pageable_to_device[w.correlation] = true;
  std::vector<const HostCall*> copies;
  for (const auto& c : t.calls)
    if (c.kind == CallKind::copy && c.begin_ns >= lo && c.begin_ns < hi && pageable_to_device.count(c.correlation))
      copies.push_back(&c);
  std::sort(copies.begin(), copies.end(), [](const HostCall* a, const HostCall* b) { return a->begin_ns < b->begin_ns; });
  InputAhead in;
  std::vector<HostEdit> edits;
  for (const auto& s : cut) {
    HostEdit e{s.first, s.second, 0};
    // A DataLoader wait that ends here: its batch's first copy to the device after it,
    // before the next wait begins.
    const bool wait = std::any_of(waits.begin(), waits.end(), [&](const Span64& w) { return w.second == s.second; });
    if (wait) {
      ++in.batches;
      const auto next = std::upper_bound(waits.begin(), waits.end(), s.second,
                                         [](int64_t x, const Span64& w) { return x < w.first; });
      const int64_t until = next == waits.end() ? hi : next->first;
      auto c = std::lower_bound(copies.begin(), copies.end(), s.second,
                                [](const HostCall* k, int64_t x) { return k->begin_ns < x; });
      if (c != copies.end() && (*c)->begin_ns < until) e.added_ns = (*c)->end_ns - (*c)->begin_ns;
      in.handover_ns += e.added_ns;
    }
    edits.push_back(e);
  }
  in.replay = replay_steps(t, host, steps, edits);
  return in;
}

}  // namespace dpb::trace
