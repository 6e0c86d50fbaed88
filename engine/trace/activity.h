#pragma once
// Device activity records, as the CUPTI Activity API delivers them, in a plain form (no
// CUDA headers: the CUDA backend's collector decodes CUPTI's records into these), and
// what turns them into a RankTimeline (device_timeline.h) on the host's clock, so that
// one analysis (analysis.h) gives every device figure (docs/ARCHITECTURE.md §4a).
//
//   ClockConversion  GPU timestamps -> host steady-clock nanoseconds. The collector reads
//                    the GPU clock (cuptiGetTimestamp) between two host clock reads, at
//                    the start and at the end of the measured window; each pair is the
//                    midpoint of the host reads against the GPU read, its uncertainty half
//                    the host reads' distance. The conversion is the line through the
//                    first and last pairs (an offset and a rate, so a drift between the
//                    clocks is followed); its residual is the largest distance of any pair
//                    from the line plus that pair's uncertainty, and is reported.
//   StreamMap        which (GPU, stream) is which logical device and lane: compute,
//                    communication (NCCL's stream, Gloo's staging copies), copy (the
//                    loader's stream). Work on a communication stream is communication
//                    whatever its kind; on other streams kernels are classified by name
//                    (HTA's rules) and copies and sets are memory.
//   ActivityLog      the records of one process, bounded in bytes (64 MiB by default,
//                    however long the run): past the bound a record is dropped and
//                    counted, never silently; records CUPTI itself dropped are added to
//                    the count.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/trace/device_timeline.h"

namespace dpb::trace {

// graph: one launch of a CUDA graph, its span (its kernels are kernel records of their own).
enum class ActivityKind : uint8_t { kernel, memcpy, memset, sync, runtime, graph };

struct ActivityRecord {
  ActivityKind kind = ActivityKind::kernel;
  int64_t start = 0, end = 0;  // GPU clock (ns); host calls (runtime) too, as CUPTI gives them
  int device = 0;              // physical GPU
  uint32_t context = 0, stream = 0;
  int64_t correlation = -1;    // links device work to the runtime call that launched it
  uint64_t graph = 0;          // the CUDA graph that launched a kernel (0: none)
  CopyKind copy = CopyKind::none;
  int64_t bytes = -1;
  int8_t pinned = -1;          // host side of a copy: 1 pinned, 0 pageable, -1 unknown
  int64_t thread = 0;          // runtime calls: the host thread
};

struct ClockPair {
  int64_t host_ns = 0;         // midpoint of the two host reads
  int64_t device_ns = 0;       // the GPU read between them
  int64_t uncertainty_ns = 0;  // half the host reads' distance
};

class ClockConversion {
 public:
  ClockConversion() = default;
  // The line through the first and last pairs (one pair: an offset only). Throws
  // dpb::Error without pairs, or with pairs out of order.
  static ClockConversion fit(const std::vector<ClockPair>& pairs);
  int64_t to_host(int64_t device_ns) const;
  int64_t residual_ns() const { return residual_ns_; }
  double rate() const { return rate_; }

 private:
  int64_t device0_ = 0, host0_ = 0;
  double rate_ = 1.0;  // host ns per device ns
  int64_t residual_ns_ = 0;
};

enum class Lane : uint8_t { compute, communication, copy };
const char* lane_name(Lane l);

struct StreamRole {
  int logical_device = 0;
  Lane lane = Lane::compute;
};

class StreamMap {
 public:
  void add(int device, uint32_t stream, StreamRole role) { roles_[{device, stream}] = role; }
  // The role of the streams of `device` that add() does not name (a library's own
  // stream), where one logical device owns that GPU.
  void add_default(int device, StreamRole role) { defaults_[device] = role; }
  // Unregistered streams without a default: null (the physical device, lane by what
  // runs on it).
  const StreamRole* find(int device, uint32_t stream) const;

 private:
  std::map<std::pair<int, uint32_t>, StreamRole> roles_;
  std::map<int, StreamRole> defaults_;
};

class ActivityLog {
 public:
  static constexpr size_t kDefaultBound = size_t{64} << 20;
  explicit ActivityLog(size_t max_bytes = kDefaultBound) : max_bytes_(max_bytes) {}

  // False when the record would pass the bound: it is dropped and counted.
  bool add(const ActivityRecord& r, std::string_view name);
  // Records lost before they reached us (CUPTI's own count).
  void add_dropped(uint64_t n) { dropped_ += n; }
  uint64_t dropped() const { return dropped_; }
  size_t records() const { return records_.size(); }
  size_t bytes() const { return bytes_; }
  void clear();

  // The records whose span meets [window.first, window.second) (host clock), converted,
  // with their launching calls. Graph kernels are one record each, as CUPTI gives them.
  RankTimeline to_timeline(const ClockConversion& clock, const StreamMap& streams, Span64 window) const;

 private:
  size_t max_bytes_;
  size_t bytes_ = 0;
  uint64_t dropped_ = 0;
  NameTable names_;
  std::vector<std::pair<ActivityRecord, uint32_t>> records_;  // with the name's id
};

}  // namespace dpb::trace
