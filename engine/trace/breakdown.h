#pragma once
// What a device timeline says about one device (or rank) over a window, with Holistic
// Trace Analysis' definitions, so figures agree with it:
//   compute_share, comm_share, memory_share, idle_share: the temporal breakdown. Each
//     instant of the window counts once: compute where a compute kernel runs, else
//     communication where a communication kernel runs, else memory where a copy or set
//     runs, else idle (HTA's order: its non-compute time is what compute leaves). They
//     add up to 1.
//   overlap: |comm ∩ compute| / |comm| (null without communication).
//   idle_breakdown: the idle time split by what it waited for (shares of idle):
//     host_wait  the device waited for the host to launch work (the next kernel was
//                launched after the previous one ended);
//     kernel_wait the next kernel was already launched but did not start (short gaps
//                between queued kernels);
//     other      idle the launch records cannot attribute (none recorded).
// Every figure is std::nullopt where its evidence is missing, never 0.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dpb::trace {

// Where a timeline's device times come from (docs/ARCHITECTURE.md §4a).
//   host         the host's clock around the work: the device time on logical CPU
//                devices, launch time on GPUs;
//   cuda-events  CUDA timing events around each span on its stream;
//   cupti        CUPTI activity records of every kernel, copy and set.
enum class TimelineSource { host, cuda_events, cupti };
const char* timeline_source_name(TimelineSource s);
// Throws dpb::Error naming the valid sources.
TimelineSource parse_timeline_source(std::string_view name);

struct IdleBreakdown {
  std::optional<double> host_wait, kernel_wait, other;
};

struct Breakdown {
  std::optional<int> rank;  // ddp (and PyTorch traces): the rank; else the device's index
  std::string host, device;
  double window_s = 0;
  std::optional<double> idle_share, compute_share, comm_share, memory_share, overlap;
  IdleBreakdown idle_breakdown;
};

}  // namespace dpb::trace
