#pragma once
// ProcessGroup over Gloo's TCP transport (Debian's libgloo). Collectives run in call
// order on one communication thread per group, so a caller (DDP's reducer) queues a
// bucket's all-reduce and keeps computing; Work::wait() joins it. Ranks that share a host
// all-reduce f32 sums and averages through shared memory (shm_allreduce.h). F32 tensors on the
// CPU run in place; CUDA tensors are staged through host memory, so several ranks can
// share one GPU. Every Gloo call carries the group's timeout.
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "engine/comm/gloo/shm_allreduce.h"
#include "engine/comm/health.h"
#include "engine/comm/process_group.h"

namespace gloo {
class Context;
}

namespace dpb::comm {

class ProcessGroupGloo : public ProcessGroup {
 public:
  ProcessGroupGloo(std::shared_ptr<Store> store, int rank, int size, GroupOptions options);
  ~ProcessGroupGloo() override;

  std::string backend() const override { return "gloo"; }
  std::shared_ptr<Work> allreduce(Tensor& t, ReduceOp op) override;
  std::shared_ptr<Work> broadcast(Tensor& t, int root) override;
  std::shared_ptr<Work> reduce(Tensor& t, int root, ReduceOp op) override;
  std::shared_ptr<Work> allgather(Tensor& out, const Tensor& in) override;
  std::shared_ptr<Work> reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op) override;
  std::shared_ptr<Work> barrier() override;
  std::shared_ptr<Work> send(const Tensor& t, int dst, int tag) override;
  std::shared_ptr<Work> recv(Tensor& t, int src, int tag) override;
  // Ranks on one host: a region of shared memory, all-reduced in place (sums and averages).
  Tensor shared_buffer(int64_t numel, Device device) override;

  struct Call;  // one queued collective (process_group_gloo.cpp)

 private:
  std::shared_ptr<Work> enqueue(std::shared_ptr<Call> call);
  void run_loop();
  void check_consistent(const Call& c);

  std::shared_ptr<Store> store_;
  std::shared_ptr<gloo::Context> context_;
  std::unique_ptr<GroupHealth> health_;
  std::unique_ptr<ShmAllreduce> shm_;  // ranks on one host: all-reduce through shared memory
  int regions_ = 0;  // shared buffers handed out
  int64_t next_seq_ = 0;       // collectives queued (caller side)
  std::string broken_;         // the first failure; later calls fail with it
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Call>> queue_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace dpb::comm
