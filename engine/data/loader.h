#pragma once
// DataLoader: batches from a Dataset in the order of a DistributedSampler, assembled
// by worker threads ahead of the consumer (prefetch), as torch.utils.data.DataLoader.
// Batches bound for a GPU are assembled in page-locked memory, and while the consumer
// trains on batch i the copy of batch i+1 (when a worker has it ready) already runs on
// the GPU's copy stream, overlapping with compute. Every call to next()
// records how long the consumer waited for its batch: the evidence for "input-bound".
// Augmentation is deterministic under the seed whatever the worker count.
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "engine/backend/transfer.h"
#include "engine/data/dataset.h"
#include "engine/data/sampler.h"
#include "engine/data/transforms.h"

namespace dpb {

struct LoaderOptions {
  int64_t batch = 32;
  int workers = 0;          // 0: batches are assembled in the consumer's thread
  int prefetch = 2;         // batches in flight per worker
  bool drop_last = false;   // drop a last incomplete batch
  Device device = Device::cpu();  // where batches are delivered
  uint64_t seed = 0;        // augmentation
  int64_t delay_ms = 0;     // an injected delay per batch (to reproduce a slow input pipeline)
};

class DataLoader {
 public:
  DataLoader(const Dataset& dataset, DistributedSampler& sampler, LoaderOptions options,
             const Transform* transform = nullptr);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Starts `epoch` (sampler.set_epoch) at batch `first` (non-zero when resuming).
  void start_epoch(int64_t epoch, int64_t first = 0);
  // The next batch of the epoch on options.device, or nullopt at the end of the epoch.
  std::optional<Batch> next();

  int64_t batches_per_epoch() const;
  // Nanoseconds the consumer waited in each next() that returned a batch.
  const std::vector<int64_t>& wait_ns() const { return wait_ns_; }
  const LoaderOptions& options() const { return o_; }

 private:
  Batch assemble(int64_t batch_index, int64_t epoch, const std::vector<int64_t>& indices) const;
  void worker_loop();
  void submit_up_to(int64_t batch_index);
  // Starts the device copy of batch `index` if a worker has it ready (GPU targets).
  void stage(int64_t index);

  const Dataset& ds_;
  DistributedSampler& sampler_;
  LoaderOptions o_;
  const Transform* transform_;

  int64_t epoch_ = -1;
  std::shared_ptr<const std::vector<int64_t>> order_;  // this epoch's sample indices
  int64_t cursor_ = 0;          // next batch to hand out
  int64_t submitted_ = 0;       // batches handed to workers so far

  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<int64_t> tasks_;
  std::map<int64_t, Batch> ready_;
  std::map<int64_t, std::string> failed_;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
  std::vector<int64_t> wait_ns_;

  struct Staged {
    int64_t index = -1;
    DeviceTransfer x, target;
    std::vector<int64_t> indices;
  };
  Staged staged_;  // the next batch, already on its way to the device
};

}  // namespace dpb
