#pragma once
// What a run's timeline becomes outside the process: the Chrome/Perfetto trace
// (--trace; under DDP every rank's timeline gathered into one file by rank 0) and the
// excerpt of the last measured step that the report and the HTML page show.
#include <string>
#include <vector>

#include "benchmarks/dpbench/options.h"
#include "benchmarks/dpbench/setup.h"
#include "engine/trace/timeline.h"
#include "engine/train/trainer.h"
#include "reports/model.h"

namespace dpb::bench {

// The last measured step on the timeline (from its wait for data to its end), every
// device's or rank's intervals in seconds from the window's start. Under DDP every rank
// sends its own (a collective: every rank calls this). `device`: this process's device
// timeline as intervals (device_timing.h; empty when the host spans are the device's).
reports::TimelineExcerpt timeline_excerpt(const StepRecord& step, trace::TimelineSource source, const RankContext* rank,
                                          const std::vector<trace::Interval>& device = {});

// --trace: one process per device; under DDP every rank sends its intervals and steps to
// rank 0, which writes one file with a process per rank (steady-clock times agree
// between processes on one node). A collective under DDP.
void write_trace(const BenchOptions& o, const TrainResult& result, const std::vector<std::string>& device_ids,
                 const RankContext* rank, const std::vector<trace::Interval>& device = {});

}  // namespace dpb::bench
