#pragma once
// Why a device idled: every gap in its work within the window charged to what the
// device waited for (docs/ARCHITECTURE.md §6). A gap ends when the next work starts, and:
//   the next work was queued before the gap began (its launch call had returned): the
//     device waited on itself, a dependency on another stream or event, or launch
//     latency (device_wait);
//   its launch was not recorded: unknown (the trace lost events);
//   else the host had not issued it yet: the gap, until the launching call returned, is
//     charged to what the launching thread did meanwhile, first match wins:
//       data_loading     making the input: inside the DataLoader's __next__ (on any
//                        thread); in ops that make it on the CPU (random generation on a
//                        CPU tensor, Python that loads, decodes or preprocesses:
//                        is_input_op); and ops on CPU tensors (aten ops that called
//                        nothing on the device) in a profiled step before the step's
//                        first launch (nothing is launched yet: the host prepares what
//                        the step will compute on);
//       allocator        in cudaMalloc/cudaFree and the like;
//       slow_call        in any other CUDA call of 1 ms or more: a kernel's first launch
//                        (lazy module loading), library set-up, stream or event creation;
//       copy             blocked in a copy to the device (a synchronous cudaMemcpy, or the
//                        synchronize a copy from pageable memory ends with), and the rest
//                        of a gap that began while the thread was blocked so: the copy's
//                        source is not pinned, so the host waits for it and the device
//                        then waits for the host to launch again;
//       host_sync        blocked in a synchronize or a blocking copy from the device; and
//                        the rest of a gap that began while the thread was blocked so: a
//                        sync explains idle time only when the device had nothing left
//                        queued, which is when the device drains inside it; then the
//                        device waits for the thread to go on and launch again;
//       unrecorded       1 ms or more in which no thread recorded anything (the profiler
//                        starting or stopping, Python outside any op), in any gap; said as
//                        such, never guessed;
//       launch_overhead  host work between launches (recorded ops, the optimizer, Python
//                        the profiler did not record) in gaps under 10 ms;
//       host_work        recorded host work in gaps of 10 ms or more (CPU computation,
//                        checkpoints, logging);
//   The moment after the call returned until the work started is launch overhead (or
//   host_sync, or copy, after a drain).
// The cold start is the first iteration (iterations from ProfilerStep#, else the
// DataLoader's __next__, else the optimizer's step; without any, the window is one), and
// any later gap whose launching thread spent 1 ms or more in a kernel's first launch
// (lazy module loading) or in CUDA set-up (stream and event creation, device properties,
// module loading): the time they lost to the allocator, slow calls, long host work and
// unrecorded long gaps is warm-up.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/trace/device_timeline.h"
#include "engine/trace/host_index.h"

namespace dpb::trace {

enum class IdleCause : uint8_t {
  data_loading,
  allocator,
  slow_call,
  host_sync,
  launch_overhead,
  host_work,
  unrecorded,
  device_wait,
  unknown,
  copy,
};
inline constexpr size_t kIdleCauses = 10;
const char* idle_cause_name(IdleCause c);

// A call or op, and how much of the gaps it took.
struct NamedTime {
  std::string name;
  int64_t ns = 0, count = 0, longest_ns = 0;
};

struct IdleGap {
  int64_t begin_ns = 0, end_ns = 0;
  IdleCause cause = IdleCause::unknown;  // what most of it went to
  std::string next, call;                // the work that ended it, the call that launched it
  int64_t call_ns = 0;                   // that call's length
  std::string op;                        // the op the launching thread was in at the gap's end
  std::vector<NamedTime> calls;          // the thread's longest calls within the gap
  int64_t data_ns = 0;                   // of it, inside the DataLoader's __next__
};

struct Iterations {
  int count = 1;
  std::string marker = "none";  // ProfilerStep, DataLoader, optimizer step, none
  int64_t first_end_ns = 0;     // the end of the first iteration (the cold start)
  std::vector<int64_t> step_starts;  // the profiled steps' starts within the window, in order
};
// The iterations over the window (see the header).
Iterations find_iterations(const RankTimeline& t, Span64 window);

struct IdleCauses {
  static constexpr int64_t kLongGapNs = 10'000'000;
  int64_t window_ns = 0, idle_ns = 0, gaps = 0, small_gap_ns = 0;  // small: in gaps under kLongGapNs
  std::array<int64_t, kIdleCauses> ns{};       // over the window
  std::array<int64_t, kIdleCauses> cold_ns{};  // the part within the cold start
  int64_t optimizer_ns = 0;                    // of launch_overhead and host_work: in the optimizer
  Iterations iterations;
  Span64 cold_start{0, 0};  // the first iteration, within the window
  int64_t late_cold_ns = 0;  // gaps after it that are cold too (a kernel's first launch, set-up)
  int64_t lead_in_ns = 0;   // the first profiled step's time before the device's first work
  std::vector<IdleGap> longest;     // up to 5, longest first
  std::vector<NamedTime> calls;     // allocator and slow calls in the gaps, most time first
  std::vector<NamedTime> sync_ops;  // the ops the blocking calls in or before the gaps ran in
  // Per cause, the host ops (or calls, or "nothing recorded") its time was charged to, most
  // time first: what a person opens the trace at.
  std::array<std::vector<NamedTime>, kIdleCauses> ops;
  const std::vector<NamedTime>& ops_of(IdleCause c) const { return ops[static_cast<size_t>(c)]; }
  int64_t operator[](IdleCause c) const { return ns[static_cast<size_t>(c)]; }
  int64_t cold(IdleCause c) const { return cold_ns[static_cast<size_t>(c)]; }
  // Cold-start time lost to set-up: allocator, slow calls, unrecorded long gaps.
  int64_t warmup_ns() const;
  // The same causes after the cold start.
  int64_t one_off_ns() const;
};

// `work`: the device's work within the window, in order of start. `launches_known`: false
// for host timelines, which have no launch calls (every gap is then unknown).
IdleCauses attribute_idle(const HostIndex& host, const std::vector<const DeviceWork*>& work, Span64 window,
                          const Iterations& iterations, bool launches_known);

}  // namespace dpb::trace
