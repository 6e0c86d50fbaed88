#pragma once
// Profiler traces grouped into jobs before any analysis: the files that are ranks of one
// run are analysed together, every other file alone. Given a folder of traces, a user
// may hand over ranks of one job, the same process recorded several times
// (tensorboard_trace_handler with a repeating schedule), or unrelated runs; taking
// separate runs for ranks invents stragglers, and merging two recordings of one process
// invents idle time.
//
// Automatic grouping (the default), over the files in order of their first event:
//   files that say their rank (distributedInfo) are ranks of one job when they say the
//     same world size, name different ranks, and were recorded at the same time (their
//     spans overlap); the same rank recorded again is another recording;
//   files that do not say it are ranks of one job when they come from different
//     processes (pid, or host and pid from tensorboard_trace_handler's file names) and
//     were recorded at the same time; ranks then follow the files' order;
//   any other file is a run of its own: a single-process job, or another recording of a
//     process, or a rank whose peers were not recorded at the same time.
// Forced grouping: every file a rank of one job (ranks as the files say, else in file
// order; two files naming one rank is an error), or every file a run of its own.
#include <string>
#include <string_view>
#include <vector>

#include "diagnostics/dpdoctor/kineto_reader.h"

namespace dpb::doctor {

enum class Grouping { automatic, one_job, separate };
// "auto", "job", "runs"; throws dpb::Error naming the valid choices.
Grouping parse_grouping(std::string_view name);

struct TraceJob {
  // Ranks of a job, in rank order (each timeline's rank set), or the one file of a run.
  std::vector<KinetoTrace> traces;
  bool ranks = false;        // the files are ranks of one job (else one process alone)
  std::string reason;        // why the files were put together, or this one apart
  std::vector<std::string> notes;  // what the grouping leaves uncertain (ranks missing, ...)
};

std::vector<TraceJob> group_traces(std::vector<KinetoTrace> traces, Grouping grouping);

}  // namespace dpb::doctor
