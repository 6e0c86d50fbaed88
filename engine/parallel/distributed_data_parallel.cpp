#include "engine/parallel/distributed_data_parallel.h"

#include <sstream>

#include "engine/core/clock.h"
#include "engine/core/error.h"

namespace dpb {

namespace {
constexpr int kMaxDims = 4;
}

DistributedDataParallel::DistributedDataParallel(Model& module, comm::ProcessGroup& group, DdpOptions options)
    : module_(module), group_(group), options_(options) {
  check_same_parameter_shapes(module_, group_, "DDP");
  std::vector<Tensor*> state;
  for (auto* p : module_.parameters()) state.push_back(&p->data());
  for (auto& [name, b] : module_.named_buffers()) state.push_back(b);
  broadcast_from_rank0(group_, state);
  reducer_ = std::make_unique<Reducer>(module_.named_parameters(), group_, options_.first_bucket_bytes,
                                       options_.bucket_bytes);
}

// Every rank's parameter count, then every parameter's shape, all-gathered as floats
// (dimensions are small integers, exact in f32).
void check_same_parameter_shapes(Module& module, comm::ProcessGroup& group, const char* who) {
  auto params = module.named_parameters();
  const int n = group.size();
  const Device dev = params.empty() ? Device::cpu() : params.front().second->data().device();
  Tensor count = Tensor::full({1}, static_cast<float>(params.size()), dev);
  Tensor counts = Tensor::empty({n}, dev);
  group.allgather(counts, count)->wait();
  const auto cv = counts.to_vector();
  for (int r = 0; r < n; ++r)
    DPB_CHECK(static_cast<size_t>(cv[static_cast<size_t>(r)]) == params.size())
        << who << ": rank " << group.rank() << " has " << params.size() << " parameters but rank " << r << " has "
        << static_cast<int64_t>(cv[static_cast<size_t>(r)]) << " (every rank must build the same model)";
  const int64_t width = 1 + kMaxDims;
  std::vector<float> mine(params.size() * width, 0.0f);
  for (size_t i = 0; i < params.size(); ++i) {
    const Shape& s = params[i].second->data().shape();
    DPB_CHECK(s.ndim() <= kMaxDims) << who << ": parameter '" << params[i].first << "' has " << s.ndim() << " dims";
    mine[i * width] = static_cast<float>(s.ndim());
    for (int d = 0; d < s.ndim(); ++d) mine[i * width + 1 + d] = static_cast<float>(s[d]);
  }
  Tensor local = Tensor::from_vector({static_cast<int64_t>(mine.size())}, mine, dev);
  Tensor all = Tensor::empty({static_cast<int64_t>(mine.size()) * n}, dev);
  if (!mine.empty()) group.allgather(all, local)->wait();
  const auto av = all.to_vector();
  auto shape_text = [&](const float* f) {
    std::ostringstream o;
    o << "(";
    for (int d = 0; d < static_cast<int>(f[0]); ++d) o << (d ? ", " : "") << static_cast<int64_t>(f[1 + d]);
    o << ")";
    return o.str();
  };
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < params.size(); ++i) {
      const float* theirs = av.data() + (static_cast<size_t>(r) * params.size() + i) * width;
      if (!std::equal(theirs, theirs + width, mine.data() + i * width))
        DPB_FAIL() << who << ": parameter " << i << " ('" << params[i].first << "') has shape "
                   << shape_text(mine.data() + i * width) << " on rank " << group.rank() << " but "
                   << shape_text(theirs) << " on rank " << r << " (every rank must build the same model)";
    }
}

// All tensors as one flat tensor: one broadcast instead of one per tensor.
void broadcast_from_rank0(comm::ProcessGroup& group, const std::vector<Tensor*>& tensors) {
  if (tensors.empty() || group.size() == 1) return;
  // In pieces of at most kPiece elements: a large plain tensor is broadcast in place,
  // small ones packed together, so the copy never holds the whole model a second time
  // (FSDP shards right after this; a flat copy of gpt2 was 475 MiB per rank).
  constexpr int64_t kPiece = int64_t{8} << 20;  // 32 MiB of f32
  const Device dev = tensors.front()->device();
  std::vector<Tensor*> pack;
  int64_t packed = 0;
  auto flush = [&] {
    if (pack.empty()) return;
    Tensor flat = Tensor::empty({packed}, dev);
    int64_t off = 0;
    for (const Tensor* t : pack) {
      flat.slice(off, off + t->numel()).copy_from(t->to_plain().view({t->numel()}));
      off += t->numel();
    }
    group.broadcast(flat, 0)->wait();
    off = 0;
    for (Tensor* t : pack) {
      t->copy_from(flat.slice(off, off + t->numel()).view(t->shape()));
      off += t->numel();
    }
    pack.clear();
    packed = 0;
  };
  for (Tensor* t : tensors) {
    if (t->is_plain() && t->numel() >= kPiece) {
      flush();
      group.broadcast(*t, 0)->wait();
      continue;
    }
    if (packed + t->numel() > kPiece) flush();
    pack.push_back(t);
    packed += t->numel();
  }
  flush();
}

Tensor DistributedDataParallel::forward(const Tensor& x) {
  if (options_.broadcast_buffers) {
    std::vector<Tensor*> buffers;
    for (auto& [name, b] : module_.named_buffers()) buffers.push_back(b);
    broadcast_from_rank0(group_, buffers);
  }
  return module_.forward(x);
}

void DistributedDataParallel::backward(Tensor grad_out) {
  reducer_->prepare(sync_ && group_.size() > 1);
  backward_begin_ns_ = now_ns();
  module_.backward_consuming(std::move(grad_out));
  backward_end_ns_ = now_ns();
  reducer_->finalize();
}

}  // namespace dpb
