#pragma once
// ProcessGroup: the collectives DDP and the collective benchmarks use, over Gloo (CPU
// tensors; CUDA tensors staged through host memory) or NCCL (CUDA tensors). Every
// rank calls the collectives in the same order with matching tensors; each call
// returns a Work whose wait() is bounded by the group's timeout. When a collective
// times out or a peer dies the group is broken: the error names the op, its sequence
// number and the ranks that did not arrive (from every rank's published progress, see
// health.h), and every later call fails at once with the same cause. Never an
// unbounded wait.
#include <chrono>
#include <memory>
#include <string>

#include "engine/comm/store.h"
#include "engine/tensor/tensor.h"

namespace dpb::comm {

enum class ReduceOp { sum, avg, max, min };
const char* reduce_op_name(ReduceOp op);

class Work {
 public:
  virtual ~Work() = default;
  // Waits until the operation completes; dpb::Error when it failed, or when it did not
  // complete within `timeout` (the group's timeout when zero).
  virtual void wait(Millis timeout = Millis(0)) = 0;
  virtual bool completed() = 0;
  // When the communication itself ran (steady-clock ns, as engine/core/clock.h's
  // now_ns()), once completed; 0 where the backend cannot tell. For overlap metrics.
  virtual int64_t started_ns() const { return 0; }
  virtual int64_t finished_ns() const { return 0; }
};

struct GroupOptions {
  Millis timeout{std::chrono::seconds(300)};
  // Before every collective, all ranks compare what they are about to call (op, sequence
  // number, element count, dtype, root): a mismatch is an error naming the ranks, not a
  // hang (as TORCH_DISTRIBUTED_DEBUG=DETAIL). Costs one small all-gather per collective.
  bool debug_collectives = false;
  // Where the other ranks reach this one (rendezvous.h's advertised_address): Gloo
  // listens there, and NCCL bootstraps over its interface unless NCCL_SOCKET_IFNAME says
  // otherwise. Empty: GLOO_SOCKET_IFNAME's interface when set, else 127.0.0.1.
  std::string host;
  // Gloo: how long a thread waiting for a collective polls (yielding its core) before it
  // sleeps. A rank that sleeps through a short collective pays for waking: on virtual
  // machines a halted vCPU takes milliseconds to wake, more than a small all-reduce
  // takes. 0: sleep at once (as PyTorch's Gloo group does).
  Millis spin{20};
  // Gloo: ranks that share a host all-reduce f32 sums and averages through shared memory
  // (shm_allreduce.h) instead of Gloo's loopback TCP.
  bool shared_memory = true;
};

class ProcessGroup {
 public:
  ProcessGroup(int rank, int size, GroupOptions options) : rank_(rank), size_(size), options_(std::move(options)) {}
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const GroupOptions& options() const { return options_; }
  virtual std::string backend() const = 0;

  // In place on every rank.
  virtual std::shared_ptr<Work> allreduce(Tensor& t, ReduceOp op = ReduceOp::sum) = 0;
  // root's values to every rank.
  virtual std::shared_ptr<Work> broadcast(Tensor& t, int root) = 0;
  // The reduction lands on root (other ranks' tensors are left as they were).
  virtual std::shared_ptr<Work> reduce(Tensor& t, int root, ReduceOp op = ReduceOp::sum) = 0;
  // out holds size() * in.numel() elements: rank r's input at offset r * in.numel().
  virtual std::shared_ptr<Work> allgather(Tensor& out, const Tensor& in) = 0;
  // in holds size() * out.numel() elements; rank r receives the reduction of chunk r.
  virtual std::shared_ptr<Work> reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op = ReduceOp::sum) = 0;
  virtual std::shared_ptr<Work> barrier() = 0;
  virtual std::shared_ptr<Work> send(const Tensor& t, int dst, int tag = 0) = 0;
  virtual std::shared_ptr<Work> recv(Tensor& t, int src, int tag = 0) = 0;

  // A zeroed f32 buffer of `numel` elements on logical CPU device `device` that this
  // group all-reduces in place, without copies (where its ranks share a host's memory),
  // or an undefined tensor where it cannot. Collective: every rank asks for the same sizes
  // in the same order.
  virtual Tensor shared_buffer(int64_t numel, Device device) {
    (void)numel;
    (void)device;
    return {};
  }

 protected:
  int rank_, size_;
  GroupOptions options_;
};

// "gloo" or "nccl" (CUDA builds); every rank passes the same store. Bounded by
// options.timeout while the ranks find each other.
std::unique_ptr<ProcessGroup> make_process_group(const std::string& backend, std::shared_ptr<Store> store, int rank,
                                                 int size, const GroupOptions& options, Device device);

// A 2D mesh of `world` ranks as Megatron-LM lays it out: tensor-parallel groups of `tp`
// adjacent ranks (rank = data rank x tp + tensor rank) and data-parallel groups of the
// ranks with the same tensor rank, each group in its own namespace of `store`. `tp`
// must divide `world`.
struct MeshGroups {
  std::unique_ptr<ProcessGroup> data, tensor;
};
MeshGroups make_mesh_groups(const std::string& backend, const std::shared_ptr<Store>& store, int rank, int world,
                            int tp, const GroupOptions& options, Device device);

}  // namespace dpb::comm
