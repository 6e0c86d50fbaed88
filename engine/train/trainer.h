#pragma once
// The training loop: forward, loss, backward, optimizer step, with per-step records
// (loss, timestamps, samples) that the harness turns into metrics. This slice runs
// one model on one device; every parallel mode reuses the same loop.
#include <functional>
#include <memory>
#include <vector>

#include "engine/data/dataset.h"
#include "engine/models/model.h"
#include "engine/optim/lr_schedule.h"
#include "engine/optim/optimizer.h"

namespace dpb {

struct TrainOptions {
  int64_t batch = 32;
  int64_t steps = 20;   // measured optimizer steps
  int64_t warmup = 3;   // steps run first and excluded from measurements
  uint64_t seed = 0;    // data order
  OptimizerOptions optim;
  std::string schedule = "constant";
  int64_t lr_warmup_steps = 0;
  Device device = Device::cpu();
};

struct StepRecord {
  int64_t step = 0;       // 0-based, warm-up included
  bool warmup = false;
  double loss = 0;
  int64_t correct = 0;
  int64_t samples = 0;
  float lr = 0;
  int64_t data_ns = 0;    // time to produce the batch (before the step)
  int64_t begin_ns = 0;   // step start (forward)
  int64_t end_ns = 0;     // step end (after the optimizer)
  double seconds() const { return static_cast<double>(end_ns - begin_ns) * 1e-9; }
};

struct TrainResult {
  std::vector<StepRecord> steps;
  std::vector<StepRecord> measured() const;  // warm-up excluded
};

class Trainer {
 public:
  Trainer(Model& model, const Dataset& data, TrainOptions options);

  TrainResult run(const std::function<void(const StepRecord&)>& on_step = {});
  // One optimizer step on a batch already on the model's device.
  StepRecord step(const Batch& batch, int64_t index);
  Optimizer& optimizer() { return *optimizer_; }

 private:
  Batch next_batch();

  Model& model_;
  const Dataset& data_;
  TrainOptions o_;
  std::unique_ptr<Optimizer> optimizer_;
  LrSchedule schedule_;
  std::vector<int64_t> order_;
  int64_t cursor_ = 0;
  int64_t epoch_ = 0;
};

}  // namespace dpb
