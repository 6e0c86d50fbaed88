#pragma once
// What dpdoctor's rules read: the evidence of one run, from a dpbench report (its
// largest run and its configuration) or from PyTorch profiler traces (torch_trace.h).
// Per-device samples and busy fractions, DataParallel's scatter counts and chunks, the
// primary's own time, each rank's device, compute and communication, whether the ranks'
// batches were the same samples, the data-wait share, DDP's overlap, the pipeline's
// stages and events. A rule fires on what ran, never on flags alone; what a source does
// not record is marked unknown and the rules that need it stand aside.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/parallel/modes.h"
#include "engine/trace/analysis.h"
#include "reports/model.h"

namespace dpb::doctor {

struct DeviceEvidence {
  std::string id;
  double busy = 0;
  int64_t samples = 0;
};

struct RankEvidence {
  int rank = 0;
  std::string host, device;
  std::vector<std::string> hardware;  // what it computed on: "core 2", "gpu 0000:1b:00.0"
  double compute_s = 0, comm_s = 0, step_s = 0, busy = 0;
  double samples_per_step = 0;  // measured (0: unknown)
  // Per measured step (the ranks' k-th steps are the same step): device compute, and the
  // device's idle time its host caused (empty: not measured).
  std::vector<double> compute_steps_s, host_wait_steps_s;
};

// What a device timeline adds about one rank (or one device of a process): the
// temporal breakdown and idle causes, compute and communication per step on the device,
// and the host's launches, syncs and copies (PyTorch GPU traces, CUPTI runs).
struct TimelineEvidence {
  std::optional<int> rank;
  std::string device;
  int steps = 0;
  std::optional<double> step_s;       // median step, without its wait for data
  std::optional<double> full_step_s;  // median step as measured
  // What the window is: "profiled steps" (a trace's ProfilerStep#N, host time before a
  // step's first kernel and after its last inside), "kernel span" (no step recorded), or
  // "measured steps" (dpbench's).
  std::string window = "measured steps";
  trace::Breakdown breakdown;
  std::optional<double> compute_per_step_s, comm_per_step_s, exposed_comm_per_step_s;
  std::optional<double> host_wait_per_step_s;  // device idle time the host caused, per step
  // Communication per collective kind (NCCL's kernel names), per step.
  std::vector<trace::DeviceAnalysis::Collectives> collectives;
  trace::LaunchStats launches;
  trace::SyncStats syncs;
  trace::CopyStats copies;
  bool launches_known = false;
  trace::IdleCauses idle;    // every gap charged to what the device waited for
  trace::LostEvents lost;
  // The profiled steps replayed with the input made ahead (PyTorch traces with steps).
  std::optional<trace::InputAhead> input_ahead;
  // Across ranks (clocks that agree): the part of its exposed communication spent waiting
  // for a later rank to reach the collective, over the window.
  std::optional<double> wait_exposed_s;
  double window_s() const { return breakdown.window_s; }
  // A share of the window (0 when the window is empty).
  double share(int64_t ns) const { return window_s() > 0 ? static_cast<double>(ns) * 1e-9 / window_s() : 0.0; }
  double share(trace::IdleCause c) const { return share(idle[c]); }
  // "rank 1 (cuda:1)", or "cuda:0" for one process.
  std::string who() const;
};

// A sweep's lost efficiency, per rank of its largest point: 1 - E(N) split into what the
// rank's window went to beyond the one-rank run's. With T1 and TN the one-rank and N-rank
// median steps (E = T1 / TN) and each run's window shares (compute, exposed
// communication, idle, copies) applied to its median step, as shares of TN:
//   compute slower than alone  (compute + copies)_N - (compute + copies + comm)_1 * E
//   waiting for the slower rank  the rank's collectives' wait for the last to arrive
//   exposed communication        the rest of its exposed communication (the transfer)
//   idle                         idle_N - idle_1 * E (waiting for data, for the host)
// The parts add to 1 - E exactly where each window's shares add to 1; `residual` is what
// they leave (measurement that does not add up), said, never hidden. Where the ranks'
// waits were not measured, the wait is unknown and stays inside exposed communication.
struct SweepBudget {
  struct Part {
    std::string cause;
    std::optional<double> share;  // unknown where the run did not measure it (a rank's wait)
  };
  struct Rank {
    int rank = 0;
    std::vector<Part> parts;
    double residual = 0;
    double compute_s = 0, one_rank_compute_s = 0;  // per median step, as the shares give them
  };
  double efficiency = 1, one_rank_step_s = 0, step_s = 0;
  int world = 1;
  std::vector<Rank> ranks;
};

struct Evidence {
  std::string source = "dpbench report";  // or "PyTorch profiler trace"
  trace::TimelineSource timeline_source = trace::TimelineSource::host;
  // What a profiler trace does not record: samples per device (and DataParallel's
  // chunks), and the host each rank ran on. Rules that need them stand aside.
  bool samples_known = true, hosts_known = true;
  ParallelMode mode = ParallelMode::single;
  // Profiler traces of ranks: the job's parallelism as its collectives and host ops show
  // it ("data", "sharded", "tensor", "expert", "point-to-point", joined with " + ";
  // "unknown"), and that evidence. `mode` is the nearest of dpbench's modes.
  std::string parallelism, parallelism_evidence;
  std::string model;
  bool gpu = false;           // the devices are GPUs
  int world = 1;              // devices (ranks under ddp) the run used
  int requested = 1;          // --gpus as asked
  int visible = 0;            // devices that exist
  int64_t batch_per_device = 0, global_batch = 0, base_batch = 256;
  int64_t steps = 0;          // steps run (warm-up included)
  bool batchnorm = false, sync_bn = false;
  std::string lr_scale = "none";
  double lr = 0, lr_effective = 0;
  double step_s = 0, throughput = 0, data_wait_share = 0;
  int workers = -1;  // the data loader's worker processes (-1: not recorded)
  std::vector<DeviceEvidence> device;
  // dp
  bool has_dp = false;
  std::string dp_forward, dp_input;
  int64_t scatter_calls = 0;
  std::vector<int64_t> chunks;
  double primary_only_s = -1, primary_replica_s = -1;
  double host_only_s = -1;  // per step: no device busy, no data wait (the host's DataParallel work)
  // Per step, each device's replica work in e.device's order (empty unless every device's
  // was measured): the gather and the gradient sum wait for the slowest.
  std::vector<double> replica_s;
  // Per step, each device's wait after its replica's phases for the latest device's
  // (empty: not measured).
  std::vector<double> replica_waited_s;
  // ddp
  std::vector<RankEvidence> ranks;
  double overlap = -1, exposed_share = -1, exposed_share_ab = -1;
  int64_t buckets = 0, bucket_bytes_max = 0;
  double bucket_mb = 0;
  int64_t data_compared = 0, data_identical = 0;
  // fsdp: the sharding, the largest of any rank's sharded state (parameter, gradient
  // and optimizer shards) and of its most gathered parameters, and rank 0's collectives
  // per step (-1: not measured).
  bool has_fsdp = false, fsdp_reshard = true;
  int fsdp_prefetch = 0, fsdp_units = 0;
  int64_t fsdp_full_bytes = 0, fsdp_largest_unit_bytes = 0, fsdp_state_bytes = 0, fsdp_peak_gathered_bytes = 0;
  int64_t allgathers = 0, allgather_bytes = 0;
  double allgather_s = -1, allgather_waited_s = -1;
  std::vector<double> rank_allgather_waited_s;  // per rank (rank order; empty: not measured)
  // The all-gathers above read from a profiler trace's NCCL kernels (waited: their time not
  // under compute); the prefetch, the resharding and the shards' bytes are then unknown.
  bool allgathers_from_kernels = false;
  // tp: rank 0's all-reduces per step (count, bytes of its inputs, the time they ran and
  // the time the training thread waited for them; -1: not measured).
  bool has_tp = false;
  int64_t tp_allreduces = 0, tp_allreduce_bytes = 0;
  double tp_allreduce_s = -1, tp_allreduce_waited_s = -1;
  // mp
  bool has_pipeline = false;
  std::string schedule, split_by;
  int micro_batches = 0;
  std::vector<int64_t> micro_sizes;
  std::vector<double> stage_busy;  // per stage: 1 - idle share
  std::vector<std::vector<std::string>> stage_units;
  std::vector<double> unit_costs;  // measured per unit (automatic split), else empty
  std::vector<std::string> unit_names;
  double bubble = -1, bubble_theory = -1;
  double concurrency = -1;  // share of the last step with two or more stages busy
  // The temporal breakdown of each device or rank over the measured window.
  std::vector<trace::Breakdown> breakdown;
  // Profiler traces whose window is their profiled steps: the same over HTA's window (the
  // kernel span), to compare with HTA's figures.
  std::vector<trace::Breakdown> kernel_span;
  // Device timelines (a PyTorch GPU trace; a dpbench run with device times): one per rank,
  // or one per device of a single process. Empty where the source has none.
  std::vector<TimelineEvidence> timelines;
  bool device_activity = true;  // false: the trace recorded no GPU work (a CPU-only profile)
  // Across ranks: collectives compared, and how many each rank started last.
  int collectives_compared = 0;
  std::vector<int> last_starts;
  // Profiler traces of several ranks: the whole cross-rank analysis (arrival order, waits).
  std::optional<trace::CrossRank> cross;
  // dpbench: the scaling efficiency of the diagnosed run's sweep point, and per rank
  // (rank order) the time a step's collectives waited for the slower rank to arrive.
  std::optional<double> scaling_efficiency;
  std::optional<SweepBudget> sweep_budget;  // where 1 - E(N) went (a sweep with a one-rank run)
  std::vector<double> wait_for_peers_s;
  // dpbench ddp: per rank (rank order), per step, the all-reduces' time on the
  // communication thread and the hand-offs around it (empty: not measured); the A/B's
  // forward + backward without communication.
  std::vector<double> allreduce_s, allreduce_handoff_s;
  double step_without_comm_s = -1;
  // Profiler traces: the files, as which ranks, and why; and what lowers confidence.
  std::optional<reports::TraceJobInfo> job;
  std::vector<std::string> notes;
};

// The evidence of a report's largest run (a sweep is diagnosed at its largest count).
Evidence evidence_from_report(const reports::RunReport& report);

// Share of [lo, hi) in which at least two of the lanes (pipeline stages, GPUs) are busy;
// each lane's own overlapping intervals count once.
double concurrency_share(const std::vector<std::vector<std::pair<double, double>>>& lanes, double lo, double hi);

}  // namespace dpb::doctor
