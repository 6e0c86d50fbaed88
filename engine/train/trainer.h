#pragma once
// The training loop: batches from a DataLoader, forward, loss, backward, optimizer
// step, with per-step records (loss, timestamps, the loader wait) that the harness
// turns into metrics; epochs or a step count; evaluation on the test split; the LR
// schedule (with the linear-scaling rule); progress; checkpoints and exact resume.
// This slice runs one model on one device; every parallel mode reuses the same loop.
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "engine/backend/device_graph.h"
#include "engine/data/loader.h"
#include "engine/models/model.h"
#include "engine/optim/lr_schedule.h"
#include "engine/optim/optimizer.h"
#include "engine/parallel/data_parallel.h"
#include "engine/parallel/distributed_data_parallel.h"
#include "engine/parallel/pipeline.h"
#include "engine/train/checkpoint.h"
#include "engine/train/evaluate.h"
#include "engine/train/progress.h"

namespace dpb {

struct TrainOptions {
  int64_t batch = 32;
  int64_t steps = 20;   // optimizer steps after warm-up (when epochs == 0)
  int64_t epochs = 0;   // > 0: train whole epochs instead of a step count
  int64_t warmup = 3;   // steps run first and excluded from timing (not from training)
  uint64_t seed = 0;    // data order and augmentation
  OptimizerOptions optim;
  std::string schedule = "constant";
  int64_t lr_warmup_steps = 0;
  // "linear": lr x global batch / base_batch (Goyal et al.), with a linear warm-up of
  // lr_warmup_steps (10% of the run when 0).
  std::string lr_scale = "none";
  int64_t base_batch = 256;
  int64_t global_batch = 0;  // batch across all ranks (defaults to batch)
  Device device = Device::cpu();
  // More than one device: DataParallel over them (devices[0] is the primary, `device`
  // is ignored). dp_bypass calls the wrapped module directly, the classic mistake
  // that leaves every device but the primary idle.
  std::vector<Device> dp_devices;
  bool dp_bypass = false;
  bool dp_replicate_input = false;  // the batch as a list of samples: replicated, not scattered
  // More than one device: the model cut into stages over them (model/pipeline
  // parallelism; devices[0] takes the input, `device` is ignored). mp_split: the first
  // unit of each later stage, as indices or names (empty: balanced by measured time).
  std::vector<Device> mp_devices;
  std::string mp_split;
  PipelineSchedule mp_schedule = PipelineSchedule::gpipe;
  int micro_batches = 1;
  // CUDA: after two eager steps, capture forward, loss and backward as a CUDA graph and
  // replay it for every full batch (the optimizer step stays outside the graph, so
  // learning-rate schedules and Adam work). Needs a cross-entropy model in single mode.
  bool cuda_graph = false;
  // DDP: this rank's process group (one process per rank). The model is wrapped in
  // DistributedDataParallel, each rank reads its DistributedSampler shard (or, with
  // distributed_sampler off, the whole dataset like every other rank: the mistake).
  comm::ProcessGroup* group = nullptr;
  DdpOptions ddp;
  bool distributed_sampler = true;
  bool sync_bn = false;  // DDP: BatchNorm statistics over the global batch (SyncBatchNorm)
  // Batches per optimizer step (gradient accumulation; under DDP the first ones run with
  // no_sync). The loss gradient is divided by it, so k batches of B train as one of kB.
  int accum_steps = 1;
  int workers = 0;
  int prefetch = 2;
  int64_t loader_delay_ms = 0;
  // Fault injection for diagnostics: this process computes this much slower each step
  // (a sleep inside its forward), as a rank on a throttled or shared device would.
  int64_t straggle_ms = 0;
  int64_t eval_batch = 500;
  bool eval_each_epoch = true;
  std::string save_path;    // checkpoint written at the end
  std::string resume_path;  // checkpoint to continue from
  ProgressMode progress = ProgressMode::none;
};

struct StepRecord {
  int64_t step = 0;       // global optimizer step (0-based)
  int64_t epoch = 0;
  uint64_t data_hash = 0;  // of the sorted dataset indices of the step's batches (which data it saw)
  bool warmup = false;
  double loss = 0;
  int64_t correct = 0;
  int64_t samples = 0;
  float lr = 0;
  int64_t data_ns = 0;    // how long the loop waited for this batch
  int64_t begin_ns = 0;   // step start (forward)
  int64_t end_ns = 0;     // step end (after the optimizer)
  std::vector<int64_t> device_busy_ns;  // per device: time it computed in this step
  std::vector<int64_t> device_samples;  // per device: samples it ran forward
  // DDP: the last backward's interval and what each gradient bucket did (steady-clock ns).
  int64_t backward_begin_ns = 0, backward_end_ns = 0;
  std::vector<BucketRecord> buckets;
  // Model parallelism: what every stage did (bubble measured and in theory).
  PipelineStepRecord pipeline;
  double seconds() const { return static_cast<double>(end_ns - begin_ns) * 1e-9; }
};

struct EpochRecord {
  int64_t epoch = 0;
  double train_loss = 0;
  std::optional<EvalResult> test;
  double seconds = 0;
};

struct TrainResult {
  std::vector<StepRecord> steps;
  std::vector<EpochRecord> epochs;
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
  // One optimizer step on a batch already on the model's device.
  StepRecord step(const Batch& batch, int64_t global_step);
  // One optimizer step over several batches (gradient accumulation).
  StepRecord step(const std::vector<Batch>& batches, int64_t global_step);
  Optimizer& optimizer() { return *optimizer_; }
  DataLoader& loader() { return *loader_; }
  // Optimizer steps this run will take.
  int64_t planned_steps() const { return planned_; }
  float base_lr() const { return schedule_->options().base_lr; }
  // The devices the model runs on (one, or the DataParallel devices).
  std::vector<Device> devices() const;
  const DataParallel* data_parallel() const { return dp_.get(); }
  DistributedDataParallel* ddp() { return ddp_.get(); }
  PipelineParallel* pipeline() { return pp_.get(); }
  // DDP's A/B for exposed communication: `steps` forward + loss + backward passes of the
  // last batch under no_sync (no all-reduce; DDP's forward still broadcasts buffers), the
  // gradients then dropped and the optimizer not stepped, so the model is unchanged.
  // Returns each pass's seconds. Every rank must call it with the same count.
  std::vector<double> time_without_communication(int steps);
  // mp with an automatic split: each unit's measured forward + backward seconds.
  const std::vector<double>& unit_costs() const { return unit_costs_; }

 private:
  Model& model_;
  const Dataset& train_;
  const Dataset* test_;
  TrainOptions o_;
  DistributedSampler sampler_;
  std::unique_ptr<DataLoader> loader_;
  std::unique_ptr<DataParallel> dp_;
  std::unique_ptr<DistributedDataParallel> ddp_;
  std::unique_ptr<PipelineParallel> pp_;
  std::optional<Batch> last_batch_;  // DDP: for time_without_communication
  std::vector<double> unit_costs_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<LrSchedule> schedule_;
  TrainPosition start_;
  int64_t planned_ = 0;

  // CUDA graph of forward + loss + backward (cuda_graph).
  struct GraphStep;
  std::unique_ptr<GraphStep> graph_;
  int64_t eager_steps_ = 0;
  bool graph_step(const Batch& batch, StepRecord& r);
  StepRecord pipeline_step(const Batch& batch, int64_t global_step);
};

}  // namespace dpb
