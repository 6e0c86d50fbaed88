#pragma once
// What a training run is asked to do (Trainer's options), with the parallel mode chosen
// explicitly and each mode's own options.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/comm/process_group.h"
#include "engine/optim/lr_schedule.h"
#include "engine/optim/optimizer.h"
#include "engine/parallel/distributed_data_parallel.h"
#include "engine/parallel/fully_sharded.h"
#include "engine/parallel/modes.h"
#include "engine/tensor/device.h"
#include "engine/train/progress.h"

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

struct TrainOptions {
  int64_t batch = 32;   // per rank under ddp; the whole batch handed to the model otherwise
  int64_t steps = 20;   // optimizer steps after warm-up (when epochs == 0)
  int64_t epochs = 0;   // > 0: train whole epochs instead of a step count
  int64_t warmup = 3;   // steps run first and excluded from timing (not from training)
  uint64_t seed = 0;    // data order and augmentation
  OptimizerOptions optim;
  LrScheduleKind schedule = LrScheduleKind::constant;
  int64_t lr_warmup_steps = 0;
  // linear: lr x global batch / base_batch, with a linear warm-up of lr_warmup_steps
  // (10% of the run when 0). The global batch is what one optimizer step sees across
  // every rank: batch x accum_steps (x ranks under ddp).
  LrScaling lr_scale = LrScaling::none;
  int64_t base_batch = 256;

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
  // > 0: clip the gradients to this global L2 norm before each optimizer step
  // (torch.nn.utils.clip_grad_norm_; under DDP the norm of the reduced gradient).
  double clip_grad_norm = 0;
  int workers = 0;
  int prefetch = 2;
  int64_t loader_delay_ms = 0;
  TrainHooks hooks;
  int64_t eval_batch = 500;
  bool eval_each_epoch = true;
  // > 0: also evaluate the test split every this many optimizer steps (a language
  // model's validation loss during training).
  int64_t eval_every = 0;
  std::string save_path;    // checkpoint written at the end
  // fsdp: save_path is a sharded checkpoint (a directory, each rank writing its own
  // shards: save_sharded_checkpoint), not one full file.
  bool save_sharded = false;
  // fsdp / tp: the model holds its full parameters after run() (as single-device training
  // would: for a caller that reads them). Off, the model stays sharded unless a checkpoint
  // is saved, and run()'s memory is training's only (dpbench's reports).
  bool full_model_after_run = true;
  std::string resume_path;  // checkpoint to continue from
  ProgressMode progress = ProgressMode::none;
};

}  // namespace dpb
