#pragma once
// ProcessGroup over NCCL, for tensors on this rank's GPU. The communicator is
// non-blocking (config.blocking = 0): every NCCL call returns at once, and waits poll
// ncclCommGetAsyncError with the group's timeout, so an init or a collective whose
// peer died ends with ncclCommAbort and an error naming the op and the missing ranks
// instead of a hang. Collectives run on the device's communication stream after the
// caller's current stream (an event), so they overlap with compute queued after them;
// Work::wait() makes the caller's stream wait for the collective (the host blocks
// only until it is known to have completed or failed).
#include <nccl.h>

#include "engine/comm/health.h"
#include "engine/comm/process_group.h"

namespace dpb::comm {

class ProcessGroupNccl : public ProcessGroup {
 public:
  ProcessGroupNccl(std::shared_ptr<Store> store, int rank, int size, GroupOptions options, int device);
  ~ProcessGroupNccl() override;

  std::string backend() const override { return "nccl"; }
  std::shared_ptr<Work> allreduce(Tensor& t, ReduceOp op) override;
  std::shared_ptr<Work> broadcast(Tensor& t, int root) override;
  std::shared_ptr<Work> reduce(Tensor& t, int root, ReduceOp op) override;
  std::shared_ptr<Work> allgather(Tensor& out, const Tensor& in) override;
  std::shared_ptr<Work> reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op) override;
  std::shared_ptr<Work> barrier() override;
  std::shared_ptr<Work> send(const Tensor& t, int dst, int tag) override;
  std::shared_ptr<Work> recv(Tensor& t, int src, int tag) override;

  // Waits for NCCL's pending state to resolve; aborts and fails after the timeout.
  void wait_ready(const char* what, int64_t seq);
  // Aborts the communicator; the group is broken from now on with `why`.
  void abort(const std::string& why);
  GroupHealth& health() { return *health_; }
  ncclComm_t comm() const { return comm_; }
  const std::string& broken() const { return broken_; }

 private:
  template <typename Launch>
  std::shared_ptr<Work> launch(const char* op, std::initializer_list<const Tensor*> tensors, Launch&& fn);

  std::shared_ptr<Store> store_;
  int device_;
  ncclComm_t comm_ = nullptr;
  std::unique_ptr<GroupHealth> health_;
  int64_t next_seq_ = 0;
  std::string broken_;
};

}  // namespace dpb::comm
