// The transformer's ops on CUDA against the CPU backend (skipped without a GPU), in
// fp32 and bf16, and gpt2-tiny's loss and every gradient against the CPU's.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "engine/backend/cpu/cpu_context.h"
#include "engine/backend/ops.h"
#include "engine/data/tokens.h"
#include "engine/models/model.h"
#include "tests/cuda/cuda_test_util.h"

#if DPB_WITH_CUDA
#include <cudnn.h>
#include <dlfcn.h>

#include "engine/backend/cuda/fused_attention.h"
#endif

namespace dpb {
namespace {

using test::rel_error;
using test::random_tensor;
using test::tolerance;

const Device kGpu = Device::cuda(0);

Tensor tokens(int64_t n, int64_t t, int64_t vocab, uint64_t seed) {
  Generator g(seed);
  std::vector<int32_t> v(static_cast<size_t>(n * t));
  for (auto& x : v) x = static_cast<int32_t>(g.below(static_cast<uint64_t>(vocab)));
  return Tensor::from_labels(v).view({n, t});
}

TEST(CudaTransformerOps, EmbeddingsMatchCpu) {
  DPB_REQUIRE_GPU();
  const Tensor tok = tokens(3, 7, 50, 1), table = random_tensor({50, 16}, 2), pos = random_tensor({9, 16}, 3);
  Tensor y = Tensor::empty({3, 7, 16}), gy = Tensor::empty({3, 7, 16}, kGpu);
  ops::embedding_forward(tok, table, y);
  ops::embedding_forward(tok.to(kGpu), table.to(kGpu), gy);
  EXPECT_LT(rel_error(gy, y), 1e-7);
  Tensor z = Tensor::empty_like(y), gz = Tensor::empty_like(gy);
  ops::position_embedding_forward(y, pos, z);
  ops::position_embedding_forward(gy, pos.to(kGpu), gz);
  EXPECT_LT(rel_error(gz, z), 1e-7);
  const Tensor dy = random_tensor({3, 7, 16}, 4);
  for (bool acc : {false, true}) {
    Tensor dt = random_tensor({50, 16}, 5), gdt = dt.to(kGpu), dp = random_tensor({9, 16}, 6), gdp = dp.to(kGpu);
    ops::embedding_backward(tok, dy, dt, acc);
    ops::embedding_backward(tok.to(kGpu), dy.to(kGpu), gdt, acc);
    EXPECT_LT(rel_error(gdt, dt), 1e-6) << "accumulate " << acc;
    ops::position_embedding_backward(dy, dp, acc);
    ops::position_embedding_backward(dy.to(kGpu), gdp, acc);
    EXPECT_LT(rel_error(gdp, dp), 1e-6) << "accumulate " << acc;
  }
}

TEST(CudaTransformerOps, LayerNormGeluAttentionMatchCpu) {
  DPB_REQUIRE_GPU();
  const int64_t N = 2, T = 37, C = 96, H = 3;  // rows and heads not multiples of a warp or block
  const Tensor x = random_tensor({N, T, C}, 7), gamma = random_tensor({C}, 8), beta = random_tensor({C}, 9);
  Tensor y = Tensor::empty_like(x), m = Tensor::empty({N * T}), r = Tensor::empty({N * T});
  Tensor gy = Tensor::empty(x.shape(), kGpu), gm = Tensor::empty({N * T}, kGpu), gr = Tensor::empty({N * T}, kGpu);
  ops::layernorm_forward(x, gamma, beta, y, m, r, 1e-5f);
  ops::layernorm_forward(x.to(kGpu), gamma.to(kGpu), beta.to(kGpu), gy, gm, gr, 1e-5f);
  EXPECT_LT(rel_error(gy, y), 1e-5);
  const Tensor dy = random_tensor(x.shape(), 10);
  Tensor dx = Tensor::empty_like(x), dg = Tensor::empty({C}), db = Tensor::empty({C});
  Tensor gdx = Tensor::empty(x.shape(), kGpu), gdg = Tensor::empty({C}, kGpu), gdb = Tensor::empty({C}, kGpu);
  ops::layernorm_backward(x, dy, gamma, m, r, dx, dg, db, false);
  ops::layernorm_backward(x.to(kGpu), dy.to(kGpu), gamma.to(kGpu), gm, gr, gdx, gdg, gdb, false);
  EXPECT_LT(rel_error(gdx, dx), 1e-4);
  EXPECT_LT(rel_error(gdg, dg), 1e-4);
  EXPECT_LT(rel_error(gdb, db), 1e-4);

  Tensor a = Tensor::empty_like(x), ga = Tensor::empty(x.shape(), kGpu);
  ops::gelu_forward(x, a);
  ops::gelu_forward(x.to(kGpu), ga);
  EXPECT_LT(rel_error(ga, a), 1e-5);
  ops::gelu_backward(x, dy, a);
  ops::gelu_backward(x.to(kGpu), dy.to(kGpu), ga);
  EXPECT_LT(rel_error(ga, a), 1e-5);

  for (Precision prec : {Precision::fp32, Precision::tf32}) {
    test::PrecisionScope scope(prec);
    const Tensor qkv = random_tensor({N, T, 3 * C}, 11);
    Tensor o = Tensor::empty({N, T, C}), p = Tensor::empty({N, H, T, T});
    Tensor go = Tensor::empty({N, T, C}, kGpu), gp = Tensor::empty({N, H, T, T}, kGpu);
    ops::attention_forward(qkv, H, o, p);
    ops::attention_forward(qkv.to(kGpu), H, go, gp);
    EXPECT_LT(rel_error(go, o), tolerance(prec, 1e-5)) << precision_name(prec);
    EXPECT_LT(rel_error(gp, p), tolerance(prec, 1e-5)) << precision_name(prec);
    const Tensor dout = random_tensor({N, T, C}, 12);
    Tensor d = Tensor::empty_like(qkv), gd = Tensor::empty(qkv.shape(), kGpu);
    ops::attention_backward(qkv, p, dout, H, d);
    ops::attention_backward(qkv.to(kGpu), gp, dout.to(kGpu), H, gd);
    EXPECT_LT(rel_error(gd, d), tolerance(prec, 1e-4)) << precision_name(prec);
  }
  const Tensor big = random_tensor({1000}, 13);
  EXPECT_NEAR(ops::sum_squares(big.to(kGpu)), ops::sum_squares(big), 1e-4 * ops::sum_squares(big));
}

// Attention fused by cuDNN (bf16) against the CPU's fp32 attention on the same bf16-rounded
// inputs: the output, each row's log-sum-exp and the gradient of q, k and v. On an sm80+
// GPU with cuDNN 9 the fused path must be taken; cuDNN's reason fails the test otherwise.
TEST(CudaTransformerOps, FusedAttentionMatchesCpu) {
  DPB_REQUIRE_GPU();
  cpu::CpuDeviceScope scope(0);
  test::PrecisionScope ps(Precision::bf16);
  for (const auto& [N, T, H, D] : std::vector<std::array<int64_t, 4>>{{2, 64, 4, 64}, {3, 100, 2, 32}}) {
    const int64_t C = H * D;
    const std::string what = fmt::format("N {} T {} {} heads of {}", N, T, H, D);
    const Tensor gqkv = random_tensor({N, T, 3 * C}, 21).to(kGpu).to_dtype(DType::bf16);
    std::string why;
    ASSERT_TRUE(ops::attention_fused(gqkv, H, &why)) << what << ": " << why;
    const Tensor qkv = gqkv.to_dtype(DType::f32).to(Device::cpu());
    Tensor o = Tensor::empty({N, T, C}), p = Tensor::empty({N, H, T, T});
    ops::attention_forward(qkv, H, o, p);
    Tensor go = Tensor::empty({N, T, C}, kGpu, DType::bf16), stats = Tensor::empty({N, H, T}, kGpu);
    ops::attention_forward_fused(gqkv, H, go, stats);
    EXPECT_LT(rel_error(go.to_dtype(DType::f32), o), 1e-2) << what;

    // stats[n, h, t] = log sum_{j <= t} exp(q_t . k_j / sqrt(D)), in double from the inputs.
    const std::vector<float> x = qkv.to_vector(), got = stats.to_vector();
    double worst = 0.0;
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t t = 0; t < T; ++t) {
          std::vector<double> s;
          for (int64_t j = 0; j <= t; ++j) {
            double dot = 0.0;
            for (int64_t d = 0; d < D; ++d) {
              dot += static_cast<double>(x[static_cast<size_t>((n * T + t) * 3 * C + h * D + d)]) *
                     x[static_cast<size_t>((n * T + j) * 3 * C + C + h * D + d)];
            }
            s.push_back(dot / std::sqrt(static_cast<double>(D)));
          }
          const double m = *std::max_element(s.begin(), s.end());
          double z = 0.0;
          for (double v : s) z += std::exp(v - m);
          const double want = m + std::log(z);
          worst = std::max(worst, std::fabs(got[static_cast<size_t>((n * H + h) * T + t)] - want));
        }
      }
    }
    EXPECT_LT(worst, 2e-3) << what << ": largest error of a row's log-sum-exp";

