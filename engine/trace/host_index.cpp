#include "engine/trace/host_index.h"

#include <algorithm>

namespace dpb::trace {

namespace {
bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
}  // namespace

bool is_allocator_call(std::string_view name) {
  return starts_with(name, "cudaMalloc") || starts_with(name, "cudaFree") || starts_with(name, "cudaHostAlloc") ||
         starts_with(name, "cuMemAlloc") || starts_with(name, "cuMemFree") || starts_with(name, "cuMemCreate") ||
         starts_with(name, "cuMemMap") || starts_with(name, "cuMemRelease");
}

HostIndex::HostIndex(const RankTimeline& t) : t_(t) {
  for (size_t i = 0; i < t.calls.size(); ++i)
    if (t.calls[i].correlation >= 0) call_of_.emplace(t.calls[i].correlation, i);
  for (const auto& w : t.work)
    if (w.work == Work::memory && w.correlation >= 0) copy_of_.emplace(w.correlation, &w);
  data_waits_ = merged(t.data_waits, INT64_MIN, INT64_MAX);

  std::unordered_map<int64_t, std::vector<Span64>> alloc, slow, block, optim, rec;
  for (const auto& c : t.calls) {
    Thread& th = threads_[c.thread];
    th.calls.push_back(&c);
    const int64_t len = c.end_ns - c.begin_ns;
    th.longest_call_ns = std::max(th.longest_call_ns, len);
    const Span64 s{c.begin_ns, c.end_ns};
    rec[c.thread].push_back(s);
    const std::string& name = t.names.name(c.name);
    if (blocking(c)) block[c.thread].push_back(s);
    else if (is_allocator_call(name)) alloc[c.thread].push_back(s);
    else if (len >= kSlowCallNs) slow[c.thread].push_back(s);
  }
  for (const auto& op : t.ops) {
    Thread& th = threads_[op.thread];
    th.ops.push_back(&op);
    th.longest_op_ns = std::max(th.longest_op_ns, op.end_ns - op.begin_ns);
    rec[op.thread].emplace_back(op.begin_ns, op.end_ns);
    if (op.kind == HostOpKind::optimizer) optim[op.thread].emplace_back(op.begin_ns, op.end_ns);
  }
  for (auto& [tid, th] : threads_) {
    auto by_start = [](const auto* a, const auto* b) { return a->begin_ns < b->begin_ns; };
    std::sort(th.calls.begin(), th.calls.end(), by_start);
    std::sort(th.ops.begin(), th.ops.end(), by_start);
    th.allocator = merged(std::move(alloc[tid]), INT64_MIN, INT64_MAX);
    th.slow = merged(std::move(slow[tid]), INT64_MIN, INT64_MAX);
    th.blocking = merged(std::move(block[tid]), INT64_MIN, INT64_MAX);
    th.optimizer = merged(std::move(optim[tid]), INT64_MIN, INT64_MAX);
    th.recorded = merged(std::move(rec[tid]), INT64_MIN, INT64_MAX);
  }
}

const HostIndex::Thread* HostIndex::thread(int64_t tid) const {
  auto it = threads_.find(tid);
  return it == threads_.end() ? nullptr : &it->second;
}

const HostCall* HostIndex::call_of(int64_t correlation) const {
  if (correlation < 0) return nullptr;
  auto it = call_of_.find(correlation);
  return it == call_of_.end() ? nullptr : &t_.calls[it->second];
}

bool HostIndex::blocking(const HostCall& c) const {
  if (c.kind == CallKind::sync) return true;
  if (c.kind != CallKind::copy) return false;
  auto it = copy_of_.find(c.correlation);
  return it != copy_of_.end() && it->second->copy == CopyKind::d2h && c.end_ns >= it->second->end_ns;
}

std::string HostIndex::op_around(int64_t thread, int64_t b, int64_t e) const {
  const Thread* th = this->thread(thread);
  if (!th) return {};
  const auto& v = th->ops;
  auto it = std::upper_bound(v.begin(), v.end(), b, [](int64_t x, const HostOp* op) { return x < op->begin_ns; });
  const HostOp* outer_aten = nullptr;
  const HostOp* inner = nullptr;
  while (it != v.begin()) {
    --it;
    if ((*it)->begin_ns < b - th->longest_op_ns) break;
    if ((*it)->end_ns < e) continue;
    if (!inner) inner = *it;
    if (starts_with(t_.names.name((*it)->name), "aten::")) outer_aten = *it;
  }
  if (outer_aten) return t_.names.name(outer_aten->name);
  return inner ? t_.names.name(inner->name) : std::string();
}

std::vector<Span64> clip(const std::vector<Span64>& spans, int64_t lo, int64_t hi) {
  std::vector<Span64> out;
  auto it = std::upper_bound(spans.begin(), spans.end(), lo, [](int64_t x, const Span64& s) { return x < s.second; });
  for (; it != spans.end() && it->first < hi; ++it) out.emplace_back(std::max(it->first, lo), std::min(it->second, hi));
  return out;
}

}  // namespace dpb::trace
