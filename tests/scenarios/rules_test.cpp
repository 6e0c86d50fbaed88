// Rules on crafted reports: the conditions around each threshold, and the cases where
// one problem must not be blamed on another.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "diagnostics/dpdoctor/doctor.h"
#include "engine/core/error.h"
#include "tests/support/schemas.h"
#include "reports/schemas.h"

namespace dpb::doctor {
namespace {

// A minimal healthy dp report on two devices.
reports::RunReport base_report() {
  reports::RunReport r;
  auto& c = r.config;
  c.mode = ParallelMode::dp;
  c.model = "mlp";
  c.dataset = "synthetic";
  c.devices = DeviceKind::cpu;
  c.gpus = {2};
  c.gpus_requested = 2;
  c.visible_devices = 64;
  c.batch_per_device = 32;
  c.global_batch = 64;
  c.device_list = {"cpu:0", "cpu:1"};
  c.optimizer.lr = 0.01;
  c.lr_effective = 0.01;
  reports::RunMetrics run;
  run.world_size = 2;
  run.batch_per_device = 32;
  run.global_batch = 64;
  run.steps = 10;
  run.step_time_s.median = 0.01;
  run.throughput_samples_per_s = 6400.0;
  run.data_wait_share = 0.05;
  run.devices = {{"cpu:0", 320, 0.9, 0, {}, {}, {}}, {"cpu:1", 320, 0.88, 0, {}, {}, {}}};
  reports::DpStats dp;
  dp.scatter_calls = 10;
  dp.last_chunks = {32, 32};
  dp.primary_only_s = 0.001;
  dp.primary_replica_s = 0.007;
  run.dp = dp;
  r.runs.push_back(run);
  return r;
}

reports::RunMetrics& run0(reports::RunReport& r) { return r.runs[0]; }

// Every diagnosis the tests make is also checked against dpdoctor.findings/1, and every
// report they diagnose survives its own JSON (what dpdoctor REPORT reads).
std::vector<std::string> ids(const reports::RunReport& report) {
  const auto again = reports::RunReport::from_json(report.to_json(), "test report");
  const auto d = diagnose(again);
  test::expect_fits(reports::findings_schema(), d.to_json(), "the diagnosis");
  std::vector<std::string> out;
  for (const auto& f : d.findings) out.push_back(f.id);
  return out;
}

// The warnings and errors only (info is advice).
std::vector<std::string> problems(const reports::RunReport& report) {
  std::vector<std::string> out;
  for (const auto& f : diagnose(report).findings)
    if (f.severity != Severity::info) out.push_back(f.id);
  return out;
}

const Finding* find(const Diagnosis& d, const std::string& id) {
  for (const auto& f : d.findings)
    if (f.id == id) return &f;
  return nullptr;
}

TEST(DoctorRules, HealthyReportIsHealthyAndSaysWhy) {
  const auto d = diagnose(base_report());
  EXPECT_TRUE(d.healthy);
  EXPECT_TRUE(d.findings.empty());
  EXPECT_EQ(d.to_json()["verdict"], "healthy");
  std::ostringstream text;
  print_diagnosis(d, text);
  EXPECT_NE(text.str().find("healthy: dp mlp on 2 device(s)"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("cpu:1 88% busy"), std::string::npos) << text.str();
}

TEST(DoctorRules, UnevenScatterNeedsAnUnevenSplit) {
  auto r = base_report();
  run0(r).dp->last_chunks = {30, 26};  // 26 >= 0.8 x 30: even enough
  EXPECT_TRUE(ids(r).empty());
  run0(r).dp->last_chunks = {30, 20};
  EXPECT_EQ(ids(r), std::vector<std::string>{"uneven-scatter"});
}

TEST(DoctorRules, BypassNeedsIdleReplicasNotJustZeroScatterCalls) {
  auto r = base_report();
  run0(r).dp->scatter_calls = 0;  // the replicated-input path: replicas did work
  run0(r).devices[1].samples = 640;
  run0(r).devices[0].samples = 640;
  EXPECT_EQ(ids(r), std::vector<std::string>{"non-tensor-input-replicated"});
  run0(r).devices[1].samples = 0;
  run0(r).devices[0].samples = 640;
  run0(r).devices[1].busy_fraction = 0.0;
  EXPECT_EQ(ids(r), std::vector<std::string>{"forward-bypasses-scatter"});
}

TEST(DoctorRules, InputBoundThreshold) {
  auto r = base_report();
  run0(r).data_wait_share = 0.08;
  EXPECT_TRUE(ids(r).empty());
  // A quarter of the time: advice, which the budget charges the idle time to.
  run0(r).data_wait_share = 0.25;
  EXPECT_EQ(ids(r), std::vector<std::string>{"input-bound"});
  EXPECT_TRUE(problems(r).empty());
  EXPECT_TRUE(diagnose(r).healthy);
  run0(r).data_wait_share = 0.45;
  EXPECT_EQ(problems(r), std::vector<std::string>{"input-bound"});
}

reports::RankStats rank_stats(int rank, const std::string& core, double compute) {
  reports::RankStats s;
  s.rank = rank;
  s.host = "n1";
  s.device = "cpu:" + std::to_string(rank) + " (cores " + core + ")";
  s.hardware = {"core " + core};
  s.compute_s = compute;
  s.comm_s = 0.002;
  s.step_time_median_s = 0.01;
  return s;
}

reports::RunReport ddp_report(double compute0, double compute1, double exposed) {
  auto r = base_report();
  r.config.mode = ParallelMode::ddp;
  auto& run = run0(r);
  run.dp.reset();
  run.ranks = std::vector<reports::RankStats>{rank_stats(0, "0", compute0), rank_stats(1, "1", compute1)};
  run.overlap = reports::OverlapStats{0.5, 0.001, exposed, std::nullopt};
  run.data = reports::SameData{8, 0};
  return r;
}

TEST(DoctorRules, AStragglerIsNotBlamedOnTheNetwork) {
  EXPECT_TRUE(ids(ddp_report(0.006, 0.0065, 0.01)).empty());
  EXPECT_TRUE(problems(ddp_report(0.006, 0.0065, 0.1)).empty());
  EXPECT_EQ(ids(ddp_report(0.006, 0.0065, 0.5)), std::vector<std::string>{"exposed-communication"});
  // Rank 1 computes 3x longer: the exposed wait is the straggler's doing.
  EXPECT_EQ(ids(ddp_report(0.003, 0.009, 0.6)), std::vector<std::string>{"straggler-rank"});
}

TEST(DoctorRules, SharedDevicesAndSharedData) {
  auto r = ddp_report(0.006, 0.006, 0.01);
  auto& ranks = *run0(r).ranks;
  ranks[1].hardware = {"core 0"};
  EXPECT_EQ(ids(r), std::vector<std::string>{"ranks-share-device"});
  ranks[1].host = "n2";  // the same GPU index or core on another node is another device
  EXPECT_TRUE(ids(r).empty());
  ranks[1].host = "n1";
  ranks[1].hardware = {"core 1", "core 2"};  // overlapping core sets share a core
  ranks[0].hardware = {"core 0", "core 1"};
  EXPECT_EQ(ids(r), std::vector<std::string>{"ranks-share-device"});
  r = ddp_report(0.006, 0.006, 0.01);
  run0(r).data->identical_steps = 8;
  EXPECT_EQ(ids(r), std::vector<std::string>{"missing-distributed-sampler"});
  run0(r).data->identical_steps = 3;  // a coincidence or two is not a missing sampler
  EXPECT_TRUE(ids(r).empty());
}

TEST(DoctorRules, LearningRateAdvisoryOnlyWhenNotScaled) {
  auto r = ddp_report(0.006, 0.006, 0.01);
  run0(r).global_batch = 1024;
  auto d = diagnose(r);
  ASSERT_EQ(d.findings.size(), 1u);
  EXPECT_EQ(d.findings[0].id, "lr-not-scaled");
  EXPECT_EQ(d.findings[0].severity, Severity::info);
  EXPECT_TRUE(d.healthy);  // advisory
  r.config.lr_effective = 0.04;
  EXPECT_TRUE(ids(r).empty());
}

TEST(DoctorRules, SmallBatchBatchNormCountsWhatOneBatchNormSees) {
  auto r = ddp_report(0.006, 0.006, 0.01);
  r.config.batchnorm = true;
  run0(r).batch_per_device = 4;
  EXPECT_EQ(ids(r), std::vector<std::string>{"small-batch-batchnorm"});
  r.config.sync_bn = true;  // 2 ranks x 4 = 8: still small
  EXPECT_EQ(ids(r), std::vector<std::string>{"small-batch-batchnorm"});
  run0(r).batch_per_device = 8;  // 16 across ranks
  EXPECT_TRUE(ids(r).empty());
}

reports::RunReport mp_report(std::vector<double> idle, std::string split_by, std::vector<int64_t> micro) {
  auto r = base_report();
  r.config.mode = ParallelMode::pipeline;
  auto& run = run0(r);
  run.dp.reset();
  run.stages.emplace();
  for (size_t s = 0; s < idle.size(); ++s)
    run.stages->push_back({static_cast<int>(s), "cpu:" + std::to_string(s), {"fc" + std::to_string(s)}, 0,
                           1.0 - idle[s], idle[s]});
  reports::PipelineStats p;
  if (split_by == "measured time")
    p.unit_costs = std::vector<reports::UnitCost>{{"fc0", 0.009}, {"fc1", 0.001}};
  // Two stages, back to back (naive) or overlapping (pipelined).
  p.last_step_events = micro.size() == 1 ? std::vector<reports::PipelineEventStats>{{0, 0, 'F', 0.0, 0.004},
                                                                                   {1, 0, 'F', 0.004, 0.008}}
                                         : std::vector<reports::PipelineEventStats>{{0, 0, 'F', 0.0, 0.006},
                                                                                   {1, 0, 'F', 0.002, 0.008}};
  p.schedule = micro.size() == 1 ? PipelineSchedule::naive : PipelineSchedule::gpipe;
  p.micro_batches = static_cast<int>(micro.size());
  p.micro_batch_sizes = micro;
  p.split_by = split_by;
  p.bubble_measured = 0.3;
  p.bubble_theory = 0.2;
  run.pipeline = p;
  return r;
}

TEST(DoctorRules, PipelineRules) {
  // Stages idle a fifth of the step: the bubble, said as advice (it claims that time).
  EXPECT_EQ(ids(mp_report({0.2, 0.24}, "measured time", {16, 16, 16, 16})), std::vector<std::string>{"pipeline-bubble"});
  EXPECT_TRUE(problems(mp_report({0.2, 0.24}, "measured time", {16, 16, 16, 16})).empty());
  EXPECT_EQ(ids(mp_report({0.5, 0.5}, "measured time", {64})), std::vector<std::string>{"naive-model-parallel"});
  EXPECT_EQ(ids(mp_report({0.1, 0.7}, "--split", {16, 16, 16, 16})), std::vector<std::string>{"unbalanced-pipeline"});
  // The measured split is already the best: an inherent imbalance is information, while
  // every stage is busy three quarters of the step...
  auto d = diagnose(mp_report({0.0, 0.24}, "measured time", {16, 16, 16, 16}));
  ASSERT_EQ(d.findings.size(), 1u);
  EXPECT_EQ(d.findings[0].severity, Severity::info);
  EXPECT_NE(d.findings[0].explanation.find("fc0"), std::string::npos);
  // ...and a warning when a stage idles more: a device wasted, whatever the split.
  d = diagnose(mp_report({0.1, 0.7}, "measured time", {16, 16, 16, 16}));
  ASSERT_EQ(d.findings.size(), 1u);
  EXPECT_EQ(d.findings[0].severity, Severity::warning);
  // Balanced stages that both idle a third of the step: the bubble.
  EXPECT_EQ(ids(mp_report({0.33, 0.36}, "measured time", {16, 16})), std::vector<std::string>{"pipeline-bubble"});
}

TEST(DoctorRules, FewerDevicesThanRequested) {
  auto r = base_report();
  r.config.gpus_requested = 4;
  r.config.visible_devices = 2;
  EXPECT_EQ(ids(r), std::vector<std::string>{"fewer-devices-than-requested"});
}

// Per device: its share of the window idle, and communication not under compute.
std::vector<trace::Breakdown> breakdowns(const std::vector<std::pair<double, double>>& idle_comm, bool ranks) {
  std::vector<trace::Breakdown> out;
  for (size_t i = 0; i < idle_comm.size(); ++i) {
    trace::Breakdown b;
    if (ranks) b.rank = static_cast<int>(i);
    b.device = ranks ? "cpu@rank" + std::to_string(i) : "cpu:" + std::to_string(i);
    b.window_s = 1.0;
    b.idle_share = idle_comm[i].first;
    b.comm_share = idle_comm[i].second;
    b.compute_share = 1 - idle_comm[i].first - idle_comm[i].second;
    b.memory_share = 0.0;
    out.push_back(b);
  }
  return out;
}

// DataParallel gathers and sums only when every replica is done: a device whose replica
// computes consistently longer is a straggler (a warning that claims the others' wait);
// replicas that take turns being late are info that still claims the measured waits, so
// the budget explains the idle time; even replicas with small waits say nothing.
TEST(DoctorRules, DataParallelWaitsForItsSlowestReplica) {
  auto r = base_report();
  run0(r).step_time_s.median = 0.4;
  run0(r).breakdown = breakdowns({{0.02, 0.04}, {0.30, 0.0}}, false);
  auto& dp = *run0(r).dp;
  dp.primary_only_s = 0.03;
  // The primary's replica 30% slower than the other's; the other waits 0.09 s a step.
  dp.primary_replica_s = 0.39;
  dp.replica_s = {0.39, 0.30};
  dp.replica_waited_s = {0.0, 0.09};
  auto d = diagnose(reports::RunReport::from_json(r.to_json(), "test report"));
  const Finding* f = find(d, "straggler-rank");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, Severity::warning);
  EXPECT_EQ(f->evidence["slow_device"], "cpu:0");
  ASSERT_EQ(f->explains.size(), 2u);
  EXPECT_NEAR(f->explains[1].share, 0.09 / 0.4, 1e-9);
  EXPECT_NEAR(f->explains[0].share, 0.0, 1e-9);
  EXPECT_EQ(find(d, "unexplained-idle"), nullptr);
  // Even replicas that wait for each other in turns: info, with the measured waits.
  dp.primary_replica_s = 0.30;
  dp.replica_s = {0.30, 0.30};
  dp.replica_waited_s = {0.03, 0.04};
  run0(r).breakdown = breakdowns({{0.08, 0.04}, {0.18, 0.0}}, false);
  d = diagnose(r);
  f = find(d, "straggler-rank");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, Severity::info);
  EXPECT_NEAR(f->explains[0].share, 0.03 / 0.4, 1e-9);
  EXPECT_NEAR(f->explains[1].share, 0.04 / 0.4, 1e-9);
  // Waits beyond a device's idle time are not claimed past it.
  run0(r).breakdown = breakdowns({{0.05, 0.04}, {0.18, 0.0}}, false);
  EXPECT_NEAR(find(diagnose(r), "straggler-rank")->explains[0].share, 0.05, 1e-9);
  // Under 2% of the step waited: nothing to say.
  dp.replica_waited_s = {0.004, 0.006};
  EXPECT_EQ(find(diagnose(r), "straggler-rank"), nullptr);
  // A report without the replicas' times (older reports): the rule does not guess.
  dp.replica_s.clear();
  dp.replica_waited_s.clear();
  EXPECT_EQ(find(diagnose(r), "straggler-rank"), nullptr);
}

// On logical CPU devices the rank timeline is the device timeline: a fifth of the step
// exposed there is a finding, with what the A/B says it costs and how much of it waits for
// the slower rank; the A/B alone counts only beside a tenth of the step on the timeline
// (it moves by points from run to run on a shared machine).
TEST(DoctorRules, OnCpuRanksTheTimelineAndTheAbJudgeCommunication) {
  auto r = ddp_report(0.0058, 0.006, 0.22);
  auto& run = run0(r);
  run.step_time_s.median = 0.0079;
  run.overlap->ab = reports::OverlapAB{0.0079, 0.0040, 0.0001, 0.0038, 0.49};
  run.breakdown = breakdowns({{0.01, 0.22}, {0.01, 0.20}}, true);
  (*run.ranks)[0].wait_for_peers_s = 0.0006;
  (*run.ranks)[1].wait_for_peers_s = 0.0002;
  auto d = diagnose(r);
  ASSERT_EQ(d.findings.size(), 1u);
  const auto& f = d.findings[0];
  EXPECT_EQ(f.id, "exposed-communication");
  EXPECT_EQ(d.primary, "exposed-communication");
  EXPECT_NEAR(f.evidence["wait_for_slower_rank_s"].get<double>(), 0.0006, 1e-12);
  EXPECT_NEAR(f.evidence["exposed_share_ab"].get<double>(), 0.49, 1e-12);
  EXPECT_NE(f.explanation.find("waiting for the slower rank"), std::string::npos) << f.explanation;
  EXPECT_NE(f.explanation.find("compute also slows down"), std::string::npos) << f.explanation;
  // The budget: exposed communication accounts for each rank's exposed share.
  ASSERT_EQ(d.budget.size(), 2u);
  EXPECT_NEAR(d.budget[0].explained.at(0).second, 0.22, 1e-12);
  EXPECT_NEAR(d.budget[0].unexplained_share, 0.01, 1e-12);
  // The A/B alone, with little exposed on the timeline: noise, no warning; what the
  // timeline shows exposed is said as advice, with the all-reduce's cost and its wait,
  // and the budget charges it to communication.
  run.overlap->exposed_share = 0.08;
  run.overlap->ab->exposed_share = 0.32;
  run.breakdown = breakdowns({{0.01, 0.08}, {0.01, 0.06}}, true);
  (*run.ranks)[0].allreduce_s = 0.0009;
  (*run.ranks)[1].allreduce_s = 0.0005;
  (*run.ranks)[0].allreduce_handoff_s = 0.00002;
  (*run.ranks)[1].allreduce_handoff_s = 0.00002;
  EXPECT_TRUE(problems(r).empty());
  const auto advice = diagnose(r);
  EXPECT_TRUE(advice.healthy);
  const Finding* info = find(advice, "exposed-communication");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->severity, Severity::info);
  EXPECT_NE(info->title.find("all-reduce takes 900.0 us a step, 600.0 us of it waiting for the slower rank"),
            std::string::npos)
      << info->title;
  EXPECT_NEAR(info->evidence["allreduce_s"].get<double>(), 0.0009, 1e-12);
  EXPECT_NEAR(info->evidence["transfer_s"].get<double>(), 0.0003, 1e-12);
  ASSERT_EQ(advice.budget.size(), 2u);
  EXPECT_EQ(advice.budget[1].explained.at(0).first, "exposed-communication");
  EXPECT_NEAR(advice.budget[1].explained.at(0).second, 0.06, 1e-12);
  EXPECT_NEAR(advice.budget[1].unexplained_share, 0.01, 1e-12);
  // Under a fiftieth of the step: nothing to say.
  run.overlap->exposed_share = 0.015;
  EXPECT_TRUE(ids(r).empty());
  run.overlap->exposed_share = 0.12;
  run.overlap->ab->exposed_share = 0.35;
  EXPECT_EQ(ids(r), std::vector<std::string>{"exposed-communication"});
}

