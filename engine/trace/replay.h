#pragma once
// What a rank's profiled steps would take if some of its host time went away: the
// measured timeline replayed with those spans cut out (and, where a fix costs something
// of its own, that cost added), so that a finding can say what its fix is worth.
//
// The replay walks the host's CUDA calls in the order they began, on every thread, each
// moved by what was cut (or added) before it:
//   - device work starts when its launching call (moved) has queued it (as long after
//     the call began as it did, within the call) and its stream is free: its duration is
//     as measured, so a device kept busy stays busy and one that waited on launches
//     still waits on them;
//   - a call that blocked until the device was done returns its own cost (all of it
//     where what it waited for was done before it began, else what it took after that)
//     after the later of its moved start and the replayed end of what it waited for: a
//     copy from pageable memory, its own stream; a synchronize, every stream whose work
//     queued before it had ended when it returned. What the host gains, it may give back
//     waiting for the device;
//   - steps begin and end where their host times moved to.
// Not modelled: waits across streams (events), which the replay does not see; host
// threads are moved together (PyTorch's autograd thread launches while the main thread
// waits in backward).
#include <cstdint>
#include <optional>
#include <vector>

#include "engine/trace/device_timeline.h"
#include "engine/trace/host_index.h"

namespace dpb::trace {

// The host time [begin, end) cut from every thread, and `added_ns` of new host work at
// its end (0: none).
struct HostEdit {
  int64_t begin_ns = 0, end_ns = 0;
  int64_t added_ns = 0;
};

struct StepReplay {
  std::vector<int64_t> measured_ns, replayed_ns;  // each step, as measured and replayed
  int64_t measured_median_ns = 0, replayed_median_ns = 0;
  int64_t cut_ns = 0, added_ns = 0;  // in the steps, in all
  int64_t device_waited_ns = 0;      // of what was cut: given back to blocking calls
};

// `steps`: the profiled steps, in order; `edits`: disjoint, in order. Empty steps give an
// empty result.
StepReplay replay_steps(const RankTimeline& t, const HostIndex& host, const std::vector<Span64>& steps,
                        const std::vector<HostEdit>& edits);

// The input made ahead of the step (DataLoader workers with prefetch): the DataLoader's
// waits and the ops that make the input on the CPU cut from the host. Each batch's
// hand-over stays: a batch made in a worker process arrives in shared memory this process
// has not touched, and its copy to the device, from pageable memory, reads it once more
// (the length of the first such copy call after the wait is added where the wait ended;
// a copy from pinned memory adds nothing). Not modelled: the workers' own load on the
// host's cores. Null where the steps hold nothing to cut.
struct InputAhead {
  StepReplay replay;
  int batches = 0;           // DataLoader waits in the steps
  int64_t handover_ns = 0;   // added, in all
};
std::optional<InputAhead> replay_input_ahead(const RankTimeline& t, const HostIndex& host,
                                             const std::vector<Span64>& steps);

}  // namespace dpb::trace
