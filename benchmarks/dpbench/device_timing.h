#pragma once
// --device-timing: which clock times a run's device work (docs/ARCHITECTURE.md §4a), and
// the figures that come from it. On logical CPU devices the host clock is the device's
// (source host, no collector). On GPUs:
//   auto    CUPTI's activity records; CUDA timing events around each span when CUPTI
//           cannot subscribe (another profiler holds it), saying why;
//   cupti   CUPTI or a clear error;
//   events  CUDA timing events;
//   off     host spans (launch times, not run times), as the report's source says.
// The collector runs over the measured steps only (started when the warm-up ends).
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "benchmarks/dpbench/metrics.h"
#include "benchmarks/dpbench/options.h"
#include "engine/backend/device_activity.h"
#include "engine/trace/analysis.h"
#include "engine/trace/timeline.h"

namespace dpb::bench {

struct DeviceTimingRun {
  std::unique_ptr<DeviceActivity> collector;  // null: host spans
  std::string note;                           // why the source is not the one asked for
};

// Starts the collector --device-timing asks for on `devices` (nothing on CPU devices or
// with off). Throws dpb::Error for --device-timing=cupti when CUPTI cannot subscribe.
DeviceTimingRun start_device_timing(DeviceTiming timing, const std::vector<Device>& devices);

// The device timeline of the measured steps, analysed (HTA's definitions) over their
// window, each step a step of the timeline.
struct DeviceFigures {
  trace::TimelineSource source = trace::TimelineSource::host;
  trace::RankAnalysis analysis;
  uint64_t dropped = 0;
  int64_t clock_residual_ns = 0;
  std::string note;
  trace::RankTimeline timeline;
};
// Stops the collector and reads its timeline; nullopt without one.
std::optional<DeviceFigures> finish_device_timing(DeviceTimingRun& run, const std::vector<StepRecord>& measured);
// The same from a timeline already read (what finish_device_timing does after stop()).
DeviceFigures device_figures(trace::RankTimeline timeline, trace::TimelineSource source,
                             const std::vector<StepRecord>& measured);

// DDP's all-reduces where the process group could not time them (NCCL's run on the
// device): each measured step's buckets, in the order they were launched, take the
// all-reduce kernels that began on `device` within that step, in the order they began
// (one stream runs them in launch order). From CUPTI's records only (timing events time
// spans, not kernels); a step whose kernels and unknown buckets differ in number is
// left unknown. Returns the buckets filled.
int fill_bucket_times(const DeviceFigures& f, int device, std::vector<StepRecord>& measured);

// A device's busy share and breakdown over the window from the device timeline; a
// device that ran nothing in the window was idle all of it.
trace::Breakdown device_breakdown(const DeviceFigures& f, int device, const Window& w);
// A rank's busy, compute, communication, exposed communication and breakdown from its
// device's timeline instead of host spans (the host figures stay where the device
// timeline has nothing to say: step times, data waits, the optimizer's host time).
void apply_device_figures(const DeviceFigures& f, int device, const Window& w, RankMetrics& m);

}  // namespace dpb::bench

namespace dpb::bench {

// The device timeline as timeline intervals, for --trace and the report's excerpt (never
// recorded on the process's timeline, whose host spans stay as they are): each kernel,
// copy and set on a lane per GPU stream ("gpu stream 7"), each launch call on "cuda api";
// a launch and the work it queued share an argument "correlation" (the launch carries it
// as "launch"), which the Perfetto trace draws as a flow.
std::vector<trace::Interval> device_intervals(const DeviceFigures& f);

}  // namespace dpb::bench
