#include "engine/trace/host_index.h"

#include "engine/core/text.h"

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

bool is_input_op(std::string_view name, HostOpKind kind) {
  if (kind == HostOpKind::op) {
    static constexpr std::string_view kRandom[] = {
        "aten::randn",    "aten::rand",     "aten::randint",   "aten::randperm",    "aten::normal_",
        "aten::normal",   "aten::uniform_", "aten::bernoulli", "aten::bernoulli_",  "aten::random_",
        "aten::multinomial", "aten::randn_like", "aten::rand_like", "aten::randint_like", "aten::exponential_",
        "aten::poisson"};
    for (auto r : kRandom)
      if (name == r) return true;
    return false;
  }
  if (kind != HostOpKind::python) return false;
  const std::string n = ascii_lower(name);
  static constexpr std::string_view kInput[] = {"dataloader", "collate",    "preprocess", "decode",
                                                "read_video", "read_image", "load_image", "tokeniz",
                                                "image_processing", "feature_extraction", "transforms/"};
  for (auto k : kInput)
    if (n.find(k) != std::string::npos) return true;
  // A dataset's __getitem__ (not a module list's or a mapping's).
  return n.find("__getitem__") != std::string::npos && n.find("data") != std::string::npos;
}

HostIndex::HostIndex(const RankTimeline& t) : t_(t) {
  for (size_t i = 0; i < t.calls.size(); ++i)
    if (t.calls[i].correlation >= 0) call_of_.emplace(t.calls[i].correlation, i);
  for (const auto& w : t.work)
    if (w.work == Work::memory && w.correlation >= 0) copy_of_.emplace(w.correlation, &w);
  data_waits_ = merged(t.data_waits, INT64_MIN, INT64_MAX);

  std::unordered_map<int64_t, std::vector<Span64>> alloc, slow, block, copy_block, optim, input, rec;
  std::vector<Span64> any, inputs;
  for (const auto& c : t.calls) {
    Thread& th = threads_[c.thread];
    th.calls.push_back(&c);
    th.longest_call_ns = std::max(th.longest_call_ns, c.end_ns - c.begin_ns);
  }
  auto by_start = [](const auto* a, const auto* b) { return a->begin_ns < b->begin_ns; };
  for (auto& [tid, th] : threads_) {
    std::sort(th.calls.begin(), th.calls.end(), by_start);
    for (size_t i = 0; i < th.calls.size(); ++i) {
      const HostCall& c = *th.calls[i];
      const Span64 s{c.begin_ns, c.end_ns};
      rec[tid].push_back(s);
      const std::string& name = t.names.name(c.name);
      if (waits_for_copy_to_device(c, i > 0 ? th.calls[i - 1] : nullptr)) {
        copy_waits_.insert(&c);
        copy_block[tid].push_back(s);
      } else if (blocking(c)) {
        block[tid].push_back(s);
      }
      else if (is_allocator_call(name)) alloc[tid].push_back(s);
      else if (c.end_ns - c.begin_ns >= kSlowCallNs) slow[tid].push_back(s);
    }
  }
  for (const auto& op : t.ops) {
    Thread& th = threads_[op.thread];
    (op.kind == HostOpKind::python ? th.python : th.ops).push_back(&op);
    if (op.kind != HostOpKind::python) th.longest_op_ns = std::max(th.longest_op_ns, op.end_ns - op.begin_ns);
    rec[op.thread].emplace_back(op.begin_ns, op.end_ns);
    if (op.kind == HostOpKind::optimizer) optim[op.thread].emplace_back(op.begin_ns, op.end_ns);
  }
  for (auto& [tid, th] : threads_) {
    std::sort(th.ops.begin(), th.ops.end(), by_start);
    std::sort(th.python.begin(), th.python.end(), by_start);
    // Ops on CPU tensors call nothing on the device; input ops among them (random
    // generation on a CPU tensor) make the input.
    std::vector<Span64> cpu;
    for (const HostOp* op : th.ops) {
      if (op->kind != HostOpKind::op || t.names.name(op->name).rfind("aten::", 0) != 0) continue;
      auto it = std::lower_bound(th.calls.begin(), th.calls.end(), op->begin_ns,
                                 [](const HostCall* c, int64_t x) { return c->begin_ns < x; });
      if (it != th.calls.end() && (*it)->begin_ns < op->end_ns) continue;  // it called the device
      cpu.emplace_back(op->begin_ns, op->end_ns);
      if (is_input_op(t.names.name(op->name), op->kind)) th.input_ops.push_back(op);
    }
    th.cpu_ops = merged(std::move(cpu), INT64_MIN, INT64_MAX);
    for (const HostOp* op : th.python)
      if (is_input_op(t.names.name(op->name), op->kind)) th.input_ops.push_back(op);
    std::sort(th.input_ops.begin(), th.input_ops.end(), by_start);
    for (const HostOp* op : th.input_ops) {
      input[tid].emplace_back(op->begin_ns, op->end_ns);
      th.longest_input_ns = std::max(th.longest_input_ns, op->end_ns - op->begin_ns);
    }
    th.allocator = merged(std::move(alloc[tid]), INT64_MIN, INT64_MAX);
    th.slow = merged(std::move(slow[tid]), INT64_MIN, INT64_MAX);
    th.blocking = merged(std::move(block[tid]), INT64_MIN, INT64_MAX);
    th.copy_blocking = merged(std::move(copy_block[tid]), INT64_MIN, INT64_MAX);
    th.optimizer = merged(std::move(optim[tid]), INT64_MIN, INT64_MAX);
    th.input = merged(std::move(input[tid]), INT64_MIN, INT64_MAX);
    th.recorded = merged(std::move(rec[tid]), INT64_MIN, INT64_MAX);
    any.insert(any.end(), th.recorded.begin(), th.recorded.end());
    inputs.insert(inputs.end(), th.input.begin(), th.input.end());
  }
  recorded_any_ = merged(std::move(any), INT64_MIN, INT64_MAX);
  input_any_ = merged(std::move(inputs), INT64_MIN, INT64_MAX);
}

bool HostIndex::waits_for_copy_to_device(const HostCall& c, const HostCall* before) const {
  auto to_device = [&](const HostCall& k) {
    auto it = copy_of_.find(k.correlation);
    return it != copy_of_.end() && it->second->copy == CopyKind::h2d ? it->second : nullptr;
  };
  if (c.kind == CallKind::copy) {  // a synchronous copy: it returned once its copy was done
    const DeviceWork* w = to_device(c);
    return w && c.end_ns >= w->end_ns;
  }
  // The synchronize that follows a copy's call at once (PyTorch's copy from pageable
  // memory: cudaMemcpyAsync, then cudaStreamSynchronize).
  return c.kind == CallKind::sync && before && before->kind == CallKind::copy && to_device(*before) &&
         c.begin_ns - before->end_ns < 200'000;
}

bool HostIndex::blocking_copy(const HostCall& c) const { return copy_waits_.count(&c) > 0; }

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
  return it != copy_of_.end() && (it->second->copy == CopyKind::d2h || it->second->copy == CopyKind::h2d) &&
         c.end_ns >= it->second->end_ns;
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
