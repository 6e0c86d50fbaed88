#pragma once
// What a process's host threads did, indexed for the questions the analyses ask of a
// time span on one thread: was it loading data, allocating device memory, inside a slow
// CUDA call, blocked on the device, in the optimizer, running recorded ops at all; and
// which op a call ran inside. Built once per rank timeline (device_timeline.h); the spans
// of each kind are merged into disjoint lists, so a question costs a binary search.
#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/trace/device_timeline.h"

namespace dpb::trace {

// CUDA calls that allocate or free memory (cudaMalloc*, cudaFree*, cudaHostAlloc, cuMem*).
bool is_allocator_call(std::string_view name);

// Host work that makes a step's input on the CPU: random generation (aten::randn,
// normal_, uniform_, randint, ...) when it launched no device work (a CPU tensor), and
// Python functions that load, decode or preprocess (a dataset's __getitem__, collate,
// preprocess, decode, read_video, an image processor, a tokenizer).
bool is_input_op(std::string_view name, HostOpKind kind);

class HostIndex {
 public:
  static constexpr int64_t kSlowCallNs = 1'000'000;  // a CUDA call this long is not routine

  struct Thread {
    // Disjoint and in order.
    std::vector<Span64> allocator;  // allocator calls
    std::vector<Span64> slow;       // other calls of kSlowCallNs or more (not syncs)
    std::vector<Span64> blocking;   // synchronize calls, and copy calls that waited for their copy
    std::vector<Span64> copy_blocking;  // of those, the ones that waited for a copy to the device
    std::vector<Span64> optimizer;  // the optimizer's annotations
    std::vector<Span64> input;      // ops that make the input on the CPU (is_input_op)
    std::vector<Span64> cpu_ops;    // aten ops that called nothing on the device (CPU tensors)
    std::vector<Span64> recorded;   // any op, Python function or call at all
    std::vector<const HostCall*> calls;  // every call, by start
    std::vector<const HostOp*> ops;      // every op (not Python functions), by start
    std::vector<const HostOp*> python;   // every Python function, by start
    std::vector<const HostOp*> input_ops;  // the ops and functions behind `input`, by start
    int64_t longest_op_ns = 0, longest_call_ns = 0, longest_input_ns = 0;
  };

  explicit HostIndex(const RankTimeline& t);

  const Thread* thread(int64_t tid) const;
  const std::vector<Span64>& data_waits() const { return data_waits_; }  // merged
  // What any thread recorded (ops, Python functions, calls), merged: where nothing is,
  // the host's time is unrecorded.
  const std::vector<Span64>& recorded_any() const { return recorded_any_; }
  // Every thread's ops that make the input on the CPU (Thread::input), merged.
  const std::vector<Span64>& input_any() const { return input_any_; }
  const HostCall* call_of(int64_t correlation) const;
  // A call that returned only once the device had done its work: a synchronize, or a copy
  // to or from the host that ended after its copy.
  bool blocking(const HostCall& c) const;
  // A blocking call that waited for a copy to the device: a synchronous cudaMemcpy to the
  // device, or the synchronize a copy from pageable memory ends with (the call just before
  // it on its thread queued a host-to-device copy). Such a copy is its own cause, not a
  // host sync: the host waits because the source is not pinned.
  bool blocking_copy(const HostCall& c) const;

  // The name of the outermost aten:: op around [b, e) on the thread, else of the innermost
  // op around it; empty when none is.
  std::string op_around(int64_t thread, int64_t b, int64_t e) const;
  const RankTimeline& timeline() const { return t_; }

 private:
  const RankTimeline& t_;
  std::unordered_map<int64_t, Thread> threads_;
  std::unordered_map<int64_t, size_t> call_of_;
  std::unordered_map<int64_t, const DeviceWork*> copy_of_;
  std::vector<Span64> data_waits_;
  std::vector<Span64> recorded_any_;
  std::vector<Span64> input_any_;
  std::unordered_set<const HostCall*> copy_waits_;  // the calls blocking_copy() names
  // Whether `c` (after `before` on its thread, if any) waited for a copy to the device.
  bool waits_for_copy_to_device(const HostCall& c, const HostCall* before) const;
};

// The part of disjoint, ordered `spans` within [lo, hi), clipped.
std::vector<Span64> clip(const std::vector<Span64>& spans, int64_t lo, int64_t hi);

}  // namespace dpb::trace
