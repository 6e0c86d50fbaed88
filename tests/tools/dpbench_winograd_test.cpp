// dpbench with oneDNN held to AVX2 (ONEDNN_MAX_CPU_ISA), where oneDNN has no Winograd
// kernels: ResNet-18's 3x3 convolutions run our own Winograd F(4x4, 3x3)
// (engine/backend/cpu/winograd.h), and train as direct convolution does.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/backend/cpu/winograd.h"
#include "tests/support/process.h"

namespace {

namespace test = dpb::test;

std::vector<double> losses(const std::string& json) {
  std::ifstream f(json);
  const auto j = nlohmann::json::parse(f);
  return j["runs"][0]["loss_per_step"].get<std::vector<double>>();
}

TEST(DpbenchWinograd, HeldToAvx2ResNetRunsOurOwnAndTrainsAsDirectDoes) {
  if (!dpb::cpu::winograd::processor_supported()) GTEST_SKIP() << "no AVX2 with FMA on this processor";
  const std::string base = std::filesystem::temp_directory_path() / ("dpb_wino_" + std::to_string(::getpid()));
  const std::string bin = test::binary("DPBENCH_BIN", DPBENCH_BIN);
  const std::string args = " --mode=single --model=resnet18 --batch=4 --steps=2 --warmup=0 --threads=1 --progress=none";
  const test::Proc own =
      test::run_command("ONEDNN_MAX_CPU_ISA=AVX2 DPB_LOG_LEVEL=debug " + bin + args + " --json=" + base + "_own.json");
  const test::Proc direct = test::run_command("ONEDNN_MAX_CPU_ISA=AVX2 DPB_CPU_CONV=direct DPB_LOG_LEVEL=debug " + bin +
                                              args + " --json=" + base + "_direct.json");
  ASSERT_EQ(own.code, 0) << own.err;
  ASSERT_EQ(direct.code, 0) << direct.err;
  // 32x32x64 to 8x8x256 in every pass; 4x4x512 in its weight gradient only.
  EXPECT_NE(own.err.find("4x64x32x32 -> 64 channels: our own Winograd F(4x4, 3x3) in all three passes"),
            std::string::npos) << own.err;
  EXPECT_NE(own.err.find("4x256x8x8 -> 256 channels: our own Winograd F(4x4, 3x3) in all three passes"),
            std::string::npos) << own.err;
  EXPECT_NE(own.err.find("4x512x4x4 -> 512 channels: our own Winograd F(4x4, 3x3) in the weight gradient"),
            std::string::npos) << own.err;
  EXPECT_EQ(direct.err.find("our own Winograd"), std::string::npos) << direct.err;
  // The first loss is the forward alone; the second follows one SGD step on every
  // gradient. Winograd rounds differently, within these bounds.
  const auto a = losses(base + "_own.json"), b = losses(base + "_direct.json");
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_NEAR(a[0], b[0], 1e-5 * std::fabs(b[0]));
  EXPECT_NEAR(a[1], b[1], 1e-3 * std::fabs(b[1]));
  EXPECT_NE(a[1], b[1]);  // it did run something else
  std::filesystem::remove(base + "_own.json");
  std::filesystem::remove(base + "_direct.json");
}

}  // namespace
