#pragma once
// The dpbench harness: turns flags into a training run, measures it (warm-up
// excluded), prints a summary on stdout and writes the JSON report.
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <optional>

#include "benchmarks/dpbench/collectives.h"

namespace dpb::bench {

struct BenchOptions {
  std::string bench = "train";          // train | collectives
  std::string mode = "single";
  int gpus = 1;                         // devices (on the CPU: logical CPU devices)
  int repeat = 1;                       // repetitions of the run (--gpus sweeps repeat every point)
  int gpus_requested = 0;               // --gpus as given (more than visible: fewer are used)
  // Devices that exist, as CUDA_VISIBLE_DEVICES would leave them (0: all; on the CPU
  // hardware threads / --threads devices of --threads cores each).
  int visible_devices = 0;
  bool logical_gpus = false;            // dp/mp on CUDA: --gpus logical devices placed on fewer GPUs
  std::string device_map = "spread";    // ddp: spread (rank r on device r) | same (every rank on device 0)
  int straggler_rank = -1;              // --straggler=RANK:MS: that rank computes MS slower per step
  int64_t straggler_ms = 0;
  bool doctor = false;                  // diagnose the run (dpdoctor's rules) into the report
  std::string dp_forward = "scatter";   // dp: scatter | bypass (call the wrapped module directly)
  std::string dp_input = "tensor";      // dp: tensor | list (a list of samples is replicated, not scattered)
  // mp: the first layer of each stage after the first (indices or names; empty: balanced
  // by measured time), the schedule and micro-batches (0: 1 for naive, else 4).
  std::string split;
  std::string pipeline_schedule = "gpipe";  // naive | gpipe | 1f1b
  int micro_batches = 0;
  std::string model = "lenet";
  std::string dataset = "synthetic";
  std::string data_dir;  // empty: the dataset's default location
  std::string devices = "cpu";           // cpu | cuda
  std::string precision = "fp32";        // fp32 | tf32 | bf16 (tf32, bf16: CUDA)
  int64_t batch = 64;
  int64_t steps = 20;
  int64_t epochs = 0;  // > 0: whole epochs instead of --steps
  int64_t warmup = 3;
  int workers = -1;  // -1: auto (0 on the CPU, up to 8 loader threads for GPUs)
  int prefetch = 2;
  int64_t loader_delay_ms = 0;
  std::string eval = "auto";  // auto (real datasets) | on | off
  bool augment = true;
  std::string save_path, resume_path;
  std::string progress = "auto";
  int threads = 0;  // per device; 0 = all hardware threads
  uint64_t seed = 0;
  std::string optimizer = "sgd";
  float lr = 0.01f;
  float momentum = 0.9f;
  float weight_decay = -1.0f;
  std::string lr_schedule = "constant";
  int64_t lr_warmup = 0;
  std::string lr_scale = "none";
  int64_t base_batch = 256;
  std::string json_path;
  std::string trace_path;  // Chrome/Perfetto trace of the run
  bool cuda_graph = false;
  bool deterministic = false;    // deterministic algorithms only       // replay forward+backward as a CUDA graph
  bool nvtx = false;             // NVTX ranges for Nsight Systems
  bool op_profile = false;       // time each op of the measured steps (waits around every op)
  // Ranks and communication (collectives; DDP).
  std::string backend;                  // gloo | nccl (default: nccl on GPUs, gloo otherwise)
  double timeout_s = 300;               // every collective and rendezvous wait
  bool debug_collectives = false;       // check every collective's op and sizes across ranks first
  int nnodes = 1, node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::optional<int> rank, world_size, local_rank;
  double bucket_mb = 25;                // DDP gradient bucket size (the first is 1 MiB)
  int accum_steps = 1;                  // batches per optimizer step (no_sync on all but the last)
  std::string sampler = "distributed";  // distributed | none (every rank reads the whole dataset)
  bool sync_bn = false;                 // DDP: SyncBatchNorm
  CollectiveOptions collectives;
  bool verify = false;           // compare --mode against single instead of benchmarking
  int64_t verify_steps = 5;
  // Largest parameter difference from single-device training, relative to how far that
  // moved the parameter; negative: 1e-3, or 2e-2 for SyncBatchNorm.
  double verify_tolerance = -1;
};

struct VerifyResult {
  // Per parameter ||theta_mode - theta_single|| / ||theta_single - theta_initial|| (L2):
  // the largest, which parameter, and the same over the whole model.
  double max_rel_diff = 0, model_rel_diff = 0;
  std::string worst_parameter;
  double max_abs_diff = 0;  // largest element difference
  bool passed = false;
};

// Trains verify_steps steps in o.mode and in single mode from the same initial weights
// on the same batches and compares the parameters.
// With `group` (DDP), every rank trains its shard; rank 0 also trains one device on the
// ranks' global batch, compares and reports (other ranks return passed).
VerifyResult run_verify(const BenchOptions& o, std::ostream& out, comm::ProcessGroup* group = nullptr,
                        Device rank_device = Device::cpu());

// Runs the benchmark; returns the report (already written when json_path is set). With
// `group`, this process is one DDP rank on `rank_device`: every rank trains, rank 0
// gathers the others' metrics, prints and writes the report (others return null).
nlohmann::json run_benchmark(const BenchOptions& o, const std::vector<std::string>& argv, std::ostream& out,
                             comm::ProcessGroup* group = nullptr, Device rank_device = Device::cpu());

// The CLI: parses argv, runs, returns the process exit code. Errors are one line on stderr.
int main_cli(int argc, char** argv);

}  // namespace dpb::bench
