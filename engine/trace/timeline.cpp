#include "engine/trace/timeline.h"

#include <algorithm>
#include <atomic>

namespace dpb::trace {

const char* category_name(Category c) {
  switch (c) {
    case Category::compute:
      return "compute";
    case Category::comm:
      return "comm";
    case Category::copy:
      return "copy";
    case Category::data:
      return "data";
    case Category::optim:
      return "optim";
  }
  return "compute";
}

void Timeline::record(Interval i) {
  if (i.end_ns < i.begin_ns) i.end_ns = i.begin_ns;
  std::lock_guard<std::mutex> lock(mu_);
  // Bounded: a long-lived process (a benchmark loop of millions of steps) keeps the
  // newest half once the cap is reached; a dpbench run clears it at its start.
  if (intervals_.size() >= kCapacity) intervals_.erase(intervals_.begin(), intervals_.begin() + kCapacity / 2);
  intervals_.push_back(std::move(i));
}

std::vector<Interval> Timeline::intervals() const {
  std::lock_guard<std::mutex> lock(mu_);
  return intervals_;
}

void Timeline::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  intervals_.clear();
}

int64_t Timeline::busy_ns(int device, int64_t lo, int64_t hi) const {
  std::vector<std::pair<int64_t, int64_t>> iv;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& i : intervals_)
      if (i.device == device && i.cat != Category::data) iv.emplace_back(i.begin_ns, i.end_ns);
  }
  return union_ns(std::move(iv), lo, hi);
}

Timeline& timeline() {
  static Timeline* t = new Timeline;  // never destroyed: threads may record during exit
  return *t;
}

namespace {
std::atomic<SpanTimer*> g_span_timer{nullptr};
}  // namespace

void set_span_timer(SpanTimer* t) { g_span_timer.store(t, std::memory_order_release); }

Span::Span(std::string name, Category cat, int device, std::string lane) {
  i_.name = std::move(name);
  i_.cat = cat;
  i_.device = device;
  i_.lane = std::move(lane);
  timer_ = g_span_timer.load(std::memory_order_acquire);
  if (timer_) token_ = timer_->begin(i_);
  i_.begin_ns = now_ns();
}

Span::~Span() {
  i_.end_ns = now_ns();
  if (timer_ && token_ >= 0) timer_->end(token_);
  timeline().record(std::move(i_));
}

}  // namespace dpb::trace