// Never healthy while a sweep loses 15% of its scaling efficiency without a warning that
// says where it went.
TEST(DoctorRules, ALostScalingEfficiencyIsNeverHealthy) {
  auto r = ddp_report(0.006, 0.0062, 0.05);
  run0(r).breakdown = breakdowns({{0.05, 0.05}, {0.05, 0.05}}, true);
  run0(r).scaling_efficiency = 0.9;
  EXPECT_TRUE(diagnose(r).healthy);
  run0(r).scaling_efficiency = 0.7;
  const auto d = diagnose(r);
  EXPECT_FALSE(d.healthy);
  // Exposed communication, 5% of each window, is advice: it explains too little of what
  // was lost to be the answer.
  EXPECT_EQ(problems(r), std::vector<std::string>{"unexplained-idle"});
  const Finding* lost = find(d, "unexplained-idle");
  ASSERT_NE(lost, nullptr);
  EXPECT_NE(lost->title.find("scaling efficiency is 0.70"), std::string::npos) << lost->title;
  ASSERT_NE(find(d, "exposed-communication"), nullptr);
  EXPECT_EQ(find(d, "exposed-communication")->severity, Severity::info);
  // Where a finding explains the loss, that finding is the answer.
  run0(r).overlap->exposed_share = 0.3;
  EXPECT_EQ(ids(r), std::vector<std::string>{"exposed-communication"});
}