    const Tensor dout = random_tensor({N, T, C}, 22).to(kGpu).to_dtype(DType::bf16);
    Tensor d = Tensor::empty_like(qkv), gd = Tensor::empty(qkv.shape(), kGpu, DType::bf16);
    ops::attention_backward(qkv, p, dout.to_dtype(DType::f32).to(Device::cpu()), H, d);
    ops::attention_backward_fused(gqkv, go, stats, dout, H, gd);
    EXPECT_LT(rel_error(gd.to_dtype(DType::f32), d), 2e-2) << what;
  }
  // Where it cannot run fused, it says why.
  std::string why;
  EXPECT_FALSE(ops::attention_fused(random_tensor({1, 8, 3 * 36}, 23).to(kGpu).to_dtype(DType::bf16), 3, &why));
  EXPECT_NE(why.find("head width 12"), std::string::npos) << why;
  EXPECT_FALSE(ops::attention_fused(random_tensor({1, 8, 3 * 64}, 24).to(kGpu), 1, &why));
  EXPECT_NE(why.find("bf16"), std::string::npos) << why;
}

#if DPB_WITH_CUDA
// cuDNN's device properties (CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION) of an H100 SXM
// and an A100 SXM, from their published figures, for building plans without the GPU.
const char* const kH100 = R"({"deviceName": "NVIDIA H100 80GB HBM3", "deviceVer": 900, "driverVer": 12080,
  "cudaDeviceId": 0, "pciDeviceId": 0, "isTccDriver": 0, "supportCoopLaunch": 1, "multiProcessorCount": 132,
  "warpSize": 32, "regsPerBlock": 65536, "maxRegistersPerSM": 65536, "maxCtasPerSM": 32, "maxThreadsPerBlock": 1024,
  "maxThreadsPerSM": 2048, "maxSharedMemoryPerBlock": 49152, "maxSharedMemoryPerBlockOptin": 232448,
  "reservedSharedMemoryPerBlock": 1024, "l2CacheSize": 52428800, "totalGlobalMem": 85520809984,
  "smClockRateKHz": 1980000, "memClockRateKHz": 2619000, "maxGridSize": [2147483647, 65535, 65535],
  "maxBlockSize": [1024, 1024, 64]})";
