#pragma once
// The training loop: batches from a DataLoader, forward, loss, backward, optimizer
// step, with per-step records (loss, timestamps, the loader wait) that the harness
// turns into metrics; epochs or a step count; evaluation on the test split; the LR
// schedule (with the linear-scaling rule); progress; checkpoints and exact resume.
// One loop and one step body for every parallel mode: the mode's ParallelStrategy
// (strategy.h), chosen by TrainOptions::mode, runs each batch's forward, loss and
// backward over its devices.
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "engine/data/loader.h"
#include "engine/data/sampler.h"
#include "engine/models/model.h"
#include "engine/optim/lr_schedule.h"
#include "engine/optim/optimizer.h"
#include "engine/train/checkpoint.h"
#include "engine/train/evaluate.h"
#include "engine/train/progress.h"
#include "engine/parallel/step_record.h"
#include "engine/parallel/strategy.h"
#include "engine/train/train_options.h"

namespace dpb {

struct EpochRecord {
  int64_t epoch = 0;
  double train_loss = 0;
  std::optional<EvalResult> test;
  double seconds = 0;
};

// An evaluation every TrainOptions::eval_every steps: after optimizer step `step` (1-based).
struct StepEval {
  int64_t step = 0;
  EvalResult test;
};

struct TrainResult {
  std::vector<StepRecord> steps;
  std::vector<EpochRecord> epochs;
  std::vector<StepEval> evals;
  std::optional<EvalResult> test;  // the last evaluation
  TrainPosition end;
  float lr = 0;                    // the base learning rate after scaling
  double wall_seconds = 0;
  std::vector<StepRecord> measured() const;  // warm-up excluded
};

class Trainer {
 public:
  Trainer(Model& model, const Dataset& train, TrainOptions options, const Dataset* test = nullptr,
          const Transform* augment = nullptr);
  ~Trainer();

  TrainResult run(const std::function<void(const StepRecord&)>& on_step = {});
  // One optimizer step over one batch, or several (gradient accumulation), already on
  // the model's first device.
  StepRecord step(const std::vector<Batch>& batches, int64_t global_step);
  Optimizer& optimizer() { return *optimizer_; }
  DataLoader& loader() { return *loader_; }
  // Optimizer steps this run will take.
  int64_t planned_steps() const { return planned_; }
  float base_lr() const { return schedule_->options().base_lr; }
  // The batch of one optimizer step across every rank (what --lr-scale=linear scales by).
  int64_t global_batch() const { return global_batch_; }
  ParallelStrategy& strategy() { return *strategy_; }
  // The devices the model runs on (one, or the DataParallel or pipeline devices).
  std::vector<Device> devices() const { return strategy_->devices(); }
  const DataParallel* data_parallel() const { return strategy_->data_parallel(); }
  DistributedDataParallel* ddp() { return strategy_->ddp(); }
  PipelineParallel* pipeline() { return strategy_->pipeline(); }
  // DDP's A/B for exposed communication: `steps` forward + loss + backward passes of the
  // last batch under no_sync (no all-reduce; DDP's forward still broadcasts buffers), the
  // gradients then dropped and the optimizer not stepped, so the model is unchanged.
  // Returns each pass's seconds. Every rank must call it with the same count.
  std::vector<double> time_without_communication(int steps);
  // mp with an automatic split: each unit's measured forward + backward seconds.
  const std::vector<double>& unit_costs() const { return unit_costs_; }

 private:
  // Whether each rank reads its own shard of the data (ddp and fsdp with the
  // distributed sampler; tensor-parallel ranks all read the same batches).
  bool shards_data() const { return o_.ddp.group && o_.ddp.distributed_sampler && splits_batch(o_.mode); }
  // Evaluation's loss: tensor parallelism's vocabulary-parallel one, else the model's.
  EvalLoss eval_loss();

  Model& model_;
  const Dataset& train_;
  const Dataset* test_;
  TrainOptions o_;
  DistributedSampler sampler_;
  std::vector<double> unit_costs_;
  std::unique_ptr<ParallelStrategy> strategy_;
  std::unique_ptr<DataLoader> loader_;
  std::optional<Batch> last_batch_;  // DDP: for time_without_communication
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<LrSchedule> schedule_;
  TrainPosition start_;
  int64_t planned_ = 0;
  int64_t global_batch_ = 0;
};

}  // namespace dpb
