#pragma once
// Setting up a run: the process-wide settings (threads per device, precision,
// determinism) applied once, the devices by index, and what a run trains on what and
// how (the model, the dataset's splits, the trainer's options).
#include <memory>
#include <string>
#include <vector>

#include "benchmarks/dpbench/options.h"
#include "engine/comm/process_group.h"
#include "engine/data/registry.h"
#include "engine/models/model.h"
#include "engine/train/train_options.h"

namespace dpb::bench {

// This process as one DDP rank: its group and its device.
struct RankContext {
  comm::ProcessGroup* group = nullptr;  // every rank: the harness's own collectives
  Device device = Device::cpu();
  // ddp with --tp: this rank's data-parallel and tensor-parallel groups (2D); null: the
  // training uses `group`.
  comm::ProcessGroup* data_group = nullptr;
  comm::ProcessGroup* tensor_group = nullptr;
  // The ranks that split the global batch (data-parallel ranks).
  int data_ranks() const { return data_group ? data_group->size() : group->size(); }
};

// Threads per device, precision and determinism for this process; returns the threads
// per device. `devices_on_node`: the devices (ranks) this node runs at the run's largest
// point.
int apply_process_settings(const BenchOptions& o, int devices_on_node);

// Device `index` of the run's kind.
Device bench_device(const BenchOptions& o, int index);
// What the report and the console call each device: cpu:1, cuda:1 (GPU 0) for logical
// GPUs, cpu@rank1 under ddp.
std::vector<std::string> device_ids(const BenchOptions& o, const RankContext* rank);
// Peak FLOP/s of the run's device for its precision (0 when unknown: no MFU).
double device_peak_flops(const BenchOptions& o);
// The CPUs this process may run on (its affinity mask), in order.
std::vector<int> allowed_cores();

// What a run trains, on what, and how. `parallel` false gives the single-device run of
// the same setup (what --verify compares against); `rank` makes it this rank's DDP run.
struct RunSetup {
  std::unique_ptr<Model> model;
  DatasetSplits data;
  TrainOptions train;
};
RunSetup prepare_run(const BenchOptions& o, bool parallel, const RankContext* rank);
// --mode=tp (or ddp with --tp): a dpb::Error, before any rank starts, when the model
// cannot be cut over its tensor-parallel ranks (heads, width or vocabulary they do not
// divide, or layers tensor parallelism does not cut).
void check_tensor_parallel(const BenchOptions& o);

}  // namespace dpb::bench
