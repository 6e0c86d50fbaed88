#pragma once
// DDP's gradient reducer (PyTorch's c10d Reducer, reduced to what the engine needs).
//
// Buckets: parameters in reverse registration order (the order backward produces their
// gradients) are packed into buckets of at least first_bucket_bytes (the first) and
// bucket_bytes (the others); a bucket closes when it reaches its size, so it may exceed
// it by one parameter. Each bucket is one flat f32 tensor on the parameters' device, and
// each parameter's gradient is a view into it (PyTorch's gradient_as_bucket_view): the
// backward writes straight into the bucket and the all-reduce needs no copies. Where the
// ranks share a host's memory the buckets lie in the group's shared buffer
// (ProcessGroup::shared_buffer), which it reduces in place in every rank's copy.
//
// As backward marks gradients ready (Parameter hooks), a bucket whose last gradient
// arrives is all-reduced (average) at once, but only in bucket order (a next-bucket
// index), so every rank issues the same collectives in the same order whatever order its
// gradients arrive in. finalize() waits for all of them before the optimizer steps.
// With sync off (no_sync, gradient accumulation) gradients only accumulate locally.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/comm/process_group.h"
#include "engine/nn/parameter.h"

namespace dpb {

// What one bucket did in the last synchronised backward; times are steady-clock ns.
struct BucketRecord {
  int index = 0;
  int64_t bytes = 0;
  int params = 0;
  int64_t ready_ns = 0;       // its last gradient was marked ready
  int64_t launch_ns = 0;      // its all-reduce was queued
  int64_t comm_start_ns = 0;  // the all-reduce started running (0: unknown)
  int64_t comm_end_ns = 0;    // ... and finished
  int64_t wait_ns = 0;        // finalize() began waiting for it
  int64_t done_ns = 0;        // finalize() saw it complete
};

class Reducer {
 public:
  Reducer(std::vector<std::pair<std::string, Parameter*>> params, comm::ProcessGroup& group,
          int64_t first_bucket_bytes, int64_t bucket_bytes);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Before a backward: with sync, its gradients are all-reduced as they become ready.
  void prepare(bool sync);
  // After a synchronised backward: waits for every bucket; an error names parameters that
  // got no gradient (every rank must produce every gradient, as without
  // find_unused_parameters).
  void finalize();

  size_t bucket_count() const { return buckets_.size(); }
  // Parameter names of each bucket, in bucket order.
  std::vector<std::vector<std::string>> bucket_params() const;
  const std::vector<BucketRecord>& records() const { return records_; }

 private:
  struct Bucket {
    Tensor flat;                  // (elements) f32
    std::vector<size_t> params;   // indices into params_
    int pending = 0;              // gradients not yet ready in this backward
    std::shared_ptr<comm::Work> work;
  };
  void on_ready(size_t param);
  void launch(size_t bucket);

  std::vector<std::pair<std::string, Parameter*>> params_;
  comm::ProcessGroup& group_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;  // param -> bucket
  std::vector<bool> ready_;        // param marked in this backward
  std::vector<BucketRecord> records_;
  size_t next_ = 0;                // next bucket to launch
  bool sync_ = false;
  bool active_ = false;            // inside a synchronised backward
};

}  // namespace dpb
