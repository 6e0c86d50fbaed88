#pragma once
// What a run's GPUs ran and when, on their own clock: the device timeline of a GPU run
// (docs/ARCHITECTURE.md §4a). Two collectors, one result (a RankTimeline on the host's
// steady clock, logical devices as DeviceWork::device, so one analysis serves both):
//
//   cupti   the CUPTI Activity API: every kernel (NCCL's and CUDA-graph kernels too)
//           with its stream and correlation id, copies (kind, bytes, pinned or
//           pageable), sets, runtime and driver calls (graph launches among them),
//           synchronization; decoded by cupti_decode into a bounded ActivityLog, the GPU
//           clock converted from pairs of clock reads taken at start and stop. The
//           process's streams are named by role (compute, communication, copy).
//   events  CUDA timing events recorded on the span's stream where each timeline span
//           (trace::Span) begins and ends: the device's time of a forward, a backward,
//           an all-reduce, an optimizer step, where CUPTI cannot subscribe (another
//           profiler holds it: Nsight Systems, ncu). Coarser (one interval per span, no
//           launches) but on the device's clock.
//
// Neither waits for the device while the run is measured: CUPTI hands buffers over on
// its own thread, events are only recorded; both are read at stop(), after the run.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/tensor/device.h"
#include "engine/trace/breakdown.h"
#include "engine/trace/device_timeline.h"

namespace dpb {

class DeviceActivity {
 public:
  virtual ~DeviceActivity() = default;
  virtual trace::TimelineSource source() const = 0;
  // Stops recording: waits for the devices' queued work, flushes what is still buffered
  // and reads the clocks. Call once, after the measured steps.
  virtual void stop() = 0;
  // The device work (and, from CUPTI, the host calls) that meets `window` (host
  // steady-clock ns). After stop().
  virtual trace::RankTimeline timeline(trace::Span64 window) const = 0;
  // Records lost: past the collector's bound, or dropped by CUPTI itself.
  virtual uint64_t dropped() const = 0;
  // How far a converted time may be from the host clock's (ns).
  virtual int64_t clock_residual_ns() const = 0;
};

// Subscribes to CUPTI for the work of `devices` (logical CUDA devices) from now on.
// nullptr, with the reason in *why, when CUPTI cannot subscribe (another profiler holds
// it, insufficient permissions, built without CUDA); never throws for that.
std::unique_ptr<DeviceActivity> start_cupti_activity(const std::vector<Device>& devices, std::string* why);

// Times every span begun from now on with CUDA events on `devices`. Throws dpb::Error
// when built without CUDA.
std::unique_ptr<DeviceActivity> start_event_activity(const std::vector<Device>& devices);

}  // namespace dpb
