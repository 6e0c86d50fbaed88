// The doctor's exposed-communication finding gets a simulated fix from the run's own
// measurements (benchmarks/dpbench/what_if.h).
#include "benchmarks/dpbench/what_if.h"

#include <gtest/gtest.h>

namespace dpb::bench {
namespace {

// ResNet-18 over 2 ranks with 0.05 MiB buckets, each all-reduce paying about 10 ms of
// latency: many small collectives, more of them than backward can hide.
reports::RunReport tiny_buckets_run(double measured_step_s) {
  reports::RunReport r;
  r.config.mode = ParallelMode::ddp;
  r.config.model = "resnet18";
  r.config.bucket_mb = 0.05;
  reports::RunMetrics run;
  run.world_size = 2;
  run.batch_per_device = 16;
  run.step_time_s.median = measured_step_s;
  run.buckets.emplace();
  for (int i = 0; i < 4; ++i) {
    reports::BucketStats b;
    b.index = i;
    b.bytes = i % 2 ? 100000 : 60000;
    b.comm_start_ms = 10.0 * i;
    b.comm_end_ms = 10.0 * i + (i % 2 ? 10.08 : 10.05);
    run.buckets->push_back(b);
  }
  run.overlap.emplace();
  run.overlap->ab = reports::OverlapAB{measured_step_s, 0.30, 0.01, std::nullopt, std::nullopt};
  r.runs.push_back(run);
  return r;
}

reports::Finding exposed() {
  reports::Finding f;
  f.id = "exposed-communication";
  f.fix = "fewer, larger exchanges.";
  return f;
}

TEST(WhatIf, QuotesTheBucketSizeThatHelpsAndItsSimulatedGain) {
  std::vector<reports::Finding> findings{exposed()};
  add_simulated_fixes(tiny_buckets_run(0.80), findings);
  ASSERT_TRUE(findings[0].evidence.contains("simulated_fix")) << findings[0].evidence.dump();
  const auto& s = findings[0].evidence["simulated_fix"];
  EXPECT_TRUE(s["reproduces_measured_step"].get<bool>()) << s.dump();
  // Said plainly: its contention was fitted to this very run.
  EXPECT_TRUE(s["contention_fitted_to_this_run"].get<bool>());
  EXPECT_NEAR(s["simulated_step_s"].get<double>(), 0.80, 0.80 * 0.15);
  EXPECT_GT(s["best_bucket_mb"].get<double>(), 0.05) << s.dump();
  EXPECT_GT(s["gain"].get<double>(), 0.02) << s.dump();
  EXPECT_NE(findings[0].fix.find("Simulated on this run: --bucket-mb="), std::string::npos) << findings[0].fix;
  EXPECT_NE(findings[0].fix.find("was fitted to this run's own step"), std::string::npos) << findings[0].fix;
  // The link's rate, from the run's own all-reduces: 60 kB in 10.05 ms and 100 kB in
  // 10.08 ms are mostly latency: a ring of 2 ranks takes 2 steps of ~5 ms each.
  const auto& link = s["link"];
  EXPECT_NEAR(link["latency_s"].get<double>(), 0.005, 0.0005) << link.dump();
  EXPECT_GT(link["bus_bandwidth_gbit_per_s"].get<double>(), 0) << link.dump();
  EXPECT_NE(findings[0].fix.find("The link moved"), std::string::npos) << findings[0].fix;
  // Each other remedy with its predicted gain: accumulation amortises the all-reduces (a
  // gain), a faster link cannot help a latency-bound exchange much.
  ASSERT_EQ(s["alternatives"].size(), 2u) << s.dump();
  const auto& accum = s["alternatives"][0];
  EXPECT_EQ(accum["fix"], "--accum-steps=4");
  EXPECT_GT(accum["gain"].get<double>(), 0.2) << accum.dump();
  EXPECT_LT(accum["time_per_batch_s"].get<double>(), s["simulated_step_s"].get<double>());
  const auto& faster = s["alternatives"][1];
  EXPECT_GE(faster["gain"].get<double>(), -1e-9) << faster.dump();
  EXPECT_LT(faster["gain"].get<double>(), accum["gain"].get<double>()) << faster.dump();
  EXPECT_NE(findings[0].fix.find("Predicted: --accum-steps=4 takes"), std::string::npos) << findings[0].fix;
}

TEST(WhatIf, SaysSoWhenItCannotReproduceTheRunAndLeavesOtherFindingsAlone) {
  reports::Finding other;
  other.id = "straggler-rank";
  std::vector<reports::Finding> findings{exposed(), other};
  add_simulated_fixes(tiny_buckets_run(30.0), findings);  // far beyond what its parts add up to
  ASSERT_TRUE(findings[0].evidence.contains("simulated_fix"));
  EXPECT_FALSE(findings[0].evidence["simulated_fix"]["reproduces_measured_step"].get<bool>());
  EXPECT_NE(findings[0].fix.find("does not reproduce this run"), std::string::npos) << findings[0].fix;
  EXPECT_FALSE(findings[1].evidence.contains("simulated_fix"));
  // Without the A/B's step without communication there is no profile: nothing is added.
  reports::RunReport no_ab = tiny_buckets_run(0.40);
  no_ab.runs[0].overlap->ab.reset();
  std::vector<reports::Finding> again{exposed()};
  add_simulated_fixes(no_ab, again);
  EXPECT_FALSE(again[0].evidence.contains("simulated_fix"));
  EXPECT_EQ(again[0].fix, "fewer, larger exchanges.");
}

// The main job's sweeps as they ran (scripts/run.sh: LeNet b64, DDP over 1 and 2 CPU ranks,
// one epoch of Fashion-MNIST, 2-vCPU Xeon; tests/data/reports). The last step's one bucket
// holds that step's wait for the slower rank: the link is rank 0's step-mean transfer
// instead, the wait is the slowest rank's lag from the one-rank run's steps, and the ranks'
// crowding is their compute against the one-rank run's. With those measured, the
// simulation reproduces the step with no contention fitted to it, and the fix says where the
// time beyond one rank's goes, none of it to the link.
TEST(WhatIf, TheMainJobsRunsAreReproducedWithoutFittingAndTheirLossesNamed) {
  struct Case {
    const char* file;
    bool crowded;  // the 2-rank compute measurably slower than the 1-rank run's
  };
  for (const Case& c : {Case{"lenet-ddp-sweep-fashion-mnist.json", false},
                        Case{"lenet-ddp-sweep-fashion-mnist-2026-11-26.json", true}}) {
    SCOPED_TRACE(c.file);
    const auto r = reports::RunReport::read(std::string(DPB_SOURCE_DIR) + "/tests/data/reports/" + c.file);
    ASSERT_EQ(r.runs.size(), 2u);
    const auto& r0 = r.runs.back().ranks->front();
    ASSERT_TRUE(r0.allreduce_s && r0.wait_for_peers_s);
    std::vector<reports::Finding> findings{exposed()};
    add_simulated_fixes(r, findings);
    ASSERT_TRUE(findings[0].evidence.contains("simulated_fix"));
    const auto& s = findings[0].evidence["simulated_fix"];
    const double measured = s["measured_step_s"].get<double>(), simulated = s["simulated_step_s"].get<double>();
    EXPECT_TRUE(s["reproduces_measured_step"].get<bool>()) << s.dump();
    EXPECT_NEAR(simulated, measured, 0.05 * measured) << s.dump();
    EXPECT_FALSE(s["contention_fitted_to_this_run"].get<bool>()) << s.dump();
    EXPECT_EQ(s["contention"].get<double>(), 0) << s.dump();
    EXPECT_DOUBLE_EQ(s["one_rank_step_s"].get<double>(), *r.runs.front().step_time_s.median) << s.dump();
    // The link is the transfer rank 0 measured, not the last bucket's wait.
    const double transfer = *r0.allreduce_s - *r0.wait_for_peers_s;
    EXPECT_NEAR(s["communication_s"].get<double>(), transfer, 0.25 * transfer) << s.dump();
    EXPECT_GT(s["slowest_rank_lag"].get<double>(), 0) << s.dump();
    EXPECT_GT(s["slower_rank_wait_s"].get<double>(), s["communication_s"].get<double>()) << s.dump();
    EXPECT_EQ(s["crowding"].get<double>() > 0.01, c.crowded) << s.dump();
    // The parts add up to what the step takes beyond one rank's.
    const double parts = s["slower_rank_wait_s"].get<double>() + s["crowding_s"].get<double>() +
                         s["communication_s"].get<double>();
    EXPECT_NEAR(parts, simulated - s["one_rank_step_s"].get<double>(), 1e-9) << s.dump();
    EXPECT_NE(findings[0].fix.find("is the wait for the slower rank"), std::string::npos) << findings[0].fix;
    EXPECT_EQ(findings[0].fix.find("the link itself is the limit"), std::string::npos) << findings[0].fix;
    EXPECT_NE(findings[0].fix.find("Nothing in it was fitted to this run's step"), std::string::npos)
        << findings[0].fix;
  }
}

}  // namespace
}  // namespace dpb::bench