const char* const kA100 = R"({"deviceName": "NVIDIA A100-SXM4-80GB", "deviceVer": 800, "driverVer": 12080,
  "cudaDeviceId": 0, "pciDeviceId": 0, "isTccDriver": 0, "supportCoopLaunch": 1, "multiProcessorCount": 108,
  "warpSize": 32, "regsPerBlock": 65536, "maxRegistersPerSM": 65536, "maxCtasPerSM": 32, "maxThreadsPerBlock": 1024,
  "maxThreadsPerSM": 2048, "maxSharedMemoryPerBlock": 49152, "maxSharedMemoryPerBlockOptin": 166912,
  "reservedSharedMemoryPerBlock": 1024, "l2CacheSize": 41943040, "totalGlobalMem": 85198045184,
  "smClockRateKHz": 1410000, "memClockRateKHz": 1593000, "maxGridSize": [2147483647, 65535, 65535],
  "maxBlockSize": [1024, 1024, 64]})";

// The fused attention's graphs as cuDNN itself judges them, with no GPU: its deviceless
// compilation builds the forward and backward plans for a described H100 and A100, for
// gpt2's and gpt2-tiny's shapes and the shapes the GPU test above runs. A graph that
// cuDNN does not take as attention finds no engine, and fails here.
//
// cuDNN's attention engines are compiled at run time and load the CUDA driver even to
// judge a graph. Where there is no driver, the toolkit's stub stands in: the engines judge
// the graphs, and finalizing a plan then fails for want of the driver (its workspace
// unknown, -1).
TEST(CudaFusedAttentionGraphs, CudnnTakesBothGraphsForAnH100AndAnA100WithoutAGpu) {
  if (cudnnGetVersion() < 90800) GTEST_SKIP() << "cuDNN " << cudnnGetVersion() << ": deviceless plans need 9.8";
  const bool driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL) != nullptr;
