#pragma once
// Chrome trace event format (what ui.perfetto.dev and chrome://tracing open) from the
// timeline: one process per device (one process per rank under DDP), one thread per lane
// ("main", "replica", "comm", "stage 1", ...), complete events ("ph": "X") with the
// category (compute, comm, copy, data, optim) and their arguments (bytes, bucket,
// micro-batch), plus each optimizer step as an event of category "step" on its own lane.
// An interval with an argument "launch" starts a flow to the intervals of the same
// process whose argument "correlation" has its value (a CUDA launch call to its kernel).
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "engine/trace/timeline.h"

namespace dpb::trace {

struct TraceStep {
  int64_t step = 0;
  bool warmup = false;
  int64_t begin_ns = 0, end_ns = 0;
};

struct TraceProcess {
  int pid = 0;
  std::string name;                        // "cpu:0", "rank 1 (cuda:1)"
  std::vector<Interval> intervals;  // this process's (device's or rank's) intervals
  std::vector<TraceStep> steps;            // drawn on this process's "steps" lane (may be empty)
};

// The trace, with times in microseconds from `origin_ns`.
nlohmann::json chrome_trace(const std::vector<TraceProcess>& processes, int64_t origin_ns,
                            const nlohmann::json& metadata);

// Intervals to and from JSON (to gather them from other ranks).
nlohmann::json intervals_json(const std::vector<Interval>& intervals);
std::vector<Interval> intervals_from_json(const nlohmann::json& j);

}  // namespace dpb::trace