// A sweep with its one-rank run: 1 - E(2) split per rank into compute slower than alone,
// waiting for the slower rank, exposed communication and idle time, the parts adding to
// 1 - E within 2 points. One device 10 ms a step (compute 99%, idle 1%); two, 12.5 ms (E
// = 0.8): rank 0 computes 85% of it (10.6 ms against 9.9), waits 1 ms of its 12% exposed
// communication for rank 1, idles 3%.
TEST(DoctorRules, ASweepSaysWhereItsEfficiencyWent) {
  auto r = ddp_report(0.0106, 0.0106, 0.12);
  run0(r).step_time_s.median = 0.0125;
  run0(r).breakdown = breakdowns({{0.03, 0.12}, {0.03, 0.12}}, true);
  for (auto& rs : *run0(r).ranks) rs.wait_for_peers_s = 0.001;
  reports::RunMetrics one = run0(r);
  one.world_size = 1;
  one.step_time_s.median = 0.010;
  one.scaling_efficiency = 1.0;
  one.breakdown = breakdowns({{0.01, 0.0}}, true);
  one.ranks.reset();
  r.runs.insert(r.runs.begin(), one);
  r.runs.back().scaling_efficiency = 0.8;
  const auto d = diagnose(r);
  const Finding* f = find(d, "scaling-efficiency");
  ASSERT_NE(f, nullptr) << d.to_json().dump(2);
  EXPECT_EQ(f->severity, Severity::warning);
  EXPECT_EQ(find(d, "unexplained-idle"), nullptr);  // it says where the efficiency went
  // Each cause only several ranks pay also says what E(N) would be without it, the
  // one-rank step unchanged.
  int priced = 0;
  for (const auto& g : d.findings) {
    if (!g.predicted || !g.predicted->scaling_efficiency) continue;
    ++priced;
    EXPECT_NEAR(*g.predicted->scaling_efficiency,
                std::min(1.0, 0.8 * *g.predicted->measured_step_time_s / *g.predicted->step_time_s), 1e-3)
        << g.id;
    EXPECT_GT(*g.predicted->scaling_efficiency, 0.8) << g.id;
    EXPECT_NE(g.predicted->summary().find("E(N) 0.80 -> "), std::string::npos) << g.predicted->summary();
  }
  EXPECT_GE(priced, 1) << d.to_json().dump(2);
  for (const auto& row : f->evidence["per_rank"]) {
    const double parts = row["compute slower than alone"].get<double>() + row["waiting for the slower rank"].get<double>() +
                         row["exposed communication"].get<double>() + row["idle"].get<double>();
    EXPECT_NEAR(parts, 0.2, 0.02) << row;
    EXPECT_NEAR(row["compute slower than alone"].get<double>(), 0.85 - 0.99 * 0.8, 1e-3) << row;
    EXPECT_NEAR(row["waiting for the slower rank"].get<double>(), 0.08, 1e-3) << row;
    EXPECT_NEAR(row["one_rank_compute_per_step_s"].get<double>(), 0.0099, 1e-6) << row;
  }
  // Waits not measured: the wait is unknown (null), not 0, and stays inside the exposed
  // communication.
  for (auto& rs : *r.runs.back().ranks) rs.wait_for_peers_s.reset();
  const auto without_waits = diagnose(r);
  const Finding* unknown = find(without_waits, "scaling-efficiency");
  ASSERT_NE(unknown, nullptr);
  for (const auto& row : unknown->evidence["per_rank"]) {
    EXPECT_TRUE(row["waiting for the slower rank"].is_null()) << row;
    EXPECT_NEAR(row["exposed communication"].get<double>(), 0.12, 1e-3) << row;
  }
  // A sweep that keeps 97% of its efficiency: nothing to say.
  r.runs.back().scaling_efficiency = 0.97;
  EXPECT_EQ(find(diagnose(r), "scaling-efficiency"), nullptr);
}

