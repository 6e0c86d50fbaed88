#include "engine/parallel/modes.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/core/error.h"
#include "engine/core/text.h"
#include "engine/parallel/strategy.h"

namespace dpb {

const std::vector<ModeInfo>& parallel_modes() {
  //                 mode                    name      help
  //                 distributed, splits_batch, multi_device_process, all_reduces_gradients,
  //                 shards_state, splits_layers, pipelines, options only it takes,
  //                 the factory of its strategy
  static const std::vector<ModeInfo> modes{
      {ParallelMode::single, "single", "one device",  //
       false, false, false, false, false, false, false, {}, strategies::single},
      {ParallelMode::dp, "dp", "one process, --gpus devices, as torch.nn.DataParallel",  //
       false, false, true, false, false, false, false, {"--dp-forward", "--dp-input"}, strategies::dp},
      {ParallelMode::ddp, "ddp",
       "one process per rank, as DistributedDataParallel; --gpus ranks on this node",  //
       true, true, false, true, false, false, false, {"--bucket-mb"}, strategies::ddp},
      {ParallelMode::pipeline, "mp", "one process, the model cut into --gpus pipeline stages",  //
       false, false, true, false, false, false, true, {"--split", "--schedule", "--micro-batches"}, strategies::pipeline},
      {ParallelMode::fsdp, "fsdp",
       "one process per rank, parameters, gradients and optimizer state sharded across the ranks, as FSDP2's "
       "fully_shard",  //
       true, true, false, false, true, false, false, {"--fsdp-reshard", "--fsdp-prefetch"}, strategies::fsdp},
      {ParallelMode::tp, "tp",
       "one process per rank, each holding a part of every large layer and training on the whole batch, as "
       "Megatron-LM's tensor parallelism; within one node",  //
       true, false, false, false, false, true, false, {}, strategies::tp},
  };
  return modes;
}

const ModeInfo& mode_info(ParallelMode m) {
  for (const ModeInfo& i : parallel_modes())
    if (i.mode == m) return i;
  DPB_FAIL() << "parallel mode " << static_cast<int>(m) << " is not in the registry";
}

const std::vector<std::pair<std::string_view, ParallelMode>>& parallel_mode_choices() {
  static const std::vector<std::pair<std::string_view, ParallelMode>> choices = [] {
    std::vector<std::pair<std::string_view, ParallelMode>> c;
    for (const ModeInfo& i : parallel_modes()) c.emplace_back(i.name, i.mode);
    return c;
  }();
  return choices;
}

std::vector<std::string> parallel_mode_names() {
  std::vector<std::string> names;
  for (const ModeInfo& i : parallel_modes()) names.emplace_back(i.name);
  return names;
}

const char* parallel_mode_name(ParallelMode m) { return mode_info(m).name; }

ParallelMode parse_parallel_mode(std::string_view name) {
  for (const ModeInfo& i : parallel_modes())
    if (name == i.name) return i.mode;
  DPB_FAIL() << "mode '" << escape_untrusted(name) << "' is not available (valid: "
             << fmt::format("{}", fmt::join(parallel_mode_names(), ", ")) << ")";
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
