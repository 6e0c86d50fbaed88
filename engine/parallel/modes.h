#pragma once
// The names of the ways a model is trained over devices, shared by the trainer, the
// harness and the report model: the parallel mode and the pipeline schedule.
#include <string>
#include <string_view>

namespace dpb {

// single: one device; dp: one process over several devices (torch.nn.DataParallel);
// ddp: one process per rank (DistributedDataParallel); pipeline: the model cut into
// stages over several devices ("mp" on the command line and in reports); fsdp: one
// process per rank with parameters, gradients and optimizer state sharded
// (FullyShardedDataParallel); tp: one process per rank, each holding a part of every
// large layer and seeing the whole batch (Megatron-style tensor parallelism).
enum class ParallelMode { single, dp, ddp, pipeline, fsdp, tp };
// Modes that run one process per rank in a process group (ddp, fsdp, tp).
inline bool is_distributed(ParallelMode m) {
  return m == ParallelMode::ddp || m == ParallelMode::fsdp || m == ParallelMode::tp;
}
// Modes whose ranks each train on their own part of the global batch (ddp, fsdp).
inline bool splits_batch(ParallelMode m) { return m == ParallelMode::ddp || m == ParallelMode::fsdp; }
// "single", "dp", "ddp", "mp", "fsdp", "tp".
const char* parallel_mode_name(ParallelMode m);
// Throws dpb::Error naming the valid modes.
ParallelMode parse_parallel_mode(std::string_view name);

enum class PipelineSchedule { naive, gpipe, one_f_one_b };
// "naive", "gpipe", "1f1b"; anything else is a dpb::Error listing them.
PipelineSchedule parse_pipeline_schedule(std::string_view name);
std::string pipeline_schedule_name(PipelineSchedule s);

}  // namespace dpb