// DataParallel on two CPU devices whose replica idles a third of the window: the loop's
// wait for data and DataParallel's serial work explain it; the larger is the warning,
// nothing is "unexplained".
// The main job's sweep (scripts/run.sh: LeNet, DDP on 1 and 2 CPU devices, one epoch of
// Fashion-MNIST), as it ran: healthy, and what the largest run loses is charged to what
// it lost it to, the all-reduce with its cost and its wait for the slower rank.
TEST(DoctorRules, TheMainJobsSweepSaysWhatCommunicationCosts) {
  const auto r = reports::RunReport::read(std::string(DPB_SOURCE_DIR) + "/tests/data/reports/lenet-ddp-sweep-fashion-mnist.json");
  const auto d = diagnose(r);
  EXPECT_TRUE(d.healthy);
  const Finding* comm = find(d, "exposed-communication");
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(comm->severity, Severity::info);
  const auto& largest = r.runs.back();
  ASSERT_TRUE(largest.ranks && largest.ranks->at(0).allreduce_s && largest.ranks->at(0).wait_for_peers_s);
  // Evidence is quoted to four significant figures.
  const double allreduce = *largest.ranks->at(0).allreduce_s, wait = *largest.ranks->at(0).wait_for_peers_s;
  EXPECT_NEAR(comm->evidence["allreduce_s"].get<double>(), allreduce, 1e-3 * allreduce);
  EXPECT_NEAR(comm->evidence["wait_for_slower_rank_s"].get<double>(), wait, 1e-3 * wait);
  EXPECT_NE(comm->title.find("waiting for the slower rank"), std::string::npos) << comm->title;
  ASSERT_EQ(d.budget.size(), 2u);
  for (const auto& b : d.budget) {
    ASSERT_FALSE(b.explained.empty());
    EXPECT_EQ(b.explained[0].first, "exposed-communication");
    EXPECT_GT(b.explained[0].second, 0.02);
    EXPECT_LT(b.unexplained_share, 0.05);
  }
}

