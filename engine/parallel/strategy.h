#pragma once
// How one optimizer step's forward, loss and backward run over the devices: the
// trainer's one step body calls a ParallelStrategy, built by the factory of
// StrategyOptions::mode's entry in the mode registry (modes.cpp):
//   single    one device (and the CUDA-graph replay of forward + loss + backward);
//   dp        torch.nn.DataParallel: scatter, replicas, gather, loss on the primary,
//             gradients summed into the primary's parameters;
//   ddp       DistributedDataParallel: the rank's module, the bucketed all-reduce
//             overlapped with backward, no_sync on all but a step's last batch;
//   pipeline  the model cut into stages over the devices, run by a schedule over
//             micro-batches;
//   fsdp      FullyShardedDataParallel: the rank's module with each layer's parameters
//             gathered when it runs, gradients reduce-scattered, the optimizer on shards;
//   tp        TensorParallel: the rank's part of every large layer, the whole batch,
//             all-reduces between the layers and a vocabulary-parallel loss.
// Each records on the timeline what it ran (the trainer records the optimizer and the
// data wait) and fills the step record's per-device samples and its mode's records.
#include <memory>
#include <vector>

#include "engine/data/dataset.h"
#include "engine/models/model.h"
#include "engine/nn/loss.h"
#include "engine/parallel/data_parallel.h"
#include "engine/parallel/distributed_data_parallel.h"
#include "engine/parallel/fully_sharded.h"
#include "engine/parallel/pipeline.h"
#include "engine/parallel/tensor_parallel.h"
#include "engine/parallel/step_record.h"
#include "engine/parallel/strategy_options.h"

namespace dpb {

// One batch of a step: the loss gradient is scaled by `loss_scale` (1 / batches per
// step); `last` is the step's last batch (DDP all-reduces only then).
struct BatchContext {
  int64_t step = 0;
  float loss_scale = 1.0f;
  bool last = true;
};

class ParallelStrategy {
 public:
  virtual ~ParallelStrategy() = default;
  virtual ParallelMode mode() const = 0;
  // The devices the model runs on; [0] holds the parameters the optimizer steps.
  virtual std::vector<Device> devices() const = 0;
  // Whether a step may take several batches (gradient accumulation).
  virtual bool accumulates() const { return true; }
  // Forward, loss and backward of one batch (already on devices()[0]); the returned loss
  // may be deferred (resolve() reads it).
  virtual LossResult forward_backward(const Batch& batch, const BatchContext& ctx, StepRecord& r) = 0;
  // Waits for the step's work on every device.
  virtual void synchronize();
  // After the step ended: per-device samples and what the mode records.
  virtual void finish_step(const std::vector<const Batch*>& batches, StepRecord& r) = 0;

  virtual const DataParallel* data_parallel() const { return nullptr; }
  virtual DistributedDataParallel* ddp() { return nullptr; }
  virtual PipelineParallel* pipeline() { return nullptr; }
  virtual FullyShardedDataParallel* fsdp() { return nullptr; }
  virtual TensorParallel* tp() { return nullptr; }
};

// Builds the strategy for o.mode with its registry entry's factory: moves the model onto
// its devices, wraps it (DataParallel, DDP, the pipeline's stages; the automatic split
// measures every layer first) and checks the options fit the mode. `unit_costs`
// receives the pipeline's measured per-unit costs when the split was automatic. `o` must
// outlive the strategy.
std::unique_ptr<ParallelStrategy> make_strategy(Model& model, const StrategyOptions& o, std::vector<double>* unit_costs);

// Each mode's factory, named by its entry in parallel_modes(). They check what only
// their mode needs; make_strategy checks what every mode shares.
namespace strategies {
std::unique_ptr<ParallelStrategy> single(Model& model, const StrategyOptions& o, std::vector<double>* unit_costs);
std::unique_ptr<ParallelStrategy> dp(Model& model, const StrategyOptions& o, std::vector<double>* unit_costs);
std::unique_ptr<ParallelStrategy> ddp(Model& model, const StrategyOptions& o, std::vector<double>* unit_costs);
std::unique_ptr<ParallelStrategy> pipeline(Model& model, const StrategyOptions& o, std::vector<double>* unit_costs);
std::unique_ptr<ParallelStrategy> fsdp(Model& model, const StrategyOptions& o, std::vector<double>* unit_costs);
std::unique_ptr<ParallelStrategy> tp(Model& model, const StrategyOptions& o, std::vector<double>* unit_costs);
}  // namespace strategies

}  // namespace dpb
