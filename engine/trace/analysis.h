#pragma once
// The analyses of a device timeline (device_timeline.h), with Holistic Trace
// Analysis' definitions so that figures agree with it, for dpbench runs and PyTorch
// traces alike:
//
//   window            the profiled steps: from the first to the end of the last profiler
//                     step the kernel span falls in (the last step left out, as HTA does:
//                     the profiler may cut off its work), widened to the kernel span, so
//                     host time before a step's first kernel and after its last is inside;
//                     where no step is recorded, HTA's: from the first to the last device
//                     work launched by host calls made before the last profiler step
//                     began. Or the window the caller gives (dpbench's measured steps).
//                     The breakdown over HTA's window is kept beside (hta_breakdown), to
//                     compare with HTA.
//   temporal breakdown per device: compute, communication and memory shares of the
//                     window (each instant counted once, in that order of precedence),
//                     idle the rest (breakdown.h).
//   overlap           |compute ∩ communication| / |communication|.
//   idle breakdown    per stream (HTA's: each gap before a kernel is host wait when its
//                     launch began after the previous kernel ended, kernel wait when
//                     shorter than 30 us, other otherwise), and per device over the gaps in
//                     all of its work.
//   launches          launch delay (kernel start - end of its launch call), kernels per
//                     step, short kernels (shorter than their launch call).
//   host syncs        time the host blocked in synchronize calls and in copies it waited
//                     for, per step, and the host ops they ran in.
//   copies            bytes by direction, pageable against pinned, bandwidth.
//   across ranks      the spread of step times and which rank starts the collectives last.
#include <optional>
#include <string>
#include <vector>

#include "engine/trace/breakdown.h"
#include "engine/trace/device_timeline.h"
#include "engine/trace/idle_causes.h"
#include "engine/trace/replay.h"

namespace dpb::trace {

struct AnalysisOptions {
  std::optional<Span64> window;         // default: HTA's window
  int64_t kernel_wait_threshold_ns = 30'000;
  bool launches_known = true;           // false for host timelines: no launch calls exist
};

struct StreamIdle {
  int device = 0;
  int64_t stream = -1;
  double idle_s = 0, host_wait_s = 0, kernel_wait_s = 0, other_s = 0;
};

struct DeviceAnalysis {
  int device = 0;
  Breakdown breakdown;      // over the window
  Breakdown hta_breakdown;  // over HTA's window (the kernel span; the same where no step is recorded)
  std::vector<StreamIdle> streams;
  // Per step (medians over the window's steps): the device's compute, its communication
  // and the part of that not hidden behind compute.
  std::optional<double> compute_per_step_s, comm_per_step_s, exposed_comm_per_step_s;
  // Per collective kind that ran (NCCL's kernel names), in kind order: its kernels in the
  // window, and per step (medians) their time and the part of it not under compute.
  struct Collectives {
    CollectiveKind kind = CollectiveKind::other;
    int64_t kernels = 0;
    double per_step_s = 0, exposed_per_step_s = 0;
  };
  std::vector<Collectives> collectives;
  // Per step of the window: compute, and the idle time the host caused (host wait).
  std::vector<double> compute_steps_s, host_wait_steps_s;
  // Every gap charged to what the device waited for (idle_causes.h).
  IdleCauses idle;
  double busy_share() const { return 1.0 - breakdown.idle_share.value_or(1.0); }
};

struct LaunchStats {
  int64_t kernels = 0;
  std::optional<double> kernels_per_step;
  std::optional<double> median_launch_delay_s;
  std::optional<double> short_kernel_share;  // kernels shorter than their launch call
  std::optional<double> median_kernel_s;
};

struct SyncOp {
  std::string name;  // the host op the blocking call ran in (or the call itself)
  double seconds = 0;
  int64_t calls = 0;
};

struct SyncStats {
  int64_t calls = 0;
  double blocked_s = 0;                  // over the window
  std::optional<double> per_step_s, share;  // share of the window's step time
  std::vector<SyncOp> top_ops;           // most blocking first
};

struct CopyStats {
  int64_t copies = 0;
  int64_t h2d_bytes = 0, d2h_bytes = 0, d2d_bytes = 0, pageable_bytes = 0, pinned_bytes = 0;
  double copy_s = 0, pageable_s = 0;
  std::optional<double> h2d_gbps, d2h_gbps;  // bytes / time of the copies that say their size
  std::optional<double> per_step_s;
};

// Events a trace lost: launch calls whose device work is not in it, and device work
// whose launch call is not (within the window). Kineto drops records when its buffers
// fill, and a trace cut to a window or sampled loses one side of some pairs.
struct LostEvents {
  int64_t launches = 0, launches_without_work = 0;
  int64_t work = 0, work_without_launch = 0;
  int64_t work_queued_before = 0;  // ran before any launch the trace holds: queued before it began
  // The larger of the two shares (0 when nothing was launched).
  double share() const;
};

struct RankAnalysis {
  std::optional<int> rank;
  std::string host;
  Span64 window{0, 0};
  Span64 hta_window{0, 0};            // HTA's: the kernel span (see the header)
  bool window_is_steps = false;       // the window is the profiled steps (else the kernel span or the caller's)
  int steps = 0;                      // steps in the window
  std::optional<double> step_s;       // median step, without its wait for data
  std::optional<double> full_step_s;  // median step as measured, its wait for data included
  double data_wait_share = 0;
  int main_device = 0;                // the device with the most work
  std::vector<DeviceAnalysis> devices;
  LaunchStats launches;
  SyncStats syncs;
  CopyStats copies;
  LostEvents lost;
  // The profiled steps replayed with the input made ahead (replay.h): what a data-loading
  // fix is worth. Null without profiled steps, or nothing to cut.
  std::optional<InputAhead> input_ahead;
  const DeviceAnalysis* device(int d) const;
  const DeviceAnalysis& main() const;
};

// Every analysis of one rank's timeline. A timeline without device work gets an empty
// `devices`.
RankAnalysis analyze_rank(const RankTimeline& t, const AnalysisOptions& options = {});

// One collective across the ranks (the k-th communication kernel of each rank's main
// device): who started it last, and how long each rank's kernel waited for that.
struct CollectiveArrival {
  std::string name;      // the first rank's kernel
  size_t last = 0;       // the rank (index) that started it last
  int64_t spread_ns = 0;  // last start - first start
};

struct CrossRank {
  std::optional<double> step_spread;  // (slowest - fastest) / fastest median step
  int collectives = 0;                // collectives matched across ranks (by order)
  std::vector<int> last_starts;       // per rank (in the order given): collectives it started last
  // Whether the ranks' clocks agree: each collective ends on every rank at about the same
  // time (median spread of the ends under 100 us, or a tenth of the median kernel).
  // Arrival order means something only then.
  bool clocks_agree = false;
  int64_t end_spread_ns = 0;          // median over the collectives of (last end - first end)
  std::vector<CollectiveArrival> arrivals;  // every collective, in order
  // Per rank, over the window: the time its communication kernels spent waiting for a
  // later rank to arrive (exposed: not under its compute), and the time the others waited
  // for it when it came last (summed over the others).
  std::vector<int64_t> wait_exposed_ns, made_others_wait_ns;
  // Per rank: when it started its step (the step holding its first collective) after the
  // earliest rank did, and its device compute from its step start to its first
  // collective: late arrival from a late start, or from more work.
  std::vector<int64_t> step_start_offset_ns, compute_before_first_ns;
};
CrossRank analyze_ranks(const std::vector<RankTimeline>& timelines, const std::vector<RankAnalysis>& analyses);

}  // namespace dpb::trace
