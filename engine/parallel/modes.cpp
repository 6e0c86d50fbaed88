#include "engine/parallel/modes.h"

#include "engine/core/error.h"
#include "engine/core/text.h"

namespace dpb {

const char* parallel_mode_name(ParallelMode m) {
  switch (m) {
    case ParallelMode::single:
      return "single";
    case ParallelMode::dp:
      return "dp";
    case ParallelMode::ddp:
      return "ddp";
    case ParallelMode::pipeline:
      return "mp";
    case ParallelMode::fsdp:
      return "fsdp";
    case ParallelMode::tp:
      return "tp";
  }
  return "?";
}

ParallelMode parse_parallel_mode(std::string_view name) {
  if (name == "single") return ParallelMode::single;
  if (name == "dp") return ParallelMode::dp;
  if (name == "ddp") return ParallelMode::ddp;
  if (name == "mp") return ParallelMode::pipeline;
  if (name == "fsdp") return ParallelMode::fsdp;
  if (name == "tp") return ParallelMode::tp;
  DPB_FAIL() << "mode '" << escape_untrusted(name) << "' is not available (valid: single, dp, ddp, mp, fsdp, tp)";
}

PipelineSchedule parse_pipeline_schedule(std::string_view name) {
  if (name == "naive") return PipelineSchedule::naive;
  if (name == "gpipe") return PipelineSchedule::gpipe;
  if (name == "1f1b") return PipelineSchedule::one_f_one_b;
  DPB_FAIL() << "unknown pipeline schedule '" << escape_untrusted(name) << "' (valid: naive, gpipe, 1f1b)";
}

std::string pipeline_schedule_name(PipelineSchedule s) {
  switch (s) {
    case PipelineSchedule::naive:
      return "naive";
    case PipelineSchedule::gpipe:
      return "gpipe";
    case PipelineSchedule::one_f_one_b:
      return "1f1b";
  }
  return "?";
}

}  // namespace dpb
