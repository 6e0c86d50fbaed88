#pragma once
// dpbench's options: what the command line asks for, parsed once (cli.cpp) into typed
// groups, one per concern and per mode, and checked together (validate) before any work.
// Everything below the CLI takes these types; no option string is parsed again.
#include <cstdint>
#include <optional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "benchmarks/dpbench/collectives/spec.h"
#include "engine/backend/precision.h"
#include "engine/optim/lr_schedule.h"
#include "engine/optim/optimizer.h"
#include "engine/parallel/modes.h"
#include "engine/tensor/device.h"
#include "engine/train/progress.h"

namespace dpb::bench {

enum class BenchKind { train, collectives, simulate };
enum class EvalMode { automatic, on, off };
enum class DeviceMap { spread, same };  // ddp: rank r on device r, or every rank on device 0
enum class Backend { automatic, gloo, nccl };
// Where device times come from (docs/ARCHITECTURE.md §4a): auto picks the best the device allows.
enum class DeviceTiming { automatic, cupti, events, off };

// Devices: which kind, how many, how they are shared out, and the math they run.
struct DeviceOptions {
  DeviceKind kind = DeviceKind::cpu;
  int count = 1;            // --gpus: devices (ranks under ddp)
  int requested = 0;        // --gpus as given (dp and mp use fewer when fewer are visible)
  // Devices that exist, as CUDA_VISIBLE_DEVICES would leave them (0: all; on the CPU
  // hardware threads / --threads devices of --threads cores each).
  int visible = 0;
  bool logical_gpus = false;  // dp/mp on CUDA: --gpus logical devices placed on fewer GPUs
  int threads = 0;            // per device; 0: cores / devices on this node
  Precision precision = Precision::fp32;
  bool cuda_graph = false;
  bool deterministic = false;
  DeviceTiming timing = DeviceTiming::automatic;
};

struct DataOptions {
  std::string model = "lenet";
  std::string dataset = "synthetic";
  std::string dir;  // empty: the dataset's default location; the file for "text"
  int64_t seq = 0;  // tokens per sequence for the language models (0: the model's context)
  bool augment = true;
  int workers = -1;  // -1: 0 on the CPU, up to 8 loader threads for GPUs
  int prefetch = 2;
  int64_t loader_delay_ms = 0;
  EvalMode eval = EvalMode::automatic;
  int64_t eval_every = 0;  // > 0: evaluate every this many steps as well
};

struct TrainingOptions {
  int64_t batch = 64;
  int64_t steps = 20;
  int64_t epochs = 0;  // > 0: whole epochs instead of --steps
  int64_t warmup = 3;
  uint64_t seed = 0;
  OptimizerKind optimizer = OptimizerKind::sgd;
  float lr = 0.01f, momentum = 0.9f, weight_decay = -1.0f;
  LrScheduleKind lr_schedule = LrScheduleKind::constant;
  int64_t lr_warmup = 0;
  double clip_grad_norm = 0;  // > 0: clip gradients to this global norm
  LrScaling lr_scale = LrScaling::none;
  int64_t base_batch = 256;
  int accum_steps = 1;  // batches per optimizer step
  std::string save_path, resume_path;
  bool save_sharded = false;  // --save-format: one file per rank (fsdp), not one full file
  ProgressMode progress = ProgressMode::automatic;
};

// --mode=dp: how the wrapper is called (the classic mistakes, reproducible).
struct DpOptions {
  bool bypass = false;           // --dp-forward=bypass: the wrapped module directly
  bool replicate_input = false;  // --dp-input=list: a list of samples, replicated
};

// --mode=mp: the cut and the schedule.
struct PipelineOptions {
  std::vector<std::string> split;  // first unit of each stage after the first (empty: measured)
  PipelineSchedule schedule = PipelineSchedule::gpipe;
  int micro_batches = 0;  // 0: 1 for naive, else 4 (at most the batch)
};

// Several ranks (--mode=ddp, --bench=collectives): who they are, how they meet, and DDP.
struct RankOptions {
  Backend backend = Backend::automatic;  // nccl on GPUs, gloo otherwise
  double timeout_s = 300;                // every collective and rendezvous wait
  bool debug_collectives = false;
  int spin_ms = 20;  // Gloo: poll this long (ms) waiting for a collective before sleeping
  bool shared_memory = true;  // Gloo: ranks on one host all-reduce through shared memory
  int nnodes = 1, node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // Given on the command line: then they win over MASTER_ADDR/MASTER_PORT in the
  // environment of a rank another launcher started (the defaults do not).
  bool master_addr_given = false, master_port_given = false;
  std::string store_bind;  // where rank 0's store listens (empty: engine/comm/rendezvous.h)
  std::optional<int> rank, world_size, local_rank;
};

struct DdpOptions {
  double bucket_mb = 25;  // the first bucket is 1 MiB
  bool distributed_sampler = true;  // --sampler=distributed | none
  bool sync_bn = false;
  DeviceMap device_map = DeviceMap::spread;
  int straggler_rank = -1;  // --straggler=RANK:MS: that rank computes MS slower per step
  int64_t straggler_ms = 0;
  int hang_rank = -1;  // --hang-rank=RANK:STEP: from that step on, that rank never reaches its collectives
  int64_t hang_step = 0;
  // --tp=N with --mode=ddp: tensor-parallel groups of N adjacent ranks, DDP across them
  // (2D: data x tensor); 1: plain DDP.
  int tp = 1;
};

// --mode=fsdp (its ranks, sampler and fault injection are DdpOptions').
struct FsdpBenchOptions {
  bool reshard_after_forward = true;  // --fsdp-reshard
  int prefetch = 1;                   // --fsdp-prefetch
};

struct OutputOptions {
  std::string json_path;
  std::string trace_path;
  bool doctor = false;
  bool prove = false;    // --doctor=prove: each flag fix run and timed against the original
  int prove_pairs = 3;
  bool nvtx = false;
  bool op_profile = false;
  bool layer_profile = false;  // single device: the profile --simulate replays
};

// --simulate: predict instead of run (benchmarks/simulate).
struct SimulateOptions {
  std::vector<int> ranks;                  // --gpus: the counts to predict
  std::string profile_path;                // --profile: a --layer-profile report
  double single_step_s = 0;                // --single-step-s: an analytic profile
  std::string trace_path;                  // --from-trace: a PyTorch profiler trace (or a dpbench report)
  std::string hardware;                    // --hardware: preset name or file ("": the trace's GPU's, else cpu-gloo-local)
  std::vector<std::string> links;          // --link: collectives reports to fit
  double jitter = -1;                      // --sim-jitter (< 0: a measured profile's rank lag, else 0)
  std::string crowded_profile_path;        // --crowded-profile: the profile recorded with another rank computing
  double contention = -1;                  // --contention (< 0: the preset's)
  bool mode_defaulted = false;             // no --mode given: ddp
};

struct VerifyOptions {
  bool enabled = false;
  int64_t steps = 5;
  // Largest parameter difference from single-device training, relative to how far that
  // moved the parameter; < 0: 1e-3, or 2e-2 with SyncBatchNorm.
  double tolerance = -1;
};

struct BenchOptions {
  BenchKind bench = BenchKind::train;
  ParallelMode mode = ParallelMode::single;
  std::vector<int> sweep;  // --gpus=1,2,4: more than one count (or --repeat > 1)
  int repeat = 1;
  DeviceOptions device;
  DataOptions data;
  TrainingOptions train;
  DpOptions dp;
  PipelineOptions pipeline;
  RankOptions ranks;
  DdpOptions ddp;
  FsdpBenchOptions fsdp;
  CollectiveOptions collectives;
  OutputOptions out;
  VerifyOptions verify;
  SimulateOptions simulate;
  // Mode-specific flags given on the command line (--dp-forward, --split, --bucket-mb...):
  // each must belong to the chosen mode.
  std::set<std::string> given;
};

// Flag combinations that do not fit together, and what the machine cannot run: one
// dpb::Error naming the flags and the valid choices. Checked before any work.
void validate(const BenchOptions& o);
// --save's path can be written: a file (a full checkpoint), or a directory that is there
// or can be made (a sharded one).
void check_checkpoint_writable(const BenchOptions& o);
void validate_collectives(const BenchOptions& o);
void validate_simulate(const BenchOptions& o);

// Devices dp and mp can use: the GPUs, or as many logical CPU devices as the engine has.
int visible_devices(const BenchOptions& o);
// dp and mp use the devices that exist: more requested than visible runs on fewer, as
// torch.nn.DataParallel(model) uses the visible GPUs (the run records both counts).
void apply_visible_devices(BenchOptions& o);
// The options of one point of a sweep: `n` devices, the mode it runs in (mp's one-device
// point is single-device training) and the batch (dp and mp: N x --batch).
BenchOptions sweep_point(const BenchOptions& o, int n);

// One run of a sweep: its device count, its repetition and the folder its report goes to.
// The sweep starts each as a child with the sweep's own command line and this in the
// environment (kSweepRunVariable, "N:REP:DIR"); the child, and every rank it launches,
// runs sweep_run()'s options: the typed options the sweep checked, not an edited
// command line.
struct SweepRun {
  int devices = 0;
  int repeat = 0;
  std::string dir;
};
inline constexpr const char* kSweepRunVariable = "DPB_SWEEP_RUN";
std::string sweep_run_value(const SweepRun& r);
// The run this process is, when the sweep started it; a malformed value is a dpb::Error
// naming it.
std::optional<SweepRun> sweep_run_from_environment();
// One run's options: sweep_point(), the thread budget of the sweep's largest point, its
// report (and trace) in its own files, and no verdict (the sweep gives one, on all its
// runs). A run that is not one of the sweep's is a dpb::Error.
BenchOptions sweep_run(const BenchOptions& o, const SweepRun& r);

// Names as the command line and reports spell them.
const char* device_kind_name(DeviceKind k);
const char* backend_name(Backend b);  // "gloo" | "nccl" ("auto" before resolving)
Backend resolved_backend(const BenchOptions& o);
// --micro-batches=0: one for the naive schedule, else 4 (at most the batch).
int micro_batches(const BenchOptions& o);
// Loader threads: on the CPU every core computes, so batches load in the training
// thread; a GPU step is short and its host is free, so loading moves to workers.
int loader_workers(const BenchOptions& o);
// The process's thread budget per device: --threads, else the cores shared out over the
// devices the largest point of the run uses on this node (constant across a sweep).
int threads_per_device(const BenchOptions& o, int devices_on_node);
int64_t bucket_bytes(const BenchOptions& o);

// The command line (args[0] the program) without those options, the program's name
// dropped: `valued` ones take a value (--opt=v or --opt v), `flags` stand alone (a flag
// given as --flag=v goes too).
std::vector<std::string> without_options(const std::vector<std::string>& args, const std::vector<std::string>& valued,
                                         const std::vector<std::string>& flags);

}  // namespace dpb::bench
