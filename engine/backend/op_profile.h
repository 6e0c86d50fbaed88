#pragma once
// Where a step's time goes, op by op (dpbench --op-profile). When enabled, every op
// waits for its device before and after it runs, and its wall time is added to the
// op's total: the device time of the op itself, launch costs included. The waits
// remove the overlap between host and device, so a profiled step is slower than an
// unprofiled one: this is for finding where time goes, not for benchmarking.
#include <cstdint>
#include <string>
#include <vector>

namespace dpb::ops {

struct OpTime {
  std::string op;
  int64_t calls = 0;
  double seconds = 0;
};

void set_op_profiling(bool on);
bool op_profiling();
void reset_op_profile();
// Totals since the last reset, largest first.
std::vector<OpTime> op_profile();
// Adds one call's time (the op dispatch does this).
void record_op_time(const char* op, double seconds);

}  // namespace dpb::ops
