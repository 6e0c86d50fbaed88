#pragma once
// The measurements of docs/ARCHITECTURE.md §4, from what a run recorded (the step records and the
// timeline), into the report model's pieces: the measured window, busy fractions, a DDP
// rank's step, compute, communication and overlap, DataParallel's primary work, the
// pipeline's stages and bubble, the gradient buckets, and whether ranks read the same
// samples.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/parallel/data_parallel.h"
#include "engine/parallel/pipeline.h"
#include "engine/trace/breakdown.h"
#include "engine/trace/device_timeline.h"
#include "engine/trace/timeline.h"
#include "engine/parallel/step_record.h"
#include "reports/model.h"

namespace dpb::bench {

// The measured window: from the first measured step's wait for data to the last one's end.
struct Window {
  int64_t lo = 0, hi = 0;
  double seconds() const { return static_cast<double>(hi - lo) * 1e-9; }
};
Window measured_window(const std::vector<StepRecord>& measured);

// A device's busy fraction: the union of its non-data intervals on the timeline within
// the window, over the window.
double busy_fraction(int device, const Window& w);

// The temporal breakdown of a device over the window from the host timeline (on logical
// CPU devices it is their device time): compute and the optimizer as compute,
// collectives and DataParallel's reduction as communication, copies as memory. Idle
// causes are unknown (there are no launches to blame): null.
trace::Breakdown host_breakdown(int device, const Window& w);

// What one rank measured over the measured steps.
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
  // The breakdown of its device over the window (-1: not measured).
  double window_s = 0, idle_share = -1, compute_share = -1, comm_share = -1, memory_share = -1, overlap = -1;
  void set_breakdown(const trace::Breakdown& b);  // the fields above (-1 where b has none)
};
// Forward, loss and backward on `device` in each measured step (the timeline's union).
std::vector<double> compute_per_step(const std::vector<StepRecord>& measured, int device);
// `device`: this rank's device index on the timeline.
RankMetrics rank_metrics(const std::vector<StepRecord>& measured, const std::vector<StepRecord>& all, int device);

// Where a rank runs, read back from what the process got: its host, its device as the
// report shows it ("cuda:1", "cpu:1 (cores 2,3)"), and the hardware it computes on
// ("core 2", "core 3"; "gpu 0000:1b:00.0"). Two ranks on one host whose hardware
// overlaps take turns on it.
struct RankPlacement {
  std::string host, device;
  std::vector<std::string> hardware;
};
// Per rank: where it ran, and which samples each measured step read (StepRecord::data_hash).
struct RankRecord {
  RankPlacement placement;
  std::vector<uint64_t> data_hashes;
  std::vector<double> compute_steps_s;  // compute in each measured step
  // Per measured step, each bucket's all-reduce: queued, started on the communication
  // thread, finished there, waited for and seen done by the training thread (steady-clock
  // ns; wait 0: not recorded, as in reports from before it was).
  struct Collective {
    int64_t launch_ns = 0, start_ns = 0, end_ns = 0, done_ns = 0, wait_ns = 0;
  };
  std::vector<std::vector<Collective>> collectives;
};
// Per rank, the mean time a measured step's all-reduces waited for the last rank to start
// them: for each bucket, from the rank's own start until the last rank's, at most as long
// as its all-reduce ran. Empty unless every rank recorded every step on one host (steady
// clocks agree only within a host).
std::vector<double> wait_for_peers(const std::vector<RankRecord>& ranks);
// One rank's all-reduces, means per measured step summed over its buckets: the time they
// ran on the communication thread (waiting for peers and moving data), and the hand-offs
// between the threads: from the moment the communication thread was free to take the
// bucket (queued and it idle, or done with the bucket before) until it started, and
// from its end, or from when the training thread began waiting if later, until the
// training thread saw it done. Time queued behind an earlier bucket and time the
// training thread spent computing while a finished all-reduce waited for it are not
// hand-offs: counting them made the MLP's 0.05 ms of hand-offs look like 0.5 ms.
// Nothing recorded: nullopt.
struct CollectiveCosts {
  double collective_s = 0, handoff_s = 0;
};
std::optional<CollectiveCosts> collective_costs(const RankRecord& rank);
// Measured steps in which every rank read exactly the same samples (no DistributedSampler)
// among those every rank ran.
reports::SameData same_data(const std::vector<RankRecord>& ranks);

// The buckets of a step: bytes, parameters, and when each was ready, launched, ran (ms
// from the start of that step's last backward).
std::vector<reports::BucketStats> bucket_stats(const StepRecord& step);

// dp: the primary's own work (broadcast, scatter, gather, loss, gradient reduction,
// optimizer) against its replica's, per measured step: from the device timeline where one
// was collected (`device`: a GPU run's CUPTI records or timing events), else from the
// host spans (`host`; the device's own on logical CPU devices).
// `devices`: the devices' indices, the primary first; replica_s follows that order.
reports::DpStats dp_stats(const DataParallel& dp, bool bypass, bool replicate_input, const std::vector<int>& devices,
                          const Window& w, size_t measured_steps, const std::vector<trace::Interval>& host,
                          const trace::RankTimeline* device = nullptr);

// DataParallel's replicas wait for each other where the primary gathers the outputs and
// sums the gradients: per device (in `devices`' order), per measured step, the time from
// the end of its replica's forward (backward) to the latest device's end of the same
// phase, from the replica threads' host spans (their own time on logical CPU devices).
// Empty where a device recorded no such span.
std::vector<reports::Num> replica_waits(const std::vector<trace::Interval>& host, const std::vector<int>& devices,
                                        const Window& w, size_t measured_steps);

// The primary's split from a device timeline: a piece of its work is its replica's where
// it was launched inside its replica's span (CUPTI: the launch call's host time) or is
// that span (timing events time the spans themselves); the rest is the primary's alone.
// The host-only time is the window less every device's work and the data waits. Sets
// primary_only_s, primary_replica_s and host_only_s, per step, and replica_s (each other
// device's work is its replica's).
void dp_device_split(reports::DpStats& s, const trace::RankTimeline& device, const std::vector<trace::Interval>& host,
                     const std::vector<int>& devices, const Window& w, size_t measured_steps);

// mp: the schedule, the split, each stage's layers, parameters and idle share, and the
// bubble against (p-1)/(m+p-1).
struct PipelineMetrics {
  reports::PipelineStats pipeline;
  std::vector<reports::StageStats> stages;
};
PipelineMetrics pipeline_metrics(PipelineParallel& pp, const std::vector<StepRecord>& measured,
                                 const std::vector<double>& unit_costs, bool split_given,
                                 const std::vector<std::string>& device_ids, const std::vector<double>& busy);

}  // namespace dpb::bench
