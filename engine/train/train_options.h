#pragma once
// What a training run is asked to do (Trainer's options), with the parallel mode chosen
// explicitly and each mode's own options.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/optim/lr_schedule.h"
#include "engine/optim/optimizer.h"
#include "engine/parallel/strategy_options.h"
#include "engine/train/progress.h"

namespace dpb {

// The trainer's options: the strategy's (the batch, the mode and its options, the
// devices) and the loop's own.
struct TrainOptions : StrategyOptions {
  int64_t steps = 20;   // optimizer steps after warm-up (when epochs == 0)
  int64_t epochs = 0;   // > 0: train whole epochs instead of a step count
  int64_t warmup = 3;   // steps run first and excluded from timing (not from training)
  OptimizerOptions optim;
  LrScheduleKind schedule = LrScheduleKind::constant;
  int64_t lr_warmup_steps = 0;
  // linear: lr x global batch / base_batch, with a linear warm-up of lr_warmup_steps
  // (10% of the run when 0). The global batch is what one optimizer step sees across
  // every rank: batch x accum_steps (x ranks under ddp).
  LrScaling lr_scale = LrScaling::none;
  int64_t base_batch = 256;

  // > 0: clip the gradients to this global L2 norm before each optimizer step
  // (torch.nn.utils.clip_grad_norm_; under DDP the norm of the reduced gradient).
  double clip_grad_norm = 0;
  int workers = 0;
  int prefetch = 2;
  int64_t loader_delay_ms = 0;
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