// Reports as dpbench wrote them (tests/data/reports, 2-vCPU Xeon). FSDP: the MLP with
// prefetch off waits for its all-gathers (every rank's waits charged to them, the
// evidence its own), gpt2-tiny over 2 ranks with prefetch hides them, and over 8 ranks
// gathers more at once than a rank keeps sharded.
reports::RunReport saved_report(const std::string& name) {
  return reports::RunReport::read(std::string(DPB_SOURCE_DIR) + "/tests/data/reports/" + name);
}

TEST(DoctorRules, ExposedAllGatherWhereRanksWaitForParameters) {
  const auto r = saved_report("fsdp-mlp-prefetch0.json");
  ASSERT_TRUE(r.runs.back().fsdp);
  const auto& fs = *r.runs.back().fsdp;
  EXPECT_EQ(fs.prefetch, 0);
  const auto d = diagnose(r);
  const auto all = ids(r);  // also: the diagnosis fits its schema
  EXPECT_NE(std::find(all.begin(), all.end(), "exposed-allgather"), all.end());
  const Finding* f = find(d, "exposed-allgather");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, Severity::warning);
  const double waited = *fs.collectives.at(0).waited_s, step = *r.runs.back().step_time_s.median;
  EXPECT_NEAR(f->evidence["allgather_waited_s"].get<double>(), waited, 1e-3 * waited);
  EXPECT_NEAR(f->evidence["share"].get<double>(), waited / step, 1e-3);
  EXPECT_NE(f->explanation.find("Prefetch is off"), std::string::npos) << f->explanation;
  EXPECT_NE(f->fix.find("--fsdp-prefetch=1"), std::string::npos) << f->fix;
  ASSERT_EQ(f->explains.size(), 2u);  // both ranks, each by its own waits
  for (const auto& c : f->explains) {
    const double own = *fs.ranks.at(static_cast<size_t>(*c.rank)).allgather_waited_s / step;
    EXPECT_NEAR(c.share, own, 1e-9);
  }
  EXPECT_EQ(find(d, "fsdp-unit-too-large"), nullptr);
  // Not above the advice threshold: nothing said.
  auto hidden = r;
  auto& rk = *hidden.runs.back().fsdp;
  rk.collectives.at(0).waited_s = 0.01 * step;
  for (auto& m : rk.ranks) m.allgather_waited_s = 0.01 * step;
  EXPECT_EQ(find(diagnose(hidden), "exposed-allgather"), nullptr);
}

