// dpbench --simulate --from-trace end to end: a user's PyTorch trace predicted at scale,
// its report, a dpbench report taken as --profile takes it, and what it refuses.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <string>

#include "tests/support/process.h"
#include "tests/support/schemas.h"

namespace {

namespace fs = std::filesystem;
namespace test = dpb::test;
using test::checked_report;
using test::Proc;

const std::string kDlrm = (fs::path(DPB_SOURCE_DIR) / "tests/data/traces/public/param_dlrm_8xv100_ddp").string();
const std::string kResnet =
    (fs::path(DPB_SOURCE_DIR) / "tests/data/traces/public/kineto_resnet50_nw0_v100_2021jun").string();

Proc dpbench(const std::string& args) {
  return test::run_command(test::binary("DPBENCH_BIN", DPBENCH_BIN) + " " + args);
}
std::string temp(const std::string& name) {
  return fs::temp_directory_path() / ("dpb_from_trace_" + std::to_string(::getpid()) + "_" + name);
}

// The 8-rank DLRM job at 8, 64 and 512 GPUs from rank 0's trace: the link is the trace's
// GPU's preset, scaled to its own all-reduces; at 8 ranks the prediction is the measured
// step within a tenth; the report says where every figure came from and what the bucket
// size would change.
TEST(DpbenchFromTrace, PredictsAUsersJobAtScaleFromOneRanksTrace) {
  const std::string json = temp("dlrm.json");
  const Proc s = dpbench("--simulate --mode=ddp --from-trace=" + kDlrm + " --gpus=8,64,512 --batch=128 --json=" + json);
  ASSERT_EQ(s.code, 0) << s.err;
  EXPECT_NE(s.out.find("profile: trace"), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("dgx1-v100"), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("at the trace's 8 ranks: predicted"), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("--bucket-mb=100"), std::string::npos) << s.out;
  const nlohmann::json r = checked_report(json);
  const auto& t = r["simulation"]["from_trace"];
  EXPECT_EQ(t["world_size"], 8);
  EXPECT_EQ(t["rank"], 0);
  EXPECT_EQ(t["gradients_from"], "the backward's all-reduces");
  EXPECT_GT(t["link_calibration"].get<double>(), 0);
  EXPECT_NEAR(t["predicted_step_time_s_at_world_size"].get<double>() / t["measured_step_time_s"].get<double>(), 1.0,
              0.10);
  ASSERT_EQ(r["sweep"].size(), 3u);
  double last = 2;
  for (const auto& p : r["sweep"]) {
    EXPECT_TRUE(p["predicted"].get<bool>());
    EXPECT_LE(p["scaling_efficiency"].get<double>(), last);  // no better with more ranks
    last = p["scaling_efficiency"].get<double>();
  }
  EXPECT_EQ(r["simulation"]["what_would_change"].size(), 4u);
  std::remove(json.c_str());
}

// FSDP from a one-GPU trace: the prefetch depths compared, units from its gradients.
TEST(DpbenchFromTrace, FsdpFromAOneGpuTraceComparesPrefetchDepths) {
  const Proc s = dpbench("--simulate --mode=fsdp --from-trace=" + kResnet + " --gpus=2,8 --batch=32");
  ASSERT_EQ(s.code, 0) << s.err;
  EXPECT_NE(s.out.find("AccumulateGrad's shapes"), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("--fsdp-prefetch=0"), std::string::npos) << s.out;
}

// A dpbench report given to --from-trace is read as --profile reads it: the same points.
TEST(DpbenchFromTrace, ADpbenchReportPredictsAsItsLayerProfileDoes) {
  const std::string profile = temp("profile.json"), a = temp("a.json"), b = temp("b.json");
  const Proc p = dpbench("--mode=single --model=lenet --batch=16 --steps=3 --warmup=1 --threads=1 --layer-profile "
                         "--progress=none --json=" + profile);
  ASSERT_EQ(p.code, 0) << p.err;
  ASSERT_EQ(dpbench("--simulate --mode=ddp --gpus=2,4 --profile=" + profile + " --json=" + a).code, 0);
  ASSERT_EQ(dpbench("--simulate --mode=ddp --gpus=2,4 --from-trace=" + profile + " --json=" + b).code, 0);
  const auto pa = checked_report(a)["sweep"], pb = checked_report(b)["sweep"];
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_DOUBLE_EQ(pa[i]["scaling_efficiency"].get<double>(), pb[i]["scaling_efficiency"].get<double>());
  for (const auto& f : {profile, a, b}) std::remove(f.c_str());
}

TEST(DpbenchFromTrace, RefusesWhatItCannotPredict) {
  const auto refused = [](const std::string& args, const std::string& says) {
    const Proc s = dpbench("--simulate " + args);
    EXPECT_NE(s.code, 0) << args;
    EXPECT_NE(s.err.find(says), std::string::npos) << args << ": " << s.err;
  };
  refused("--mode=mp --gpus=2 --from-trace=" + kDlrm, "--from-trace predicts --mode=ddp or --mode=fsdp");
  refused("--mode=ddp --gpus=2 --from-trace=" + kDlrm + " --single-step-s=0.1", "three profiles; give one");
  refused("--mode=ddp --gpus=2 --from-trace=" + kDlrm + " --crowded-profile=x.json", "--crowded-profile goes with");
  refused("--mode=ddp --gpus=2 --from-trace=/nonexistent/trace.json", "/nonexistent/trace.json");
  refused("--mode=ddp --gpus=2 --from-trace=" + (fs::path(DPB_SOURCE_DIR) /
                                                 "tests/data/traces/public/kineto_resnet50_autograd_api_nw0_2021jan")
                                                    .string(),
          "no step markers");
}

}  // namespace
