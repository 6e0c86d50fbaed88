// dpbench with the CPU's instruction sets held down. oneDNN held to AVX2
// (ONEDNN_MAX_CPU_ISA), where oneDNN has no Winograd kernels: ResNet-18's 3x3 convolutions
// run our own Winograd F(4x4, 3x3) (engine/backend/cpu/winograd.h), and train as direct
// convolution does. Our own kernels held to AVX2 or the baseline (DPB_MAX_CPU_ISA,
// engine/backend/cpu/simd.h): each variant trains as the others do, and the report says
// which ran.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/backend/cpu/simd.h"
#include "engine/backend/cpu/winograd.h"
#include "tests/support/process.h"

namespace {

namespace test = dpb::test;

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}

std::vector<double> losses(const std::string& json) {
  return read_json(json)["runs"][0]["loss_per_step"].get<std::vector<double>>();
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

// GPT-2 (GELU, causal softmax, the loss, AdamW) and LeNet (2x2 max pooling, SGD with
// momentum) with our kernels held to each ISA this processor runs: the same losses to
// the rounding of vector against scalar sums, the report's env.cpu.kernels_isa the one
// held to. A hold above the processor is a maximum (the processor's own runs); a name
// that is none of them fails before any work, naming the valid ones.
TEST(DpbenchHeldIsa, EachVariantTrainsAsTheBaselineDoesAndTheReportSaysWhichRan) {
  using dpb::cpu::SimdIsa;
  const std::string base = std::filesystem::temp_directory_path() / ("dpb_isa_" + std::to_string(::getpid()));
  const std::string bin = test::binary("DPBENCH_BIN", DPBENCH_BIN);
  const SimdIsa widest = dpb::cpu::processor_simd_isa();
  for (const std::string model :
       {"--model=gpt2-tiny --seq=16 --batch=2 --optimizer=adamw", "--model=lenet --batch=8 --momentum=0.9"}) {
    const std::string args = " --mode=single " + model + " --steps=3 --warmup=0 --threads=1 --progress=none --json=";
    std::vector<double> reference;
    for (SimdIsa isa : {SimdIsa::baseline, SimdIsa::avx2, SimdIsa::avx512}) {
      const std::string name = dpb::cpu::simd_isa_name(isa), json = base + "_" + name + ".json";
      const test::Proc p = test::run_command("DPB_MAX_CPU_ISA=" + name + " " + bin + args + json);
      ASSERT_EQ(p.code, 0) << model << " held to " << name << ": " << p.err;
      const auto ran = read_json(json)["env"]["cpu"]["kernels_isa"];
      EXPECT_EQ(ran, dpb::cpu::simd_isa_name(std::min(isa, widest))) << model << " held to " << name;
      const auto l = losses(json);
      ASSERT_EQ(l.size(), 3u);
      if (reference.empty()) reference = l;
      for (size_t s = 0; s < l.size(); ++s)
        EXPECT_NEAR(l[s], reference[s], 1e-5 * std::fabs(reference[s])) << model << " held to " << name << ", step " << s;
      std::filesystem::remove(json);
    }
  }
  const test::Proc bad = test::run_command("DPB_MAX_CPU_ISA=sse9 " + bin + " --mode=single --model=mlp --steps=1");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("DPB_MAX_CPU_ISA: unknown instruction set 'sse9'; choose avx512, avx2 or baseline"),
            std::string::npos)
      << bad.err;
}

}  // namespace
