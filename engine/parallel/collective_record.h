#pragma once
// One collective a rank's layers issued in the last step, for the timeline and the
// report (steady-clock ns; started/finished 0 where the backend cannot tell). Fully
// sharded data parallelism's all-gathers and reduce-scatters, tensor parallelism's
// all-reduces.
#include <cstdint>
#include <string>

namespace dpb {

struct CollectiveRecord {
  std::string kind;  // "all-gather", "reduce-scatter" or "all-reduce"
  std::string unit;  // the layer it served
  int64_t bytes = 0;  // what this rank sends
  int64_t issued_ns = 0, started_ns = 0, finished_ns = 0;
  int64_t wait_begin_ns = 0, wait_end_ns = 0;  // the training thread waiting for it
};

}  // namespace dpb
