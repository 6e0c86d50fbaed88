#pragma once
// What a parallel strategy is asked to do: the batch, the mode chosen explicitly with
// each mode's own options, and the devices or the process group it runs on. The
// trainer's options (engine/train/train_options.h) extend these with the loop's own.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/comm/process_group.h"
#include "engine/parallel/distributed_data_parallel.h"
#include "engine/parallel/fully_sharded.h"
#include "engine/parallel/modes.h"
#include "engine/tensor/device.h"

namespace dpb {

// DataParallel (ParallelMode::dp). bypass: call the wrapped module directly, the classic
// mistake that leaves every device but the primary idle; replicate_input: the batch as a
// list of samples, replicated to every device instead of scattered.
struct DpTrainOptions {
  bool bypass = false;
  bool replicate_input = false;
};

// Model/pipeline parallelism (ParallelMode::pipeline). split: the first unit of each
// stage after the first, as indices or names (empty: balanced by measured time).
struct PipelineTrainOptions {
  std::vector<std::string> split;
  PipelineSchedule schedule = PipelineSchedule::gpipe;
  int micro_batches = 1;
};

// DistributedDataParallel (ParallelMode::ddp), and what FullyShardedDataParallel
// (ParallelMode::fsdp) shares with it: this rank's process group (one process per rank). Each rank reads its DistributedSampler shard, or with distributed_sampler
// off the whole dataset like every other rank (the mistake).
struct DdpTrainOptions {
  comm::ProcessGroup* group = nullptr;
  DdpOptions reducer;
  bool distributed_sampler = true;
  bool sync_bn = false;  // BatchNorm statistics over the global batch (SyncBatchNorm)
};

// Called by the harness around the engine's work, for measurements and fault
// injection; run on the training thread.
struct TrainHooks {
  // Inside each batch's forward (within its timeline span), before the model runs.
  std::function<void(int64_t step)> in_forward;
};

struct StrategyOptions {
  int64_t batch = 32;   // per rank under ddp; the whole batch handed to the model otherwise
  uint64_t seed = 0;    // data order and augmentation

  ParallelMode mode = ParallelMode::single;
  Device device = Device::cpu();  // single and ddp
  std::vector<Device> devices;    // dp and pipeline: [0] is the primary / first stage
  DpTrainOptions dp;
  PipelineTrainOptions pipeline;
  DdpTrainOptions ddp;
  FsdpOptions fsdp;  // with ddp.group, ddp.distributed_sampler
  // ddp over tensor-parallel ranks (2D: data x tensor, Megatron's): the model is cut over
  // this group first, and DDP all-reduces each part's gradients over ddp.group (the ranks
  // holding the same part). Each data-parallel rank's tensor-parallel ranks read the same
  // batches.
  comm::ProcessGroup* tp_group = nullptr;

  // CUDA: after two eager steps, capture forward, loss and backward as a CUDA graph and
  // replay it for every full batch (the optimizer step stays outside the graph, so
  // learning-rate schedules and Adam work). Single mode, cross-entropy models.
  bool cuda_graph = false;
  // Batches per optimizer step (gradient accumulation; under DDP the first ones run with
  // no_sync). The loss gradient is divided by it, so k batches of B train as one of kB.
  int accum_steps = 1;
  TrainHooks hooks;
};

}  // namespace dpb
