#include "engine/parallel/data_parallel.h"

#include <optional>
#include <set>

#include "engine/backend/ops.h"
#include "engine/core/clock.h"
#include "engine/trace/timeline.h"

namespace dpb {

std::vector<int64_t> DataParallel::chunk_sizes(int64_t batch, int parts) {
  DPB_CHECK(batch >= 1 && parts >= 1) << "chunking " << batch << " samples into " << parts << " parts";
  const int64_t size = (batch + parts - 1) / parts;
  std::vector<int64_t> chunks;
  for (int64_t begin = 0; begin < batch; begin += size) chunks.push_back(std::min(size, batch - begin));
  return chunks;
}

DataParallel::DataParallel(Model& module, std::vector<Device> devices) : module_(module), devices_(std::move(devices)) {
  DPB_CHECK(!devices_.empty()) << "DataParallel needs at least one device";
  std::set<std::string> seen;
  for (const auto& d : devices_)
    DPB_CHECK(seen.insert(d.str()).second) << "DataParallel: device " << d << " is listed twice";
  module_.to(devices_[0]);
  replicas_.resize(devices_.size());
  for (const auto& d : devices_) workers_.push_back(std::make_unique<DeviceWorker>(d));
  stats_.samples.assign(devices_.size(), 0);
  stats_.busy_ns.assign(devices_.size(), 0);
}

Module& DataParallel::replica(size_t r) {
  if (r == 0) return module_;
  if (!replicas_[r]) replicas_[r] = module_.replicate(devices_[r]);
  return *replicas_[r];
}

void DataParallel::run_on_replicas(const char* what, const std::function<void(size_t)>& task) {
  std::vector<std::future<void>> done;
  for (size_t r = 0; r < chunks_.size(); ++r) {
    done.push_back(workers_[r]->submit([this, r, what, &task] {
      trace::Span span(what, trace::Category::compute, devices_[r].index, "replica");
      span.arg("samples", chunks_[r]);
      const int64_t t0 = now_ns();
      task(r);
      stats_.busy_ns[r] += now_ns() - t0;
    }));
  }
  // Wait for all before rethrowing the first failure, so no task outlives this call.
  for (auto& f : done) f.wait();
  for (auto& f : done) f.get();
}

Tensor DataParallel::forward(const Tensor& x) {
  DPB_CHECK(x.ndim() >= 1 && x.size(0) >= 1) << "DataParallel: input " << x.shape() << " has no samples";
  ++stats_.forwards;
  chunks_ = chunk_sizes(x.size(0), static_cast<int>(devices_.size()));
  stats_.last_chunks = chunks_;
  if (x.size(0) > stats_.full_batch) {
    stats_.full_batch = x.size(0);
    stats_.full_chunks = chunks_;
  }
  std::vector<Tensor> inputs(chunks_.size());
  {
    trace::Span span("scatter", trace::Category::copy, devices_[0].index);
    int64_t begin = 0;
    for (size_t r = 0; r < chunks_.size(); ++r) {
      inputs[r] = x.slice(begin, begin + chunks_[r]).to(devices_[r]);
      begin += chunks_[r];
    }
  }
  return run_forward(inputs);
}

Tensor DataParallel::forward_replicated(const Tensor& x) {
  DPB_CHECK(x.ndim() >= 1 && x.size(0) >= 1) << "DataParallel: input " << x.shape() << " has no samples";
  chunks_.assign(devices_.size(), x.size(0));
  stats_.last_chunks = chunks_;
  std::vector<Tensor> inputs;
  {
    trace::Span span("replicate input", trace::Category::copy, devices_[0].index);
    for (const auto& d : devices_) inputs.push_back(x.to(d));
  }
  return run_forward(inputs);
}

Tensor DataParallel::run_forward(const std::vector<Tensor>& inputs) {
  // Broadcast: the replicas in use get the module's current parameters and buffers.
  if (chunks_.size() > 1) {
    trace::Span span("broadcast parameters", trace::Category::copy, devices_[0].index);
    for (size_t r = 1; r < chunks_.size(); ++r) replica(r).copy_state_from(module_);
  }
  for (size_t r = 0; r < chunks_.size(); ++r) stats_.samples[r] += chunks_[r];
  std::vector<Tensor> outputs(chunks_.size());
  run_on_replicas("replica forward", [&](size_t r) { outputs[r] = replica(r).forward(inputs[r]).to_plain(); });
  // Gather on the primary device.
  trace::Span span("gather", trace::Category::copy, devices_[0].index);
  std::vector<int64_t> dims = outputs[0].shape().dims();
  dims[0] = 0;
  for (auto c : chunks_) dims[0] += c;
  Tensor out = Tensor::empty(Shape(dims), devices_[0], outputs[0].dtype());
  int64_t begin = 0;
  for (size_t r = 0; r < chunks_.size(); ++r) {
    out.slice(begin, begin + chunks_[r]).copy_from(outputs[r]);
    begin += chunks_[r];
  }
  return out;
}

void DataParallel::backward(const Tensor& grad_out) {
  DPB_CHECK(!chunks_.empty()) << "DataParallel.backward without a forward";
  DPB_CHECK(grad_out.ndim() >= 1 && grad_out.size(0) == [&] {
    int64_t n = 0;
    for (auto c : chunks_) n += c;
    return n;
  }()) << "DataParallel.backward: gradient " << grad_out.shape() << " does not match the scattered batch";
  std::vector<Tensor> grads(chunks_.size());
  int64_t begin = 0;
  std::optional<trace::Span> scatter_span(std::in_place, "scatter gradients", trace::Category::copy,
                                          devices_[0].index);
  for (size_t r = 0; r < chunks_.size(); ++r) {
    // A copy on every device (the primary's too): backward may reuse its gradient.
    grads[r] = Tensor::empty(grad_out.slice(begin, begin + chunks_[r]).shape(), devices_[r], grad_out.dtype());
    grads[r].copy_from(grad_out.slice(begin, begin + chunks_[r]));
    begin += chunks_[r];
  }
  scatter_span.reset();
  for (size_t r = 1; r < chunks_.size(); ++r) replica(r).zero_grad();
  run_on_replicas("replica backward", [&](size_t r) { replica(r).backward(grads[r]); });
  // Reduce: sum the replicas' gradients into the module's, in replica order.
  trace::Span reduce_span("reduce gradients", trace::Category::comm, devices_[0].index);
  auto params = module_.parameters();
  for (size_t r = 1; r < chunks_.size(); ++r) {
    auto rp = replica(r).parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      if (rp[i]->grad_is_zero()) continue;
      const Tensor g = rp[i]->grad().to(devices_[0]);
      if (params[i]->begin_grad()) {
        ops::axpy(1.0f, g, params[i]->grad());
      } else {
        params[i]->grad().copy_from(g);
      }
    }
  }
  chunks_.clear();
}

}  // namespace dpb
