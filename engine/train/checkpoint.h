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
#include "engine/parallel/fully_sharded.h"

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

// A sharded checkpoint (FSDP, as PyTorch's distributed checkpoint keeps one file per
// rank): a directory of rank-RRRRR-of-WWWWW.safetensors, each rank's own file holding its
// rows of every parameter under the parameter's name (dim 0: in rank order they
// concatenate into the whole parameter, torch.cat(parts, dim=0); 0 rows where a rank
// holds none), their optimizer state as "optimizer.<parameter>.<key>", the model's
// buffers, and the full checkpoint's metadata with world_size and rank. No rank holds
// more than its shards to write it. Each file is written atomically; resuming needs the
// same world size, and every rank checks that all the files are of the same step.
std::string sharded_checkpoint_file(const std::string& dir, int rank, int world);
void save_sharded_checkpoint(const std::string& dir, Model& model, FullyShardedDataParallel& fsdp,
                             const Optimizer& optimizer, const TrainPosition& pos);
TrainPosition load_sharded_checkpoint(const std::string& dir, Model& model, FullyShardedDataParallel& fsdp,
                                      Optimizer& optimizer);

}  // namespace dpb
