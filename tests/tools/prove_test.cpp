// dpbench --doctor=prove: the fix of each finding as flags of the run, the fixed command
// line, and the verdict from alternated runs (benchmarks/dpbench/prove.h). The runs
// themselves are proved end to end in tests/scenarios/prove_test.cpp.
#include "benchmarks/dpbench/prove.h"

#include <gtest/gtest.h>

#include "reports/json_view.h"

namespace dpb::bench {
namespace {

using Args = std::vector<std::string>;

TEST(Prove, AFixReplacesTheOptionsValueInEitherSpelling) {
  EXPECT_EQ(with_options({"--mode=single", "--workers=0", "--batch=64"}, {"--workers=3"}),
            (Args{"--mode=single", "--batch=64", "--workers=3"}));
  EXPECT_EQ(with_options({"--workers", "0", "--batch", "64"}, {"--workers=3"}), (Args{"--batch", "64", "--workers=3"}));
  EXPECT_EQ(with_options({"--mode=mp", "--schedule=naive"}, {"--schedule=1f1b", "--micro-batches=4"}),
            (Args{"--mode=mp", "--schedule=1f1b", "--micro-batches=4"}));
  // An option the run did not give is added; nothing else moves.
  EXPECT_EQ(with_options({"--mode=fsdp", "--gpus=2"}, {"--fsdp-prefetch=1"}),
            (Args{"--mode=fsdp", "--gpus=2", "--fsdp-prefetch=1"}));
}

reports::Proof proof(std::vector<double> original, std::vector<double> fixed, std::optional<double> predicted) {
  reports::Proof p;
  p.original_s = std::move(original);
  p.fixed_s = std::move(fixed);
  p.predicted_gain_share = predicted;
  judge(p);
  return p;
}

TEST(Prove, AGainWithinAQuarterOfThePredictionHolds) {
  const auto p = proof({0.030, 0.031, 0.029}, {0.010, 0.011, 0.010}, 0.65);
  EXPECT_EQ(p.pairs, 3);
  EXPECT_NEAR(*p.original_median_s, 0.030, 1e-12);
  EXPECT_NEAR(*p.fixed_median_s, 0.010, 1e-12);
  // Per pair: 1 - 10/30 = 0.667, 1 - 11/31 = 0.645, 1 - 10/29 = 0.655; the median, and
  // half the spread.
  EXPECT_NEAR(*p.measured_gain_share, 1 - 0.010 / 0.029, 1e-9);
  EXPECT_NEAR(*p.noise_share, ((1 - 0.010 / 0.030) - (1 - 0.011 / 0.031)) / 2, 1e-9);
  EXPECT_NEAR(*p.prediction_error, (1 - 0.010 / 0.029) / 0.65 - 1, 1e-9);
  EXPECT_EQ(p.verdict, "held");
}

TEST(Prove, AGainFarFromThePredictionHoldsOffIt) {
  EXPECT_EQ(proof({0.030, 0.030}, {0.025, 0.025}, 0.65).verdict, "held, off the prediction");
  // No prediction: held when the gain is beyond the noise.
  EXPECT_EQ(proof({0.030, 0.030}, {0.025, 0.025}, std::nullopt).verdict, "held");
}

TEST(Prove, NoGainOrOneWithinTheNoiseDoesNotHold) {
  EXPECT_EQ(proof({0.030, 0.030, 0.030}, {0.031, 0.031, 0.031}, 0.2).verdict, "did not hold");
  // Gains of +10 %, -10 %, +1 %: the median is inside the pairs' spread.
  EXPECT_EQ(proof({0.030, 0.030, 0.030}, {0.027, 0.033, 0.0297}, 0.1).verdict, "did not hold");
  // 1 % every time: steady, but within what this machine drifts between runs.
  EXPECT_EQ(proof({0.030, 0.030, 0.030}, {0.0297, 0.0297, 0.0297}, 0.01).verdict, "did not hold");
  EXPECT_EQ(proof({}, {}, 0.1).verdict, "not run");
}

reports::RunReport run_with(int workers) {
  reports::RunReport r;
  r.config.workers = workers;
  r.config.micro_batches = 2;
  return r;
}

TEST(Prove, EachFindingsFixIsItsFlagOrSaysWhyNot) {
  reports::Finding input;
  input.id = "input-bound";
  input.predicted.emplace();
  input.predicted->gain_share = 0.6;
  input.predicted->inputs = {{"workers_needed", 4}};
  auto r = remedy_for(input, run_with(0));
  EXPECT_EQ(r.flags, Args{"--workers=4"});
  EXPECT_EQ(r.predicted_gain, 0.6);
  EXPECT_TRUE(r.not_run.empty());

  reports::Finding gather;
  gather.id = "exposed-allgather";
  gather.evidence = {{"prefetch", 0}};
  EXPECT_EQ(remedy_for(gather, run_with(0)).flags, Args{"--fsdp-prefetch=1"});
  gather.evidence = {{"prefetch", 1}};
  EXPECT_FALSE(remedy_for(gather, run_with(0)).not_run.empty());

  reports::Finding comm;
  comm.id = "exposed-communication";
  comm.evidence = {{"simulated_fix", {{"best_bucket_mb", 4.0}, {"gain", 0.2}, {"reproduces_measured_step", true}}}};
  r = remedy_for(comm, run_with(0));
  EXPECT_EQ(r.flags, Args{"--bucket-mb=4"});
  EXPECT_EQ(r.predicted_gain, 0.2);
  // A simulation that did not reproduce the run proves nothing: not run.
  comm.evidence["simulated_fix"]["reproduces_measured_step"] = false;
  EXPECT_FALSE(remedy_for(comm, run_with(0)).not_run.empty());

  reports::Finding bubble;
  bubble.id = "pipeline-bubble";
  EXPECT_EQ(remedy_for(bubble, run_with(0)).flags, Args{"--micro-batches=4"});

  // Fixes that change what is learned, and fixes that are no flag, are not timed.
  for (const char* id : {"missing-distributed-sampler", "lr-not-scaled", "straggler-rank", "unexplained-idle"}) {
    reports::Finding f;
    f.id = id;
    EXPECT_FALSE(remedy_for(f, run_with(0)).not_run.empty()) << id;
  }
}

TEST(Prove, AProofRoundTripsThroughTheReportsJson) {
  reports::Finding f;
  f.id = "input-bound";
  f.proof = proof({0.030, 0.031, 0.029}, {0.010, 0.011, 0.010}, 0.65);
  f.proof->flags = {"--workers=4"};
  f.proof->prediction_method = "loader model";
  const auto j = f.to_json();
  const auto back = reports::Finding::from_json(reports::JsonView(j, "finding"));
  ASSERT_TRUE(back.proof);
  EXPECT_EQ(back.proof->to_json(), f.proof->to_json());
  EXPECT_NE(back.proof->summary().find("--workers=4: 30.00 ms -> 10.00 ms"), std::string::npos)
      << back.proof->summary();
}

}  // namespace
}  // namespace dpb::bench
