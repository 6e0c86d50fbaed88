#include "engine/comm/nccl/process_group_nccl.h"

#include <cuda_runtime.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "engine/backend/cuda/caching_allocator.h"
#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/device_context.h"
#include "engine/comm/net_address.h"
#include "engine/core/log.h"

namespace dpb::comm {

namespace {

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::avg:
      return ncclAvg;
    case ReduceOp::max:
      return ncclMax;
    case ReduceOp::min:
      return ncclMin;
  }
  return ncclSum;
}

ncclDataType_t nccl_type(const Tensor& t) {
  switch (t.dtype()) {
    case DType::f32:
      return ncclFloat32;
    case DType::bf16:
      return ncclBfloat16;
    case DType::i32:
      return ncclInt32;
  }
  return ncclFloat32;
}

class NcclWork : public Work {
 public:
  NcclWork(ProcessGroupNccl* pg, const char* op, int64_t seq, cudaEvent_t done, int device, Millis timeout)
      : pg_(pg), op_(op), seq_(seq), done_(done), device_(device), timeout_(timeout) {}
  ~NcclWork() override { cudaEventDestroy(done_); }

  bool completed() override {
    cuda::set_device(device_);
    const cudaError_t s = cudaEventQuery(done_);
    if (s == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    return s == cudaSuccess;
  }

  void wait(Millis timeout) override {
    const Millis bound = timeout.count() > 0 ? timeout : timeout_;
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = start + bound;
    cuda::set_device(device_);
    for (;;) {
      const cudaError_t s = cudaEventQuery(done_);
      if (s == cudaSuccess) break;
      if (s != cudaErrorNotReady) {
        DPB_CUDA_CHECK(s) << op_ << " #" << seq_;
      }
      (void)cudaGetLastError();
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(pg_->comm(), &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        const std::string why = std::string(op_) + " #" + std::to_string(seq_) + " failed on rank " +
                                std::to_string(pg_->rank()) + ": NCCL " + ncclGetErrorString(async) + "; " +
                                pg_->health().diagnose(seq_, op_);
        pg_->abort(why);
        throw Error(why);
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        const std::string why = std::string(op_) + " #" + std::to_string(seq_) + " did not complete within " +
                                std::to_string(bound.count()) + " ms on rank " + std::to_string(pg_->rank()) + ": " +
                                pg_->health().diagnose(seq_, op_);
        pg_->abort(why);
        throw Error(why);
      }
      // Spin for the first millisecond (small collectives finish in microseconds), then
      // poll more gently.
      if (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(1)) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    // The caller's stream continues after the collective.
    DPB_CUDA_CHECK(cudaStreamWaitEvent(cuda::current_stream(device_), done_, 0));
  }

 private:
  ProcessGroupNccl* pg_;
  const char* op_;
  int64_t seq_;
  cudaEvent_t done_;
  int device_;
  Millis timeout_;
};

}  // namespace

ProcessGroupNccl::ProcessGroupNccl(std::shared_ptr<Store> store, int rank, int size, GroupOptions options, int device)
    : ProcessGroup(rank, size, std::move(options)), store_(std::move(store)), device_(device) {
  cuda::set_device(device_);
  // NCCL bootstraps over the first interface it likes, which on a node with several need
  // not be the one the other nodes reach: use the interface of this rank's advertised
  // address, unless the user named one. Read when NCCL first opens a socket (below).
  if (const char* named = std::getenv("NCCL_SOCKET_IFNAME"); (!named || !*named) && !options_.host.empty() &&
                                                              !is_loopback_address(options_.host)) {
    if (const std::string itf = interface_holding(options_.host); !itf.empty()) {
      ::setenv("NCCL_SOCKET_IFNAME", ("=" + itf).c_str(), 0);
      log::info("nccl: rank {} bootstraps over {} ({})", rank_, itf, options_.host);
    }
  }
  ncclUniqueId id;
  if (rank_ == 0) {
    DPB_NCCL_CHECK(ncclGetUniqueId(&id));
    store_->set("nccl/unique_id", std::string(reinterpret_cast<const char*>(&id), sizeof(id)));
  } else {
    const std::string v = store_->get("nccl/unique_id", options_.timeout);
    DPB_CHECK(v.size() == sizeof(id)) << "nccl: the unique id in the " << store_->describe() << " has " << v.size()
                                      << " bytes, expected " << sizeof(id);
    std::memcpy(&id, v.data(), sizeof(id));
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const ncclResult_t r = ncclCommInitRankConfig(&comm_, size_, id, rank_, &config);
  DPB_CHECK(r == ncclSuccess || r == ncclInProgress)
      << "nccl: initialising rank " << rank_ << " of " << size_ << " failed: " << ncclGetErrorString(r);
  health_ = std::make_unique<GroupHealth>(std::make_shared<PrefixStore>("pg/", store_), rank_, size_);
  wait_ready("communicator init", -1);
}

ProcessGroupNccl::~ProcessGroupNccl() {
  if (!comm_) return;
  if (broken_.empty()) ncclCommDestroy(comm_);
  else ncclCommAbort(comm_);
}

void ProcessGroupNccl::wait_ready(const char* what, int64_t seq) {
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  for (;;) {
    ncclResult_t state = ncclSuccess;
    ncclCommGetAsyncError(comm_, &state);
    if (state == ncclSuccess) return;
    if (seq < 0 && state == ncclInProgress) {
      if (const std::string lost = store_->lost(); !lost.empty()) {
        const std::string why = std::string("nccl ") + what + " on rank " + std::to_string(rank_) +
                                " ended: the store went away: " + lost;
        abort(why);
        throw Error(why);
      }
    }
    if (state != ncclInProgress) {
      const std::string why = std::string("nccl ") + what + " failed on rank " + std::to_string(rank_) + ": " +
                              ncclGetErrorString(state);
      abort(why);
      throw Error(why);
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      const std::string why = std::string("nccl ") + what + " did not finish within " +
                              std::to_string(options_.timeout.count()) + " ms on rank " + std::to_string(rank_) +
                              ": " + health_->diagnose(seq, what);
      abort(why);
      throw Error(why);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

void ProcessGroupNccl::abort(const std::string& why) {
  if (broken_.empty()) broken_ = why;
  if (comm_) ncclCommAbort(comm_);
  comm_ = nullptr;
}

template <typename Launch>
std::shared_ptr<Work> ProcessGroupNccl::launch(const char* op, std::initializer_list<const Tensor*> tensors,
                                               Launch&& fn) {
  DPB_CHECK(broken_.empty()) << op << " on a broken group: " << broken_;
  for (const Tensor* t : tensors)
    DPB_CHECK(t->device() == Device::cuda(device_) && t->layout() == Layout::plain)
        << op << ": the nccl backend takes plain tensors on cuda:" << device_ << ", got " << t->device() << " "
        << layout_name(t->layout());
  const int64_t seq = next_seq_++;
  health_->entering(seq, op);
  cuda::set_device(device_);
  cudaStream_t compute = cuda::current_stream(device_);
  cudaStream_t comm_stream = cuda::DeviceContext::get(device_).comm_stream();
  cudaEvent_t ready, done;
  DPB_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  DPB_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  DPB_CUDA_CHECK(cudaEventRecord(ready, compute));
  DPB_CUDA_CHECK(cudaStreamWaitEvent(comm_stream, ready, 0));
  cudaEventDestroy(ready);
  // The tensors are used on the communication stream: their memory must not be reused
  // before the collective is done.
  for (const Tensor* t : tensors)
    if (t->nbytes() > 0) cuda::record_stream(device_, t->raw(), comm_stream);
  const ncclResult_t r = fn(comm_stream);
  if (r != ncclSuccess && r != ncclInProgress) {
    cudaEventDestroy(done);
    const std::string why = std::string(op) + " #" + std::to_string(seq) + " failed on rank " +
                            std::to_string(rank_) + ": NCCL " + ncclGetErrorString(r);
    abort(why);
    throw Error(why);
  }
  wait_ready(op, seq);  // a non-blocking communicator may still be enqueuing
  DPB_CUDA_CHECK(cudaEventRecord(done, comm_stream));
  return std::make_shared<NcclWork>(this, op, seq, done, device_, options_.timeout);
}

std::shared_ptr<Work> ProcessGroupNccl::allreduce(Tensor& t, ReduceOp op) {
  return launch("allreduce", {&t}, [&](cudaStream_t s) {
    return ncclAllReduce(t.raw(), t.raw(), static_cast<size_t>(t.numel()), nccl_type(t), nccl_op(op), comm_, s);
  });
}

std::shared_ptr<Work> ProcessGroupNccl::broadcast(Tensor& t, int root) {
  DPB_CHECK(root >= 0 && root < size_) << "broadcast: root " << root << " outside a group of " << size_;
  return launch("broadcast", {&t}, [&](cudaStream_t s) {
    return ncclBroadcast(t.raw(), t.raw(), static_cast<size_t>(t.numel()), nccl_type(t), root, comm_, s);
  });
}

std::shared_ptr<Work> ProcessGroupNccl::reduce(Tensor& t, int root, ReduceOp op) {
  DPB_CHECK(root >= 0 && root < size_) << "reduce: root " << root << " outside a group of " << size_;
  return launch("reduce", {&t}, [&](cudaStream_t s) {
    return ncclReduce(t.raw(), t.raw(), static_cast<size_t>(t.numel()), nccl_type(t), nccl_op(op), root, comm_, s);
  });
}

std::shared_ptr<Work> ProcessGroupNccl::allgather(Tensor& out, const Tensor& in) {
  DPB_CHECK(out.dtype() == in.dtype()) << "allgather: " << dtype_name(in.dtype()) << " gathered into "
                                       << dtype_name(out.dtype()) << " (the output takes the input's type)";
  DPB_CHECK(out.numel() == in.numel() * size_) << "allgather: output has " << out.numel() << " elements, expected "
                                               << size_ << " x " << in.numel();
  return launch("allgather", {&out, &in}, [&](cudaStream_t s) {
    return ncclAllGather(in.raw(), out.raw(), static_cast<size_t>(in.numel()), nccl_type(in), comm_, s);
  });
}

std::shared_ptr<Work> ProcessGroupNccl::reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op) {
  DPB_CHECK(in.numel() == out.numel() * size_) << "reduce_scatter: input has " << in.numel()
                                               << " elements, expected " << size_ << " x " << out.numel();
  return launch("reduce_scatter", {&out, &in}, [&](cudaStream_t s) {
    return ncclReduceScatter(in.raw(), out.raw(), static_cast<size_t>(out.numel()), nccl_type(in), nccl_op(op), comm_,
                             s);
  });
}

std::shared_ptr<Work> ProcessGroupNccl::barrier() {
  Tensor one = Tensor::full({1}, 1.0f, Device::cuda(device_));
  return launch("barrier", {&one}, [&](cudaStream_t s) {
    return ncclAllReduce(one.raw(), one.raw(), 1, ncclFloat32, ncclSum, comm_, s);
  });
}

std::shared_ptr<Work> ProcessGroupNccl::send(const Tensor& t, int dst, int tag) {
  DPB_CHECK(dst >= 0 && dst < size_ && dst != rank_) << "send: destination rank " << dst;
  (void)tag;  // NCCL matches sends and receives by order, not by tag
  return launch("send", {&t}, [&](cudaStream_t s) {
    return ncclSend(t.raw(), static_cast<size_t>(t.numel()), nccl_type(t), dst, comm_, s);
  });
}

std::shared_ptr<Work> ProcessGroupNccl::recv(Tensor& t, int src, int tag) {
  DPB_CHECK(src >= 0 && src < size_ && src != rank_) << "recv: source rank " << src;
  (void)tag;
  return launch("recv", {&t}, [&](cudaStream_t s) {
    return ncclRecv(t.raw(), static_cast<size_t>(t.numel()), nccl_type(t), src, comm_, s);
  });
}

}  // namespace dpb::comm