TEST(DoctorRules, FsdpWithPrefetchOverTwoRanksIsHealthy) {
  const auto r = saved_report("fsdp-gpt2-tiny-2ranks.json");
  ASSERT_TRUE(r.runs.back().fsdp);
  EXPECT_EQ(r.runs.back().fsdp->prefetch, 1);
  const auto d = diagnose(r);
  EXPECT_TRUE(d.healthy);
  EXPECT_TRUE(problems(r).empty());
  EXPECT_EQ(find(d, "fsdp-unit-too-large"), nullptr);
  const Finding* f = find(d, "exposed-allgather");
  EXPECT_TRUE(f == nullptr || f->severity == Severity::info);
}

// Tensor-parallel reports as dpbench wrote them (tests/data/reports, 2-vCPU Xeon, gpt2-tiny
// over 2 ranks, batch 8): its all-reduces over Gloo's loopback TCP wait a third of the
// step at under 1 GB/s; through shared memory a few percent (at most advice). A link of
// NVLink's class would not be slow, and another mode is not tensor parallelism.
TEST(DoctorRules, TpAcrossSlowLinkWhereTensorParallelAllReducesWait) {
  const auto r = saved_report("tp-gpt2-tiny-tcp.json");
  ASSERT_TRUE(r.runs.back().tp);
  const auto& tp = *r.runs.back().tp;
  const auto d = diagnose(r);
  const auto all = ids(r);
  EXPECT_NE(std::find(all.begin(), all.end(), "tp-across-slow-link"), all.end());
  const Finding* f = find(d, "tp-across-slow-link");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, Severity::warning);
  const auto& ar = tp.collectives.at(0);
  ASSERT_EQ(ar.kind, "all-reduce");
  EXPECT_EQ(ar.count, 10);
  const double waited = *ar.waited_s, step = *r.runs.back().step_time_s.median;
  EXPECT_NEAR(f->evidence["allreduce_waited_s"].get<double>(), waited, 1e-3 * waited);
  EXPECT_NEAR(f->evidence["share"].get<double>(), waited / step, 1e-3);
  const double busbw = static_cast<double>(ar.bytes) * 2 * (2 - 1) / 2 / *ar.seconds / 1e9;
  EXPECT_NEAR(f->evidence["bus_bandwidth_gbps"].get<double>(), busbw, 1e-3 * busbw);
  EXPECT_LT(busbw, 50.0);
  EXPECT_NE(f->fix.find("NVLink"), std::string::npos) << f->fix;
  EXPECT_EQ(find(d, "missing-distributed-sampler"), nullptr);  // tensor-parallel ranks share the batch by design
  ASSERT_EQ(f->explains.size(), 2u);

  const auto shm = diagnose(saved_report("tp-gpt2-tiny-shm.json"));
  const Finding* g = find(shm, "tp-across-slow-link");
  EXPECT_TRUE(g == nullptr || g->severity == Severity::info);
  // The same waits over a link of NVLink's class: not slow.
  auto fast = r;
  fast.runs.back().tp->collectives.at(0).seconds = static_cast<double>(ar.bytes) / 100e9;
  EXPECT_EQ(find(diagnose(fast), "tp-across-slow-link"), nullptr);
  // Waits below the advice threshold: nothing said.
  auto hidden = r;
  hidden.runs.back().tp->collectives.at(0).waited_s = 0.01 * step;
  EXPECT_EQ(find(diagnose(hidden), "tp-across-slow-link"), nullptr);
  // Not a tensor-parallel run.
  auto other = r;
  other.config.mode = ParallelMode::ddp;
  EXPECT_EQ(find(diagnose(other), "tp-across-slow-link"), nullptr);
}