#ifdef DPB_CUDA_DRIVER_STUB
  if (!driver && !dlopen(DPB_CUDA_DRIVER_STUB, RTLD_NOW | RTLD_GLOBAL)) {
    GTEST_SKIP() << "neither the CUDA driver nor its stub (" << DPB_CUDA_DRIVER_STUB << ") loads";
  }
#else
  if (!driver) GTEST_SKIP() << "no CUDA driver, and no stub known";
#endif
  using Shape4 = std::array<int64_t, 4>;
  const std::vector<std::pair<const char*, std::vector<Shape4>>> cases = {
      {kH100, {{16, 1024, 12, 64}, {8, 256, 4, 32}, {2, 64, 4, 64}, {3, 100, 2, 32}}},
      {kA100, {{16, 1024, 12, 64}, {3, 100, 2, 32}}}};
  for (const auto& [json, shapes] : cases) {
    const std::string gpu = json == kH100 ? "H100" : "A100";
    for (const auto& [N, T, H, D] : shapes) {
      int64_t workspace[2] = {-2, -2};
      EXPECT_EQ(cuda::fused_attention_compile_for(json, N, T, H, D, workspace), "")
          << gpu << ": N " << N << " T " << T << ", " << H << " heads of " << D;
      // With the stub no plan can finalize; with a driver a plan may (this GPU's kind) or
      // may not (another kind's kernels do not load here).
      if (!driver) {
        EXPECT_EQ(workspace[0], -1) << gpu << " T " << T;
        EXPECT_EQ(workspace[1], -1) << gpu << " T " << T;
      }
      EXPECT_GE(std::min(workspace[0], workspace[1]), -1) << gpu << " T " << T;
    }
  }
  // A description cuDNN cannot read is refused with its reason, not a crash.
  const std::string bad = cuda::fused_attention_compile_for(R"({"deviceName": "x"})", 1, 64, 1, 64);
  EXPECT_NE(bad.find("device properties"), std::string::npos) << bad;
}
#endif  // DPB_WITH_CUDA

// gpt2-tiny end to end: the loss and every parameter's gradient (the tied embedding's
// two contributions included) as the CPU computes them.
TEST(CudaGradients, Gpt2TinyMatchesCpu) {
  DPB_REQUIRE_GPU();
  cpu::CpuDeviceScope scope(0);
  for (Precision prec : {Precision::fp32, Precision::bf16}) {
    test::PrecisionScope ps(prec);
    Generator g(3), g2(3);
    ModelOptions mo;
    mo.seq = 32;
    auto cm = build_model("gpt2-tiny", g, mo), gm = build_model("gpt2-tiny", g2, mo);
    gm->to(kGpu);
    SyntheticTokens data(32, 512, 8, 3);
    Batch b = make_batch(data, {0, 1, 2, 3});
    auto grads = [&](Model& m, Device d) {
      LossResult l = compute_loss(LossKind::cross_entropy, m.forward(b.x.to(d)), b.target.to(d), true);
      m.backward(l.grad);
      return l.loss;
    };
    const float cl = grads(*cm, Device::cpu()), gl = grads(*gm, kGpu);
    EXPECT_NEAR(gl, cl, tolerance(prec, 1e-5) * std::fabs(cl)) << precision_name(prec);
    auto cp = cm->named_parameters(), gp = gm->named_parameters();
    ASSERT_EQ(cp.size(), gp.size());
    for (size_t i = 0; i < cp.size(); ++i) {
      const std::string what = std::string(precision_name(prec)) + ": gradient of " + cp[i].first;
      if (prec == Precision::fp32) EXPECT_LT(rel_error(gp[i].second->grad(), cp[i].second->grad()), 1e-3) << what;
      else EXPECT_GT(test::cosine(gp[i].second->grad(), cp[i].second->grad()), 0.99) << what;
    }
  }
}

}  // namespace
}  // namespace dpb
