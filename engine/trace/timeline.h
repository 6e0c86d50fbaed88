#pragma once
// The timeline: what each device did and when, as intervals recorded by the training loop
// and the parallel modes (a step's phases, each DataParallel replica's forward and
// backward, each pipeline stage's forwards, backwards and copies, each DDP bucket's
// all-reduce). It is always on and coarse (a handful of intervals per device and step),
// so the busy fractions in every report come from it; --trace writes it as Chrome/
// Perfetto JSON.
//
// An interval belongs to a device (`device`: the index of cpu:k or cuda:k in this
// process; under DDP each process is one rank) and a lane on it (`lane`: "main", "replica",
// "stage 1", "comm", "copy"), and has a category:
//   compute  forward, backward, loss
//   comm     collectives and DataParallel's gradient reduction
//   copy     copies between devices and host-to-device batches
//   data     waiting for the input pipeline
//   optim    the optimizer step
// A device is busy where any of its non-data intervals is.
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/clock.h"
#include "engine/trace/intervals.h"

namespace dpb::trace {

enum class Category { compute, comm, copy, data, optim };
const char* category_name(Category c);

struct Interval {
  std::string name;
  Category cat = Category::compute;
  int device = 0;
  std::string lane = "main";
  int64_t begin_ns = 0, end_ns = 0;
  std::vector<std::pair<std::string, int64_t>> args;  // e.g. bytes, bucket, micro_batch
};

class Timeline {
 public:
  static constexpr size_t kCapacity = size_t{1} << 20;  // intervals kept
  void record(Interval i);
  std::vector<Interval> intervals() const;
  void clear();
  // Length of the union of the device's non-data intervals clipped to [lo, hi).
  int64_t busy_ns(int device, int64_t lo, int64_t hi) const;

 private:
  mutable std::mutex mu_;
  std::vector<Interval> intervals_;
};

// The process's timeline.
Timeline& timeline();

// What also times spans on a device's own clock (--device-timing=events: CUDA timing
// events recorded on the span's stream where it begins and ends). Called on the thread
// that runs the span; it must not wait for the device.
class SpanTimer {
 public:
  virtual ~SpanTimer() = default;
  // A token for end(), or -1 when the span is not timed (data waits, a stream being
  // captured into a CUDA graph, the timer's bound reached).
  virtual int64_t begin(const Interval& i) = 0;
  virtual void end(int64_t token) = 0;
};
// Installs `t` for every span begun from now on (nullptr: none). The caller keeps it
// alive until the spans it timed have ended.
void set_span_timer(SpanTimer* t);

// Records [construction, destruction) on the timeline.
class Span {
 public:
  Span(std::string name, Category cat, int device, std::string lane = "main");
  ~Span();
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  void arg(std::string key, int64_t value) { i_.args.emplace_back(std::move(key), value); }

 private:
  Interval i_;
  SpanTimer* timer_ = nullptr;
  int64_t token_ = -1;
};

}  // namespace dpb::trace
