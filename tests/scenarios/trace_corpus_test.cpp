// dpdoctor on the corpus of real PyTorch profiler traces in tests/data/traces (each
// folder says how it was recorded, in its README, with HTA's figures where HTA has any):
// every rule the corpus covers, where it must fire and where it must not.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "diagnostics/dpdoctor/doctor.h"
#include "diagnostics/dpdoctor/torch_trace.h"

namespace dpb::doctor {
namespace {

namespace fs = std::filesystem;

std::string corpus(const std::string& name) { return (fs::path(DPB_SOURCE_DIR) / "tests/data/traces" / name).string(); }

std::vector<std::string> ids(const Diagnosis& d) {
  std::vector<std::string> out;
  for (const auto& f : d.findings) out.push_back(f.id);
  return out;
}

TEST(TraceCorpus, CpuSlowLoaderIsInputBound) {
  const Diagnosis d = diagnose(read_torch_traces({corpus("cpu-slow-loader")}));
  EXPECT_EQ(ids(d), std::vector<std::string>{"input-bound"});
  EXPECT_GT(d.findings.at(0).evidence["data_wait_share"].get<double>(), 0.5);
  EXPECT_FALSE(d.healthy);
}

TEST(TraceCorpus, CpuHealthyLoopIsHealthyAndSaysItHasNoDeviceActivity) {
  const Diagnosis d = diagnose(read_torch_traces({corpus("cpu-healthy")}));
  EXPECT_TRUE(ids(d).empty());
  EXPECT_TRUE(d.healthy);
  EXPECT_LT(d.summary.data_wait_share, 0.1);
  EXPECT_TRUE(d.summary.devices.empty());
  EXPECT_FALSE(d.summary.global_batch.has_value());  // a trace does not record samples
  std::ostringstream text;
  print_diagnosis(d, text);
  EXPECT_NE(text.str().find("no device activity recorded"), std::string::npos) << text.str();
  EXPECT_EQ(text.str().find("cuda:0"), std::string::npos) << text.str();
}

TEST(TraceCorpus, CpuDdpOverGlooIsTwoRanksInOrderAndHealthy) {
  const Diagnosis d = diagnose(read_torch_traces({corpus("cpu-ddp-gloo")}));
  EXPECT_EQ(d.summary.mode, ParallelMode::ddp);
  EXPECT_EQ(d.summary.world_size, 2);
  // Neither rank is a straggler, nor does a loader hold them up: no finding.
  EXPECT_TRUE(ids(d).empty()) << d.to_json().dump(2);
  EXPECT_GT(d.summary.step_time_s, 0);
}

}  // namespace
}  // namespace dpb::doctor