TEST(DoctorRules, FsdpUnitTooLargeWhenGatheringOutweighsTheShards) {
  const auto r = saved_report("fsdp-gpt2-tiny-8ranks-2cores.json");
  const auto& fs = *r.runs.back().fsdp;
  int64_t state = 0, gathered = 0;
  for (const auto& m : fs.ranks) {
    state = std::max(state, m.shard_parameter_bytes + m.shard_gradient_bytes + m.optimizer_state_bytes);
    gathered = std::max(gathered, m.peak_gathered_parameter_bytes);
  }
  ASSERT_GE(gathered, state);
  const auto d = diagnose(r);
  const auto all = ids(r);
  EXPECT_NE(std::find(all.begin(), all.end(), "fsdp-unit-too-large"), all.end());
  const Finding* f = find(d, "fsdp-unit-too-large");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->evidence["peak_gathered_parameter_bytes"].get<int64_t>(), gathered);
  EXPECT_EQ(f->evidence["sharded_state_bytes"].get<int64_t>(), state);
  EXPECT_EQ(f->evidence["largest_unit_bytes"].get<int64_t>(), fs.largest_unit_bytes);
  // Eight ranks on two cores: said first, as the error it is.
  ASSERT_FALSE(d.findings.empty());
  EXPECT_EQ(d.findings.front().id, "ranks-share-device");
  // With the shards larger than what was gathered, nothing to say.
  auto fewer = r;
  for (auto& m : fewer.runs.back().fsdp->ranks) m.optimizer_state_bytes += gathered;
  EXPECT_EQ(find(diagnose(fewer), "fsdp-unit-too-large"), nullptr);
}

