#pragma once
// Runs that span ranks: starting them (the local launcher, like torchrun
// --nproc-per-node) or being one of them (started by our launcher, torchrun, srun or
// mpirun), and the collective benchmark on top.
#include <string>
#include <vector>

#include "benchmarks/dpbench/harness.h"
#include "engine/comm/process_group.h"
#include "engine/core/env.h"
#include "engine/train/trainer.h"

namespace dpb::bench {

// Where this process stands: the rank environment from flags or the launcher's
// variables (source "none" when neither says anything).
RankEnv rank_env(const BenchOptions& o);

// Whether this process should start the ranks itself: nothing launched it and the run
// needs more than one rank on this node (or spans nodes).
bool should_launch(const BenchOptions& o, const RankEnv& env);

// Starts o.gpus ranks of this same command on this node; returns the exit code (and
// says which rank died and how on stderr).
int launch_ranks(const BenchOptions& o, const std::vector<std::string>& argv);

// --bench=collectives as one rank (or as the only process): returns the exit code.
int run_collectives_rank(const BenchOptions& o, const std::vector<std::string>& argv);

// --mode=ddp as one rank: the training benchmark with this rank's process group; rank 0
// prints and writes the report. Returns the exit code.
int run_ddp_rank(const BenchOptions& o, const std::vector<std::string>& argv);

// What one rank measured over the measured steps (definitions as DESIGN §4).
struct RankMetrics {
  double step_median_s = 0, step_p90_s = 0;
  double data_wait_share = 0;
  double busy_fraction = 0;
  double comm_s = 0;             // bucket all-reduces per step (merged intervals)
  double overlap_ratio = 0;      // |comm ∩ backward| / |comm|
  double exposed_comm_s = 0;     // |comm \ backward| per step
  double exposed_share = 0;      // exposed / step time
  double samples = 0, steps = 0;
  // A/B: a forward + backward without the all-reduce (no_sync), and the optimizer step,
  // medians in seconds (0 when not measured).
  double step_no_comm_s = 0, optimizer_s = 0;
  double compute_s = 0;  // forward, loss and backward per step (timeline union; median over steps)
};
// Where a rank runs, read back from what the process got: its host, its device as the
// report shows it ("cuda:1", "cpu:1 (cores 2,3)"), and the hardware it computes on
// ("core 2", "core 3"; "gpu 0000:1b:00.0"). Two ranks on one host whose hardware
// overlaps take turns on it.
struct RankPlacement {
  std::string host, device;
  std::vector<std::string> hardware;
};
RankPlacement describe_placement(Device device);
// Per rank: where it ran, and which samples each measured step read (StepRecord::data_hash).
struct RankRecord {
  RankPlacement placement;
  std::vector<uint64_t> data_hashes;
};
// Every rank's record, on every rank.
std::vector<RankRecord> gather_rank_records(comm::ProcessGroup& pg, const std::vector<StepRecord>& measured,
                                            Device device);
// {compared_steps, identical_steps}: measured steps in which every rank read exactly the
// same samples (no DistributedSampler) among those every rank ran.
nlohmann::json same_data_json(const std::vector<RankRecord>& ranks);
// `device`: this rank's device index on the timeline (its busy fraction comes from there).
RankMetrics rank_metrics(const std::vector<StepRecord>& measured, const std::vector<StepRecord>& all, int device);
// Every rank's string, on every rank (two all-gathers: the lengths, then the bytes).
std::vector<std::string> gather_strings(comm::ProcessGroup& pg, const std::string& mine, Device device);
// Every rank's metrics, on every rank (one all-gather).
std::vector<RankMetrics> gather_metrics(comm::ProcessGroup& pg, const RankMetrics& mine, Device device);
// The buckets of a step: bytes, parameters, and when each was ready, launched, ran (ms
// from the start of that step's last backward).
nlohmann::json buckets_json(const StepRecord& step);

}  // namespace dpb::bench
