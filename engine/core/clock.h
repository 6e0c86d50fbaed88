#pragma once
// Monotonic time for measurements: nanoseconds since an arbitrary process-wide epoch.
#include <chrono>
#include <cstdint>

namespace dpb {

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline double ns_to_s(int64_t ns) { return static_cast<double>(ns) * 1e-9; }

class Stopwatch {
 public:
  Stopwatch() : start_(now_ns()) {}
  void reset() { start_ = now_ns(); }
  int64_t elapsed_ns() const { return now_ns() - start_; }
  double elapsed_s() const { return ns_to_s(elapsed_ns()); }

 private:
  int64_t start_;
};

}  // namespace dpb
