#include "engine/parallel/reducer.h"

#include "engine/core/clock.h"
#include "engine/core/error.h"

namespace dpb {

Reducer::Reducer(std::vector<std::pair<std::string, Parameter*>> params, comm::ProcessGroup& group,
                 int64_t first_bucket_bytes, int64_t bucket_bytes)
    : params_(std::move(params)), group_(group) {
  DPB_CHECK(first_bucket_bytes > 0 && bucket_bytes > 0)
      << "DDP bucket sizes must be positive: first " << first_bucket_bytes << ", then " << bucket_bytes;
  DPB_CHECK(!params_.empty()) << "DDP: the model has no parameters";
  const Device device = params_.front().second->data().device();
  // Assign in reverse registration order.
  std::vector<std::vector<size_t>> groups;
  int64_t bytes = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    const Tensor& d = params_[k].second->data();
    DPB_CHECK(d.device() == device && d.dtype() == DType::f32)
        << "DDP: parameter '" << params_[k].first << "' is " << dtype_name(d.dtype()) << " on " << d.device()
        << "; all parameters must be F32 on " << device;
    if (groups.empty() || bytes >= (groups.size() == 1 ? first_bucket_bytes : bucket_bytes)) {
      groups.emplace_back();
      bytes = 0;
    }
    groups.back().push_back(k);
    bytes += d.numel() * 4;
  }
  bucket_of_.resize(params_.size());
  // On the CPU, where the ranks share a host, every bucket lies in memory the group
  // reduces in place (no copies into and out of a staging area); elsewhere each is a
  // tensor of its own.
  int64_t total = 0;
  for (const auto& [name, p] : params_) total += p->data().numel();
  const Tensor shared = device.is_cpu() && group_.size() > 1 ? group_.shared_buffer(total, device) : Tensor();
  int64_t at = 0;
  for (auto& g : groups) {
    Bucket b;
    int64_t elems = 0;
    for (size_t k : g) elems += params_[k].second->data().numel();
    b.flat = shared.defined() ? shared.slice(at, at + elems) : Tensor::zeros({elems}, device);
    at += elems;
    int64_t off = 0;
    for (size_t k : g) {
      Parameter& p = *params_[k].second;
      const int64_t n = p.data().numel();
      p.set_grad(b.flat.slice(off, off + n).view(p.data().shape()));
      bucket_of_[k] = buckets_.size();
      off += n;
    }
    b.params = g;
    buckets_.push_back(std::move(b));
  }
  for (size_t k = 0; k < params_.size(); ++k)
    params_[k].second->add_grad_ready_hook([this, k](Parameter&) { on_ready(k); });
  ready_.assign(params_.size(), false);
}

Reducer::~Reducer() {
  for (auto& [name, p] : params_) p->clear_grad_ready_hooks();
}

std::vector<std::vector<std::string>> Reducer::bucket_params() const {
  std::vector<std::vector<std::string>> out;
  for (const auto& b : buckets_) {
    out.emplace_back();
    for (size_t k : b.params) out.back().push_back(params_[k].first);
  }
  return out;
}

void Reducer::prepare(bool sync) {
  sync_ = sync;
  active_ = sync;
  next_ = 0;
  std::fill(ready_.begin(), ready_.end(), false);
  if (!sync) return;
  records_.assign(buckets_.size(), BucketRecord{});
  for (size_t b = 0; b < buckets_.size(); ++b) {
    buckets_[b].pending = static_cast<int>(buckets_[b].params.size());
    buckets_[b].work.reset();
    records_[b].index = static_cast<int>(b);
    records_[b].bytes = buckets_[b].flat.numel() * 4;
    records_[b].params = static_cast<int>(buckets_[b].params.size());
  }
}

void Reducer::on_ready(size_t k) {
  if (!active_) return;
  DPB_CHECK(!ready_[k]) << "DDP: parameter '" << params_[k].first
                        << "' was marked ready twice in one backward (is a layer used twice?)";
  ready_[k] = true;
  Bucket& b = buckets_[bucket_of_[k]];
  if (--b.pending == 0) records_[bucket_of_[k]].ready_ns = now_ns();
  // Launch every bucket that is complete, in order.
  while (next_ < buckets_.size() && buckets_[next_].pending == 0) launch(next_++);
}

void Reducer::launch(size_t bi) {
  Bucket& b = buckets_[bi];
  records_[bi].launch_ns = now_ns();
  b.work = group_.allreduce(b.flat, comm::ReduceOp::avg);
}

void Reducer::finalize() {
  if (!active_) return;
  active_ = false;
  if (next_ < buckets_.size()) {
    std::string missing;
    for (size_t k = 0; k < params_.size(); ++k)
      if (!ready_[k]) missing += (missing.empty() ? "'" : ", '") + params_[k].first + "'";
    DPB_FAIL() << "DDP: parameter(s) " << missing << " received no gradient in this backward, so their buckets "
               << "were never all-reduced (every rank must compute every parameter's gradient)";
  }
  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    records_[bi].wait_ns = now_ns();
    buckets_[bi].work->wait();
    BucketRecord& r = records_[bi];
    r.done_ns = now_ns();
    r.comm_start_ns = buckets_[bi].work->started_ns();
    r.comm_end_ns = buckets_[bi].work->finished_ns();
  }
}

}  // namespace dpb
