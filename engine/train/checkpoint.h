#pragma once
// Training checkpoints in safetensors: the model's parameters and buffers under their
// PyTorch names (layer1.0.conv1.weight, bn1.running_mean, ...), so a PyTorch user can
// load them with safetensors.torch.load_file and load_state_dict(strict=False); the
// optimizer state as "optimizer.<parameter>.<key>"; and in the metadata the position
// in training (epoch, batch within it, global step) and the seed that fixes the data
// order and augmentation, so a resumed run continues exactly where it stopped.
#include <string>

#include "engine/models/model.h"
#include "engine/optim/optimizer.h"

namespace dpb {

struct TrainPosition {
  int64_t epoch = 0;
  int64_t batch = 0;        // next batch within the epoch
  int64_t global_step = 0;  // optimizer steps taken
  uint64_t seed = 0;
};

// Written atomically: a failed write leaves the previous checkpoint intact.
void save_checkpoint(const std::string& path, Model& model, const Optimizer& optimizer, const TrainPosition& pos);
// The same with the optimizer's state given (FSDP's gathered from every rank's shards),
// indexed by the model's parameters.
void save_checkpoint(const std::string& path, Model& model, const std::string& optimizer_name,
                     const std::vector<OptimizerState>& state, const TrainPosition& pos);
// Restores model and optimizer in place. Throws dpb::Error naming the first tensor
// whose name or shape does not match, or a model/optimizer mismatch.
TrainPosition load_checkpoint(const std::string& path, Model& model, Optimizer& optimizer);

}  // namespace dpb
