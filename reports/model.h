#pragma once
// The dpbench report (schema "dpbench.report/1") as types: what dpbench fills, what
// dpdoctor builds its evidence from, what dpreport shows and compares. This file and
// model_json.cpp are the only places the report's keys are named.
//
// to_json() writes what reports/schema/dpbench.report-1.schema.json describes; numbers
// that are not finite, and figures that were not measured (std::nullopt), are null.
// from_json() reads a report from anywhere (another machine, a CI artifact): it checks
// the document against the schema, then every field's type and bounds, and throws one
// dpb::Error naming the field that does not fit. Fields dpbench always writes but a
// reader can do without are optional, so older reports still read.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/backend/precision.h"
#include "engine/core/stats.h"
#include "engine/parallel/modes.h"
#include "engine/tensor/device.h"
#include "reports/findings.h"
#include "reports/layer_profile.h"
#include "engine/trace/breakdown.h"

namespace dpb::reports {

inline constexpr const char* kReportSchema = "dpbench.report/1";

using Num = std::optional<double>;  // a measured figure; nullopt: not measured (null)

struct ToolInfo {
  std::string name = "dpbench", version, git;
};

struct GpuDescription {
  int index = 0;
  std::string name;
  int64_t memory_bytes = 0;
  std::string compute_capability, pci_bus_id;
};

// Allow-listed: never the whole process environment.
struct Environment {
  std::string host, cpu_model;
  int cpu_threads = 0;
  std::string onednn;
  // The vector instructions the project's own CPU kernels ran (simd.h: avx512, avx2,
  // baseline) and oneDNN's (its effective ISA); unset in reports that predate them.
  std::optional<std::string> kernels_isa, onednn_isa;
  bool cuda_built = false;
  std::optional<std::string> cuda, driver, cudnn, nccl;
  std::vector<GpuDescription> gpus;
};

struct OptimizerConfig {
  std::string name = "sgd";
  double lr = 0, momentum = 0;
};

struct RunConfig {
  ParallelMode mode = ParallelMode::single;
  std::string model, dataset;
  std::optional<std::string> data_dir;
  DeviceKind devices = DeviceKind::cpu;
  std::vector<int> gpus{1};  // the device count; a sweep's list of counts
  int gpus_requested = 1, visible_devices = 0;
  bool logical_gpus = false, batchnorm = false;
  int64_t base_batch = 256;
  std::vector<std::string> device_list;
  std::optional<std::string> dp_forward;           // dp
  std::optional<PipelineSchedule> pipeline_schedule;  // mp
  std::optional<int> micro_batches;                // mp
  int64_t batch_per_device = 0, global_batch = 1;
  int world_size = 1, accum_steps = 1;
  Precision precision = Precision::fp32;
  bool cuda_graph = false, deterministic = false;
  std::optional<std::string> backend, sampler;  // ddp
  std::optional<double> bucket_mb;              // ddp
  // tp: the ranks each tensor-parallel group cuts the model over (every rank under
  // --mode=tp; --tp under --mode=ddp, 2D).
  std::optional<int> tensor_parallel;
  bool sync_bn = false;
  int threads_per_device = 1;
  std::optional<int64_t> steps, epochs;
  int64_t warmup = 0;
  uint64_t seed = 0;
  int workers = 0;
  OptimizerConfig optimizer;
  std::string lr_scale = "none", lr_schedule = "constant";
  Num lr_effective;
  int64_t parameters = 0;
  std::optional<std::string> resumed_from;
  // A sweep (--gpus=1,2,4 / --repeat): repetitions per point and how the batch scales.
  std::optional<int> repeat;
  std::optional<std::string> sweep_batch;
};

struct StepTimeStats {
  Num median, p10, p90, mean, stddev, cv, min, max;
  int64_t count = 0, outliers = 0;
  static StepTimeStats of(const Summary& s);
};

struct DeviceStats {
  std::string id;
  int64_t samples = 0;
  Num busy_fraction;
  int64_t peak_memory_bytes = 0;  // the device allocator's peak over the run (live tensors)
  // The allocator's cache at the end (freed blocks kept for reuse: memory the process
  // holds that no tensor uses).
  Num cached_memory_bytes;
  // The resident memory of the process that drove this device (/proc/self/status):
  // its peak over the whole process (model construction included; VmHWM), and how much
  // of its resident memory at the end is shared memory (RssShmem: DDP's shared gradient
  // buckets). Devices one process drives (dp, pipeline) show that one process; null
  // where /proc is not readable.
  Num peak_rss_bytes, shared_rss_bytes;
};

// ddp: what one rank measured (per step: medians over the measured steps).
struct RankStats {
  int rank = 0;
  Num step_time_median_s, step_time_p90_s, data_wait_share, busy_fraction;
  Num comm_s, overlap_ratio, exposed_comm_s, compute_s;
  std::string host, device;
  std::vector<std::string> hardware;  // what it computed on: "core 2", "gpu 0000:1b:00.0"
  int64_t samples = 0;
  std::vector<Num> compute_steps_s;  // compute in each measured step (pairs the ranks step by step)
  // Per measured step, the mean time this rank's all-reduces waited for the last rank to
  // start them (all ranks on one host, whose steady clock they share; null otherwise).
  Num wait_for_peers_s;
  // Per measured step (means, summed over buckets): the all-reduces' time on the
  // communication thread (waiting for peers and moving data), and the hand-offs between
  // the threads around it (the communication thread free but not yet started; finished
  // while the training thread waited, not yet seen done) — see collective_costs in
  // benchmarks/dpbench/metrics.h.
  Num allreduce_s, allreduce_handoff_s;
};

// One gradient bucket of the last measured step: ms from the start of its backward.
struct BucketStats {
  int index = 0;
  int64_t bytes = 0;
  int params = 0;
  Num ready_ms, launch_ms, comm_start_ms, comm_end_ms, done_ms;
};

struct OverlapAB {
  Num step_s, step_without_comm_s, optimizer_s, exposed_comm_s, exposed_share;
};

struct OverlapStats {
  Num ratio, exposed_comm_s, exposed_share;  // rank 0's, from intervals
  std::optional<OverlapAB> ab;              // by A/B against no_sync
};

struct SameData {
  int64_t compared_steps = 0, identical_steps = 0;
};

struct DpStats {
  std::string forward = "scatter", input = "tensor";
  int64_t scatter_calls = 0;
  std::vector<int64_t> last_chunks;
  std::vector<int64_t> full_chunks;  // the chunks of a full batch (empty in older reports)
  Num primary_only_s, primary_replica_s;  // per step
  // Per step, the time no device worked and the loop was not waiting for data: the host
  // scattering, gathering and handing work to the device threads.
  Num host_only_s;
  // Per step, each device's replica work (forward and backward), in the devices' order:
  // the gather and the gradient sum wait for the slowest. Empty in older reports; null
  // where a device's work was not recorded.
  std::vector<Num> replica_s;
  // Per step, each device's wait after its replica's forward and backward for the latest
  // device's (where the host spans are the device's own time: logical CPU devices).
  std::vector<Num> replica_waited_s;
};

// fsdp: what one rank held, in bytes.
struct FsdpRankMemory {
  int rank = 0;
  int64_t shard_parameter_bytes = 0, shard_gradient_bytes = 0, optimizer_state_bytes = 0;
  // The most gathered parameters (with all-gather buffers) and unsharded gradients (with
  // reduce-scatter buffers) alive at once.
  int64_t peak_gathered_parameter_bytes = 0, peak_unsharded_gradient_bytes = 0;
  Num activation_bytes;  // what the forward left for the backward (the allocator's count)
  int64_t peak_memory_bytes = 0;  // the device allocator's peak over the run
  // Per step (medians over the measured steps), the training thread waiting for its
  // all-gathers and reduce-scatters.
  Num allgather_waited_s, reduce_scatter_waited_s;
};

// fsdp and tp: one kind of collective in rank 0's steps (per step: the medians over the
// measured steps).
struct CollectiveStepStats {
  std::string kind;  // "all-gather", "reduce-scatter" or "all-reduce"
  // Issued, and the bytes of this rank's inputs (its shard for an all-gather, the unit's
  // full gradients for a reduce-scatter, the activation or its gradient for tensor
  // parallelism's all-reduces, the loss's statistics for its all-gather).
  int64_t count = 0, bytes = 0;
  Num seconds;   // the time they ran (null where the backend cannot tell)
  Num waited_s;  // the training thread waiting for them: the exposed part
};

struct FsdpStats {
  bool reshard_after_forward = true;
  int prefetch = 1;
  std::string param_dtype = "f32";  // what parameters were all-gathered in: f32 or bf16
  int units = 0;
  int64_t full_parameter_bytes = 0, largest_unit_bytes = 0;
  std::vector<FsdpRankMemory> ranks;
  std::vector<CollectiveStepStats> collectives;
};

// tp: how the model was cut and what each rank held (f32 parameters, bytes), and rank
// 0's collectives per step.
struct TpRankMemory {
  int rank = 0;
  int64_t parameter_bytes = 0;        // its parts and the replicated parameters
  int64_t optimizer_state_bytes = 0;  // over them
  int64_t peak_memory_bytes = 0;      // the device allocator's peak over the run
};

struct TpStats {
  int64_t full_parameter_bytes = 0;  // the whole model's
  int64_t replicated_bytes = 0;      // held whole by every rank (norms, position table, row-parallel biases)
  std::vector<TpRankMemory> ranks;
  std::vector<CollectiveStepStats> collectives;
};

struct StageStats {
  int stage = 0;
  std::string device;
  std::vector<std::string> units;
  int64_t parameters = 0;
  Num busy_fraction, idle_share;
};

struct UnitCost {
  std::string unit;
  Num seconds;
};

struct PipelineEventStats {
  int stage = 0, micro_batch = 0;
  char kind = 'F';  // 'F' or 'B'
  Num begin_s, end_s;
};

struct PipelineStats {
  PipelineSchedule schedule = PipelineSchedule::gpipe;
  int micro_batches = 1;
  std::vector<int64_t> micro_batch_sizes;
  std::vector<std::string> split;
  std::string split_by = "measured time";  // or "--split"
  std::optional<std::vector<UnitCost>> unit_costs;
  Num bubble_measured;
  double bubble_theory = 0;
  std::vector<PipelineEventStats> last_step_events;
};

struct TimelineInterval {
  int device = 0;
  std::string lane, name, cat;
  Num begin_s, end_s;
};

// The last measured step on the timeline, from its wait for data to its end, and where
// the timeline's device times come from (docs/ARCHITECTURE.md §4a).
struct TimelineExcerpt {
  trace::TimelineSource source = trace::TimelineSource::host;
  Num span_s;
  int64_t step = 0;
  std::vector<TimelineInterval> intervals;
  // A device timeline's own account (absent for host): why its source is not the one
  // asked for (CUPTI could not subscribe), records it lost over the run, and how far a
  // converted device time may be from the host clock's.
  std::string note;
  std::optional<int64_t> dropped_records;
  Num clock_residual_s;
};

struct Accuracy {
  Num test, test_loss;
};

struct EpochStats {
  int64_t epoch = 0;
  Num train_loss, test_accuracy, seconds, test_loss;
};

// --eval-every: the test split evaluated after optimizer step `step`.
struct StepEvalStats {
  int64_t step = 0;
  Num test_loss, test_accuracy;
};

struct OpProfileRow {
  std::string op;
  Num calls_per_step, seconds_per_step;
};

// Language models: how attention ran over the run's forward passes, fused (cuDNN's
// flash attention) or not, and why the last one not fused could not be.
struct AttentionStats {
  int64_t fused_calls = 0, unfused_calls = 0;
  std::optional<std::string> unfused_why;
};

// One run: one device count (a sweep has several, each --repeat times).
struct RunMetrics {
  int world_size = 1;
  int64_t batch_per_device = 0, global_batch = 1, steps = 0;
  Num throughput_samples_per_s;
  StepTimeStats step_time_s;
  Num scaling_efficiency;  // null outside a sweep
  Num data_wait_share, wall_time_s;
  Num loss_first, loss_last;
  Num flops_per_sample, achieved_flops_per_s, mfu, peak_flops_per_s;
  // Language models: tokens in each sample (the sequence length), tokens trained per
  // second, and the training FLOPs per token (6N + 12LCT, PaLM's count) behind the MFU.
  std::optional<int64_t> tokens_per_sample;
  Num throughput_tokens_per_s, flops_per_token;
  std::optional<AttentionStats> attention;
  std::optional<Accuracy> accuracy;
  std::vector<DeviceStats> devices;
  std::optional<std::vector<RankStats>> ranks;
  std::optional<SameData> data;
  std::optional<std::vector<BucketStats>> buckets;
  std::optional<OverlapStats> overlap;
  std::optional<DpStats> dp;
  std::optional<FsdpStats> fsdp;
  std::optional<TpStats> tp;
  std::optional<std::vector<StageStats>> stages;
  std::optional<PipelineStats> pipeline;
  // The temporal breakdown of each device (each rank under ddp) over the measured window.
  std::optional<std::vector<trace::Breakdown>> breakdown;
  std::vector<Num> loss_per_step, step_times_s;
  std::optional<TimelineExcerpt> timeline;
  std::vector<EpochStats> epochs;
  std::vector<StepEvalStats> evals;
  std::optional<std::vector<OpProfileRow>> op_profile;
  std::optional<LayerProfile> layer_profile;  // --layer-profile (single device)
  // In a sweep: which repetition, and the mode the point ran in.
  std::optional<int> repeat;
  std::optional<ParallelMode> mode;
};

// One device count of a sweep: median throughput over its repetitions; or, with
// predicted, what `dpbench --simulate` predicts for that count (repeats 0).
struct SweepPoint {
  int world_size = 1;
  ParallelMode mode = ParallelMode::single;
  int64_t global_batch = 1, batch_per_device = 0;
  Num throughput_samples_per_s, throughput_min, throughput_max;
  int repeats = 0;
  Num scaling_efficiency;
  bool predicted = false;
  Num step_time_s, exposed_comm_s, overlap;  // written by predictions
};

struct RunReport {
  ToolInfo tool;
  std::vector<std::string> command;
  Environment env;
  RunConfig config;
  std::vector<RunMetrics> runs;
  std::optional<std::vector<SweepPoint>> sweep;
  std::vector<Finding> findings;
  // dpbench --doctor: the whole diagnosis (verdict, budget; its findings are findings[]).
  std::optional<DiagnosisReport> diagnosis;
  // --simulate: the prediction's inputs (profile, link) and each point's detail (critical
  // path, buckets, algorithm), as the simulator writes them; runs is empty then.
  std::optional<nlohmann::json> simulation;

  nlohmann::json to_json() const;
  // `document` names the source in errors ("report 'run.json'").
  static RunReport from_json(const nlohmann::json& j, const std::string& document);
  // Reads a report file (at most 256 MiB).
  static RunReport read(const std::string& path);

  // The run with the most devices (the last of them): what a sweep is diagnosed on.
  const RunMetrics& largest_run() const;
};

// tool, command and env for a report produced by this process.
ToolInfo this_tool();
Environment collect_environment();

}  // namespace dpb::reports
