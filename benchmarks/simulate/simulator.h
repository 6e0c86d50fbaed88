#pragma once
// `dpbench --simulate`: one training step at N ranks, replayed from a one-device profile
// and a link model (docs/ARCHITECTURE.md §8).
//
// ddp: forward; backward layer by layer in reverse; gradients go into buckets exactly as
//   the Reducer forms them (parameters in reverse registration order, the first bucket
//   closing at --first-bucket-mb, the others at --bucket-mb); a bucket's all-reduce is
//   queued on the one communication stream when its last gradient is ready, in bucket
//   order; compute runs (1 + contention) times slower while all-reduces are in flight (GPUs)
//   or while one runs (CPUs), and (1 + contention + kernel_contention) times slower while
//   a GPU's communication kernel runs; an all-reduce beside compute takes its time under
//   load (measured with --bench=collectives --load, else stretched as compute is where
//   the two share a core), alone its idle time;
//   after the backward the step waits for the last all-reduce (exposed communication),
//   then the optimizer. Ranks vary step to step and each collective waits for the
//   slowest: with a measured profile's rank lag (the median of the slowest of N steps
//   drawn from the profiled run's, over its median), compute stretches so that the step
//   grows by that lag; with --sim-jitter sigma instead, by sigma times the expected
//   maximum of N standard normals. Each gradient's backward pays the link's
//   reducer cost (its hook and bucket copies). N = 1 is the one-device step (no DDP), or,
//   with reducer_on_one_rank, DDP on one rank.
// dp: one process: parameters broadcast to the N devices, their batches' forward and
//   backward side by side, gradients reduced onto the primary, the optimizer there; no
//   overlap (DataParallel's order).
// fsdp: the model's units (the profile's fsdp_unit per parameter, as the wrap policy
//   made them: GPT-2's blocks, with the embeddings, the tied head and the last norm in
//   the root, gathered before the first layer, kept through the backward and
//   reduce-scattered after it; without it, each layer with parameters a unit), sharded
//   over N ranks; one communication
//   channel (Gloo's thread, NCCL's stream) runs the collectives in the order issued:
//   a unit's all-gather of its parameters (link.all_gather_s of its bytes) before its
//   forward, issued `fsdp_prefetch` units ahead; before its backward again (reshard after
//   forward; not the last unit, which stays gathered), the previous units' prefetched;
//   after its backward its gradients' reduce-scatter, the training thread waiting for
//   the one before it (at most two in flight, as the engine). Compute waits for its
//   unit's all-gather; it is slowed while a collective runs as under ddp, and a
//   collective beside compute takes its time under load. The optimizer steps on 1/N of
//   the parameters. N = 1 is the one-device step.
// mp: N pipeline stages (contiguous layers, balanced by time), m micro-batches (GPipe):
//   (m + N - 1) slots of the slowest stage's micro-batch work, plus the activations and
//   their gradients sent across each boundary; bubble (N - 1) / (m + N - 1).
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "benchmarks/simulate/link.h"
#include "benchmarks/simulate/profile.h"
#include "engine/parallel/modes.h"

namespace dpb::sim {

struct SimOptions {
  ParallelMode mode = ParallelMode::ddp;
  double bucket_bytes = 25.0 * (1 << 20);
  double first_bucket_bytes = 1.0 * (1 << 20);
  double jitter = 0;     // relative standard deviation of a rank's compute per step
  // The slowest rank's lag measured at 2, 4, 8, … ranks (StepProfile::rank_lag); when
  // set, it replaces jitter. Between counts it is interpolated in log N; past the last,
  // extended as a normal distribution's median maximum grows.
  std::vector<reports::RankLag> rank_lag;
  int micro_batches = 4;  // mp
  // ddp at 1 rank: run DDP's reducer (its per-gradient cost; the all-reduces move
  // nothing), as PyTorch's 1-GPU DDP row does, instead of the plain one-device step.
  bool reducer_on_one_rank = false;
  // ddp at 2 ranks or more: compute takes this much longer (0.1: 10 %) because the ranks
  // share the machine (measured: a profile recorded with another rank computing beside it).
  double crowding = 0;
  // fsdp: units all-gathered ahead (--fsdp-prefetch), and whether a unit is gathered
  // again for its backward (--fsdp-reshard).
  int fsdp_prefetch = 1;
  bool fsdp_reshard = true;
};

struct BucketPlan {
  int64_t bytes = 0;
  std::vector<std::string> params;
  size_t ready_after_layer = 0;  // the layer whose backward completes it
};
// The Reducer's buckets for this profile.
std::vector<BucketPlan> bucket_plan(const StepProfile& p, double first_bucket_bytes, double bucket_bytes);

struct SimPoint {
  int world_size = 1;
  double step_s = 0, throughput = 0, efficiency = 0;
  double compute_s = 0;     // forward + backward as they ran (contention included)
  double copy_s = 0;        // fsdp: the copy-in and copy-out on the training stream (in compute_s)
  double comm_s = 0;        // communication kernels' total time
  double exposed_comm_s = 0;
  double overlap = 0;       // |comm ∩ compute| / |comm|; 0 without communication
  double bubble = 0;        // mp
  int buckets = 0;
  std::string algorithm;    // ring | tree (the largest bucket's)
  std::string critical_path;
  // fsdp: the collectives of one step in the order issued, as the engine records its own
  // (CollectiveRecord's kind and unit) and the bytes they move (the unit's parameters).
  struct Collective {
    std::string kind, unit;
    double bytes = 0;
  };
  std::vector<Collective> collectives;
};

struct Simulation {
  StepProfile profile;
  LinkModel link;
  SimOptions options;
  std::vector<SimPoint> points;
  nlohmann::json to_json() const;
};

SimPoint simulate_point(const StepProfile& p, const LinkModel& link, int ranks, const SimOptions& o);
// Every count in `ranks`; efficiency against the one-device step of the same profile.
Simulation simulate(const StepProfile& p, const LinkModel& link, const std::vector<int>& ranks, const SimOptions& o);

// The contention that makes the simulated step at `ranks` take `measured_step_s`
// (bisection over [0, 10]; the step grows with it). Throws dpb::Error when even 0 gives a
// longer step, or 10 a shorter one, naming both.
double fit_contention(const StepProfile& p, LinkModel link, int ranks, double measured_step_s, const SimOptions& o);

// E[max of n standard normals] (0 for n = 1).
double expected_max_normal(int n);
// The median of the largest of n standard normals: Phi^-1(0.5^(1/n)); 0 for n = 1.
double median_max_normal(int n);
// How much longer the ranks' compute takes at `ranks` because each step waits for the
// slowest (1: not at all): from o.rank_lag (the step longer by the lag) when set, else
// from o.jitter.
double rank_stretch(const StepProfile& p, const SimOptions& o, int ranks);

}  // namespace dpb::sim