TEST(DoctorRules, DataParallelIdleIsExplainedNotUnexplained) {
  auto r = base_report();
  auto& run = run0(r);
  run.devices = {{"cpu:0", 320, 0.79, 0, {}, {}, {}}, {"cpu:1", 320, 0.69, 0, {}, {}, {}}};
  run.data_wait_share = 0.20;
  run.step_time_s.median = 0.0032;
  run.dp->primary_only_s = 0.00016;
  run.dp->host_only_s = 0.0002;
  run.breakdown = breakdowns({{0.21, 0.0}, {0.31, 0.0}}, false);
  const auto d = diagnose(r);
  EXPECT_FALSE(d.healthy);
  EXPECT_EQ(d.primary, "input-bound");
  for (const auto& f : d.findings) EXPECT_NE(f.id, "unexplained-idle");
  ASSERT_EQ(d.budget.size(), 2u);
  EXPECT_LT(d.budget[1].unexplained_share, 0.25);
}

TEST(DoctorRules, NotAReportIsAnError) {
  EXPECT_THROW(reports::RunReport::from_json(nlohmann::json{{"schema", "other"}}, "x"), Error);
}

// Each rule with a model of its fix prices it by that model, from the run's own figures.
TEST(DoctorRules, FixesArePricedByTheirOwnModels) {
  // The loop waits 45% of the time with no workers: the loader makes a batch in the wait
  // (a 10 ms step, 8.18 ms of wait); ceil(1.2 x 8.18 / 10) = 1 worker makes one each step.
  auto r = base_report();
  run0(r).data_wait_share = 0.45;
  r.config.workers = 0;
  auto d = diagnose(r);
  const Finding* f = find(d, "input-bound");
  ASSERT_NE(f, nullptr);
  ASSERT_TRUE(f->predicted && f->predicted->step_time_s);
  const double wait = 0.45 / 0.55 * 0.01;
  EXPECT_NEAR(*f->predicted->measured_step_time_s, 0.01 + wait, 1e-5);  // 4 significant digits
  EXPECT_NEAR(*f->predicted->step_time_s, 0.01, 1e-6);
  EXPECT_EQ(f->predicted->inputs["workers_needed"], 1);
  EXPECT_NE(f->fix.find("--workers=1"), std::string::npos) << f->fix;
  // With 2 workers already and the same wait, each makes a batch in 2 x (10 + 8.18) ms.
  r.config.workers = 2;
  d = diagnose(r);
  f = find(d, "input-bound");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->predicted->inputs["workers_needed"], 5);  // ceil(1.2 x 36.4 / 10)

  // Two ranks on one core, each computing 6 of its 10 ms: on a core of its own, 3.
  auto shared = ddp_report(0.006, 0.006, 0.01);
  (*run0(shared).ranks)[1].hardware = {"core 0"};
  d = diagnose(shared);
  f = find(d, "ranks-share-device");
  ASSERT_NE(f, nullptr);
  ASSERT_TRUE(f->predicted && f->predicted->step_time_s);
  EXPECT_NEAR(*f->predicted->step_time_s, 0.01 - 0.003, 1e-9);

  // Two stages, two micro-batches: (m + p - 1) / m from 3/2 to 5/4 with four.
  d = diagnose(mp_report({0.33, 0.36}, "measured time", {16, 16}));
  f = find(d, "pipeline-bubble");
  ASSERT_NE(f, nullptr);
  ASSERT_TRUE(f->predicted && f->predicted->gain_share);
  EXPECT_NEAR(*f->predicted->gain_share, 1 - (5.0 / 4) / (3.0 / 2), 1e-3);
  EXPECT_EQ(f->predicted->inputs["micro_batches_fixed"], 4);
}

}  // namespace
}  // namespace dpb::doctor
