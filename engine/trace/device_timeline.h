#pragma once
// A device timeline: what the devices of one process (one rank) ran and when, and the
// host calls that launched it. One shape for every source, so one analysis
// (analysis.h) serves them all:
//   dpbench on GPUs       CUPTI activity records (kernels, copies, sets) and runtime calls;
//   dpbench on CPU devices the host timeline (it is their device time);
//   PyTorch jobs          Kineto traces' kernel, gpu_memcpy, gpu_memset, cuda_runtime and
//                         cpu_op events.
// Times are steady-clock (or trace) nanoseconds; names are interned in a table, so a
// large trace costs a few dozen bytes per event.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/trace/intervals.h"

namespace dpb::trace {

// What a piece of device work is, as Holistic Trace Analysis classifies kernels by name:
//   communication  ^nccl.*Kernel; and, beyond HTA, what other kernels communicate:
//                  PyTorch's symmetric memory (multimem, one-shot and two-shot
//                  all-reduce), custom all-reduces (vLLM, TensorRT-LLM), DeepEP's
//                  dispatch and combine, NVSHMEM, all-to-all kernels;
//   memory         copies and sets (^Memcpy, ^Memset, ^dma);
//   compute        any other kernel, except ones named like copies or syncs (other).
enum class Work : uint8_t { compute, communication, memory, other };
Work classify_kernel(std::string_view name);
const char* work_name(Work w);

// The collective a communication kernel runs, read from NCCL's kernel name: the word after
// "Kernel_" (ncclKernel_AllReduce_RING_LL_Sum_float, ncclDevKernel_AllGather_RING_LL,
// ncclKernel_SendRecv, ...), or from what another communication kernel's name says it
// does (multimem_all_reduce_kernel: all-reduce; deep_ep::intranode::dispatch: all-to-all);
// other for anything else.
enum class CollectiveKind : uint8_t { all_reduce, all_gather, reduce_scatter, broadcast, reduce, send_recv,
                                      all_to_all, other };
CollectiveKind collective_kind(std::string_view kernel_name);
const char* collective_kind_name(CollectiveKind k);  // "all-reduce", "all-gather", ...

enum class CopyKind : uint8_t { none, h2d, d2h, d2d, p2p, memset, other };
const char* copy_kind_name(CopyKind k);

// Interned strings: an id per distinct name.
class NameTable {
 public:
  uint32_t intern(std::string_view name);
  const std::string& name(uint32_t id) const { return names_[id]; }
  size_t size() const { return names_.size(); }

 private:
  std::vector<std::string> names_;
  std::unordered_map<std::string, uint32_t> ids_;
};

struct DeviceWork {
  int device = 0;
  int64_t stream = -1;
  Work work = Work::compute;
  int64_t begin_ns = 0, end_ns = 0;
  int64_t correlation = -1;  // the host call that launched it (-1: unknown)
  uint32_t name = 0;
  CopyKind copy = CopyKind::none;
  int64_t bytes = -1;          // copies and sets (-1: unknown)
  int8_t pinned = -1;          // host side of a copy: 1 pinned, 0 pageable, -1 unknown
};

enum class CallKind : uint8_t {
  launch,       // cudaLaunchKernel and friends: queue device work
  copy,         // cudaMemcpy* / cudaMemset*: queue (or do) a copy
  sync,         // cudaDeviceSynchronize, cudaStreamSynchronize, cudaEventSynchronize, cudaStreamWaitEvent...
  other
};
CallKind classify_runtime_call(std::string_view name);

struct HostCall {
  int64_t correlation = -1;
  int64_t begin_ns = 0, end_ns = 0;
  CallKind kind = CallKind::other;
  uint32_t name = 0;
  int64_t thread = 0;
};

// A host operator (aten::item, aten::copy_, a module's forward): what a host call ran
// inside, for naming the ops that block on the device, and what the host thread did
// while a device waited for it. The optimizer's step and zero_grad annotations are kept
// as their own kind, so that host time between launches can be put down to them; Python
// functions (a trace recorded with_stack) as theirs: they say what the host ran where no
// op was recorded (input preprocessing in Python, for instance).
enum class HostOpKind : uint8_t { op, optimizer, python };
struct HostOp {
  int64_t begin_ns = 0, end_ns = 0;
  uint32_t name = 0;
  int64_t thread = 0;
  HostOpKind kind = HostOpKind::op;
};

// A collective as the framework asked for it on the host: PyTorch's record_function
// ("nccl:all_reduce", "gloo:all_gather", ...) or its record_param_comms with the message
// size (PyTorch 2.x), with the bytes of its input where the trace recorded them (-1:
// unknown; a trace recorded without record_shapes).
struct HostCollective {
  int64_t begin_ns = 0, end_ns = 0;
  int64_t thread = 0;
  CollectiveKind kind = CollectiveKind::other;
  int64_t bytes = -1;
};

// A parameter's gradient accumulated by autograd (torch::autograd::AccumulateGrad), when
// and on which thread, with its bytes (traces recorded with record_shapes).
struct GradientReady {
  int64_t begin_ns = 0, end_ns = 0;
  int64_t thread = 0;
  int64_t bytes = 0;
};

struct RankTimeline {
  std::optional<int> rank;
  int world = 1;
  std::string host, source;  // where it came from ("dpbench report", a trace's path)
  int visible_devices = 0;   // GPUs the process could see (deviceProperties)
  NameTable names;
  std::vector<DeviceWork> work;
  std::vector<HostCall> calls;
  std::vector<HostOp> ops;
  std::vector<Span64> steps;       // optimizer steps (ProfilerStep#N)
  int first_step_number = -1;      // the N of the first ProfilerStep#N (-1: none)
  std::vector<int> step_numbers;   // each ProfilerStep#N's N, as read (-1: not a number)
  std::vector<Span64> data_waits;  // the loop waiting for its input (DataLoader __next__)
  std::vector<Span64> optimizer_steps;  // the optimizer's step (Optimizer.step#...): iteration ends
  std::vector<HostCollective> collectives;  // as the host issued them (Kineto traces)
  std::vector<GradientReady> gradients;     // AccumulateGrad with its shape (record_shapes)
  std::string gpu_name;                     // the first of deviceProperties (empty: not said)
  int64_t dp_forwards = 0;         // DataParallel.forward calls
  // Which parallel wrapper the host ops show: DistributedDataParallel.forward calls, FSDP
  // ops (FSDP2's FSDP::..., FSDP1's FullyShardedDataParallel.forward) and functional
  // collectives (_c10d_functional::..., what DTensor's tensor parallelism issues).
  int64_t ddp_forwards = 0, fsdp_ops = 0, functional_collectives = 0;
  // The devices that ran anything, in order.
  std::vector<int> devices() const;
  // From the first to the last time anything kept begins or ends ({0, 0} when empty).
  Span64 extent() const;
  // Every time moved by `ns` (a trace's baseTimeNanoseconds); false, moving nothing, when
  // a time would leave what int64 nanoseconds hold.
  bool shift(int64_t ns);
};

}  // namespace dpb::trace
