#include "engine/trace/device_timeline.h"

#include "engine/core/text.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <set>

namespace dpb::trace {

namespace {
bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool contains(std::string_view s, std::string_view p) { return s.find(p) != std::string_view::npos; }
}  // namespace

namespace {

// Communication kernels that are not NCCL's, by what they do (names lower-cased):
// PyTorch's symmetric memory (multimem_all_reduce, one_shot/two_shot_all_reduce,
// multimem_all_gather), the custom all-reduces of inference engines (vLLM's
// cross_device_reduce_1stage/2stage, TensorRT-LLM's oneShotAllReduceKernel,
// twoShotAllReduceKernel, allreduce_fusion), DeepEP's dispatch and combine (an
// all-to-all), NVSHMEM's kernels, and any kernel named for an all-to-all.
std::optional<CollectiveKind> other_collective(const std::string& n) {
  if (contains(n, "deep_ep::") || contains(n, "all_to_all") || contains(n, "alltoall")) return CollectiveKind::all_to_all;
  if (contains(n, "all_reduce") || contains(n, "allreduce") || contains(n, "cross_device_reduce"))
    return CollectiveKind::all_reduce;
  if (contains(n, "multimem_all_gather") || contains(n, "all_gather_kernel"))
    return CollectiveKind::all_gather;
  if (contains(n, "reduce_scatter") || contains(n, "reducescatter")) return CollectiveKind::reduce_scatter;
  if (contains(n, "nvshmem") || contains(n, "multimem")) return CollectiveKind::other;
  return std::nullopt;
}

}  // namespace

Work classify_kernel(std::string_view name) {
  // HTA's regular expressions, in its order: ^nccl.*Kernel, then ^(Memcpy|Memset|dma),
  // then compute unless the name matches ^nccl.*Kernel|.*Memcpy|^Memset|.*Sync. Then,
  // beyond HTA, communication kernels that are not NCCL's (other_collective above).
  if (starts_with(name, "nccl") && contains(name.substr(4), "Kernel")) return Work::communication;
  if (starts_with(name, "Memcpy") || starts_with(name, "Memset") || starts_with(name, "dma")) return Work::memory;
  if (contains(name, "Memcpy") || contains(name, "Sync")) return Work::other;
  if (other_collective(ascii_lower(name))) return Work::communication;
  return Work::compute;
}

CollectiveKind collective_kind(std::string_view name) {
  const auto at = name.find("Kernel_");
  if (!starts_with(name, "nccl") || at == std::string_view::npos) {
    return other_collective(ascii_lower(name)).value_or(CollectiveKind::other);
  }
  std::string_view op = name.substr(at + 7);
  op = op.substr(0, op.find('_'));
  if (op == "AllReduce") return CollectiveKind::all_reduce;
  if (op == "AllGather") return CollectiveKind::all_gather;
  if (op == "ReduceScatter") return CollectiveKind::reduce_scatter;
  if (op == "Broadcast") return CollectiveKind::broadcast;
  if (op == "Reduce") return CollectiveKind::reduce;
  if (op == "SendRecv" || op == "Send" || op == "Recv") return CollectiveKind::send_recv;
  if (op == "AllToAll") return CollectiveKind::all_to_all;
  return CollectiveKind::other;
}

const char* collective_kind_name(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::all_reduce:
      return "all-reduce";
    case CollectiveKind::all_gather:
      return "all-gather";
    case CollectiveKind::reduce_scatter:
      return "reduce-scatter";
    case CollectiveKind::broadcast:
      return "broadcast";
    case CollectiveKind::reduce:
      return "reduce";
    case CollectiveKind::send_recv:
      return "send/recv";
    case CollectiveKind::all_to_all:
      return "all-to-all";
    case CollectiveKind::other:
      return "other";
  }
  return "other";
}

const char* work_name(Work w) {
  switch (w) {
    case Work::compute:
      return "compute";
    case Work::communication:
      return "communication";
    case Work::memory:
      return "memory";
    case Work::other:
      return "other";
  }
  return "other";
}

const char* copy_kind_name(CopyKind k) {
  switch (k) {
    case CopyKind::none:
      return "none";
    case CopyKind::h2d:
      return "HtoD";
    case CopyKind::d2h:
      return "DtoH";
    case CopyKind::d2d:
      return "DtoD";
    case CopyKind::p2p:
      return "PtoP";
    case CopyKind::memset:
      return "Memset";
    case CopyKind::other:
      return "other";
  }
  return "other";
}

uint32_t NameTable::intern(std::string_view name) {
  auto it = ids_.find(std::string(name));
  if (it != ids_.end()) return it->second;
  const auto id = static_cast<uint32_t>(names_.size());
  names_.emplace_back(name);
  ids_.emplace(names_.back(), id);
  return id;
}

CallKind classify_runtime_call(std::string_view name) {
  if (contains(name, "Synchronize")) return CallKind::sync;
  if (starts_with(name, "cudaMemcpy") || starts_with(name, "cudaMemset") || starts_with(name, "cuMemcpy") ||
      starts_with(name, "cuMemset"))
    return CallKind::copy;
  if (starts_with(name, "cudaLaunch") || starts_with(name, "cuLaunch") || name == "cudaGraphLaunch" ||
      name == "cuGraphLaunch")
    return CallKind::launch;
  return CallKind::other;
}

namespace {
// Calls f(begin, end) on every span kept (const or not, as `t` is).
template <typename T, typename F>
void each_span(T& t, F f) {
  for (auto& w : t.work) f(w.begin_ns, w.end_ns);
  for (auto& c : t.calls) f(c.begin_ns, c.end_ns);
  for (auto& o : t.ops) f(o.begin_ns, o.end_ns);
  for (auto& c : t.collectives) f(c.begin_ns, c.end_ns);
  for (auto& g : t.gradients) f(g.begin_ns, g.end_ns);
  for (auto* v : {&t.steps, &t.data_waits, &t.optimizer_steps})
    for (auto& s : *v) f(s.first, s.second);
}
}  // namespace

Span64 RankTimeline::extent() const {
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
  each_span(*this, [&](int64_t b, int64_t e) {
    lo = std::min(lo, b);
    hi = std::max(hi, e);
  });
  return lo > hi ? Span64{0, 0} : Span64{lo, hi};
}

bool RankTimeline::shift(int64_t ns) {
  if (ns == 0) return true;
  const auto [lo, hi] = extent();
  int64_t x = 0;
  if (__builtin_add_overflow(lo, ns, &x) || __builtin_add_overflow(hi, ns, &x)) return false;
  each_span(*this, [&](int64_t& b, int64_t& e) {
    b += ns;
    e += ns;
  });
  return true;
}

std::vector<int> RankTimeline::devices() const {
  std::set<int> d;
  for (const auto& w : work) d.insert(w.device);
  return {d.begin(), d.end()};
}

}  // namespace dpb::trace
