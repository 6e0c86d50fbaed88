// Every op on CUDA against the CPU backend on random inputs, in each precision, with a
// relative-error bound per op (ggml's test-backend-ops idea). Inputs are f32 and plain
// on both sides; under bf16/tf32 the CUDA ops convert them as layers' inputs would be.
#include <gtest/gtest.h>

#include "engine/backend/ops.h"
#include "tests/cuda/cuda_test_util.h"

namespace dpb {
namespace {

using test::rel_error;
using test::random_tensor;
using test::tolerance;

const Device kGpu = Device::cuda(0);

class CudaOps : public ::testing::TestWithParam<Precision> {
 protected:
  void SetUp() override { DPB_REQUIRE_GPU(); }
  double tol(double fp32 = 1e-4) const { return tolerance(GetParam(), fp32); }
};

struct ConvCase {
  Shape x, w;
  int stride, pad;
  bool bias;
};

TEST_P(CudaOps, Conv2dForwardBackwardMatchCpu) {
  test::PrecisionScope scope(GetParam());
  const ConvCase cases[] = {{{3, 5, 9, 9}, {7, 5, 3, 3}, 1, 1, false},
                            {{2, 4, 8, 8}, {6, 4, 1, 1}, 2, 0, false},
                            {{2, 3, 28, 28}, {6, 3, 5, 5}, 1, 2, true},
                            {{4, 16, 8, 8}, {32, 16, 3, 3}, 2, 1, false}};
  uint64_t seed = 10;
  for (const auto& c : cases) {
    SCOPED_TRACE("x " + c.x.str() + " w " + c.w.str());
    Tensor x = random_tensor(c.x, seed++), w = random_tensor(c.w, seed++, 0.2f);
    Tensor b = c.bias ? random_tensor({c.w[0]}, seed++) : Tensor();
    const ops::Conv2dParams p{c.stride, c.pad};
    Tensor y = ops::conv2d_forward(x, w, b, p);
    Tensor gx = x.to(kGpu), gw = w.to(kGpu), gb = b.defined() ? b.to(kGpu) : Tensor();
    Tensor gy = ops::conv2d_forward(gx, ops::compute_weight(gw), gb, p);
    EXPECT_EQ(gy.shape(), y.shape());
    EXPECT_EQ(gy.dtype(), compute_dtype(kGpu));
    EXPECT_LT(rel_error(gy, y), tol());

    Tensor dy = random_tensor(y.shape(), seed++);
    Tensor dx = Tensor::empty(x.shape());
    ops::conv2d_backward_data(dy, w, dx, p);
    Tensor gdx = Tensor::empty(x.shape(), kGpu);
    ops::conv2d_backward_data(dy.to(kGpu), gw, gdx, p);
    EXPECT_LT(rel_error(gdx, dx), tol());

    // Weight gradients, overwritten then accumulated (gradient accumulation).
    Tensor dw = Tensor::empty(w.shape()), db = c.bias ? Tensor::empty({c.w[0]}) : Tensor();
    Tensor gdw = Tensor::empty(w.shape(), kGpu), gdb = c.bias ? Tensor::empty({c.w[0]}, kGpu) : Tensor();
    for (bool acc : {false, true}) {
      ops::conv2d_backward_weights(x, dy, dw, db, p, acc);
      ops::conv2d_backward_weights(gx, dy.to(kGpu), gdw, gdb, p, acc);
      EXPECT_LT(rel_error(gdw, dw), tol(2e-4)) << "accumulate " << acc;
      if (c.bias) {
        EXPECT_LT(rel_error(gdb, db), tol(2e-4)) << "accumulate " << acc;
      }
    }
  }
}

TEST_P(CudaOps, LinearForwardBackwardMatchCpu) {
  test::PrecisionScope scope(GetParam());
  Tensor x = random_tensor({5, 37}, 1), w = random_tensor({9, 37}, 2, 0.3f), b = random_tensor({9}, 3);
  Tensor y = Tensor::empty({5, 9}), gy = Tensor::empty({5, 9}, kGpu);
  ops::linear_forward(x, w, b, y);
  ops::linear_forward(x.to(kGpu), ops::compute_weight(w.to(kGpu)), b.to(kGpu), gy);
  EXPECT_LT(rel_error(gy, y), tol());
  Tensor dy = random_tensor({5, 9}, 4);
  Tensor dx = Tensor::empty(x.shape()), gdx = Tensor::empty(x.shape(), kGpu);
  ops::linear_backward_data(dy, w, dx);
  ops::linear_backward_data(dy.to(kGpu), w.to(kGpu), gdx);
  EXPECT_LT(rel_error(gdx, dx), tol());
  Tensor dw = Tensor::empty(w.shape()), db = Tensor::empty({9});
  Tensor gdw = Tensor::empty(w.shape(), kGpu), gdb = Tensor::empty({9}, kGpu);
  for (bool acc : {false, true}) {
    ops::linear_backward_weights(x, dy, dw, db, acc);
    ops::linear_backward_weights(x.to(kGpu), dy.to(kGpu), gdw, gdb, acc);
    EXPECT_LT(rel_error(gdw, dw), tol()) << "accumulate " << acc;
    EXPECT_LT(rel_error(gdb, db), tol()) << "accumulate " << acc;
  }
}

// Activations as the layers before them leave them: in the compute dtype, and for 4-d
// tensors in the convolution layout.
Tensor as_activation(const Tensor& t) {
  Tensor g = t.to(kGpu).to_dtype(compute_dtype(kGpu));
  if (g.ndim() == 4 && precision() != Precision::fp32) g = g.to_layout(Layout::nhwc);
  return g;
}

TEST_P(CudaOps, BatchNormMatchesCpu) {
  test::PrecisionScope scope(GetParam());
  const int64_t C = 6;
  Tensor x = random_tensor({4, C, 5, 5}, 7, 2.0f), g = random_tensor({C}, 8), b = random_tensor({C}, 9);
  Tensor rm = Tensor::zeros({C}), rv = Tensor::full({C}, 1.0f);
  Tensor grm = rm.to(kGpu), grv = rv.to(kGpu), gg = g.to(kGpu), gb = b.to(kGpu);
  Tensor gx = as_activation(x);
  Tensor y = Tensor::empty_like(x), gy = Tensor::empty_like(gx);
  ops::BatchNormSaved saved, gsaved;
  ops::batchnorm_forward_train(x, g, b, y, saved, rm, rv, 0.1f, 1e-5f);
  ops::batchnorm_forward_train(gx, gg, gb, gy, gsaved, grm, grv, 0.1f, 1e-5f);
  EXPECT_LT(rel_error(gy, y), tol());
  EXPECT_LT(rel_error(grm, rm), tol());
  EXPECT_LT(rel_error(grv, rv), tol());
  EXPECT_LT(rel_error(gsaved.mean, saved.mean), tol());

  Tensor dy = random_tensor(x.shape(), 10);
  Tensor gdy = as_activation(dy);
  for (bool global : {false, true}) {
    const ops::BatchNormSaved& s = global ? ops::BatchNormSaved{rm, rv, {}} : saved;
    const ops::BatchNormSaved& gs = global ? ops::BatchNormSaved{grm, grv, {}} : gsaved;
    Tensor dx = Tensor::empty_like(x), dg = Tensor::empty({C}), dbeta = Tensor::empty({C});
    Tensor gdx = Tensor::empty_like(gx), gdg = Tensor::empty({C}, kGpu), gdbeta = Tensor::empty({C}, kGpu);
    ops::batchnorm_backward(x, dy, g, s, dx, dg, dbeta, 1e-5f, false, global);
    ops::batchnorm_backward(gx, gdy, gg, gs, gdx, gdg, gdbeta, 1e-5f, false, global);
    EXPECT_LT(rel_error(gdx, dx), tol(2e-4)) << "global stats " << global;
    EXPECT_LT(rel_error(gdg, dg), tol(2e-4)) << "global stats " << global;
    EXPECT_LT(rel_error(gdbeta, dbeta), tol(2e-4)) << "global stats " << global;
  }
  Tensor ye = Tensor::empty_like(x), gye = Tensor::empty_like(gx);
  ops::batchnorm_forward_eval(x, g, b, ye, rm, rv, 1e-5f);
  ops::batchnorm_forward_eval(gx, gg, gb, gye, grm, grv, 1e-5f);
  EXPECT_LT(rel_error(gye, ye), tol());
}

TEST_P(CudaOps, SyncBatchNormPiecesMatchCpu) {
  test::PrecisionScope scope(GetParam());
  const int64_t C = 6;
  // A large mean against the spread: the two-pass statistics must not cancel. The CPU
  // side gets the same (rounded) activations as the GPU.
  Tensor x = random_tensor({4, C, 5, 5}, 11, 2.0f), dy0 = random_tensor({4, C, 5, 5}, 12);
  ops::axpy(1.0f, Tensor::full(x.shape(), 50.0f), x);
  Tensor gx = as_activation(x), gdx = as_activation(dy0);
  x = gx.to_dtype(DType::f32).to_plain().to(Device::cpu());
  Tensor dx = gdx.to_dtype(DType::f32).to_plain().to(Device::cpu());
  Tensor mean = Tensor::empty({C}), m2 = Tensor::empty({C});
  Tensor gmean = Tensor::empty({C}, kGpu), gm2 = Tensor::empty({C}, kGpu);
  ops::batchnorm_stats(x, mean, m2);
  ops::batchnorm_stats(gx, gmean, gm2);
  EXPECT_LT(rel_error(gmean, mean), 1e-5);
  EXPECT_LT(rel_error(gm2, m2), 1e-4);
  Tensor var = m2.clone();
  ops::scale(var, 1.0f / 100.0f);
  Tensor g = random_tensor({C}, 13), mdy = random_tensor({C}, 14), mdyx = random_tensor({C}, 15);
  ops::batchnorm_sync_correction(x, mean, var, 1e-5f, g, mdy, mdyx, dx);
  ops::batchnorm_sync_correction(gx, mean.to(kGpu), var.to(kGpu), 1e-5f, g.to(kGpu), mdy.to(kGpu), mdyx.to(kGpu),
                                 gdx);
  EXPECT_LT(rel_error(gdx, dx), tol());
}

TEST_P(CudaOps, ReluPoolingAndAddMatchCpu) {
  test::PrecisionScope scope(GetParam());
  Tensor x = random_tensor({3, 5, 8, 8}, 11), gx = as_activation(x);
  Tensor y = Tensor::empty_like(x), gy = Tensor::empty_like(gx);
  ops::relu_forward(x, y);
  ops::relu_forward(gx, gy);
  EXPECT_LT(rel_error(gy, y), tol(1e-6));
  Tensor dy = random_tensor(x.shape(), 12), gdy = as_activation(dy);
  Tensor dx = Tensor::empty_like(x);
  ops::relu_backward(y, dy, dx);
  ops::relu_backward(gy, gdy, gdy);  // in place, as the layer runs it
  EXPECT_LT(rel_error(gdy, dx), tol(1e-6));

  // Pooling input with distinct values in every plane that bf16 holds exactly, so every
  // window has one maximum whatever the precision: (h*8 + w)*37 mod 64 permutes the
  // plane's 64 positions; halves up to 36 need 7 mantissa bits.
  std::vector<float> pv(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) pv[static_cast<size_t>(i)] = static_cast<float>((i % 64) * 37 % 64) * 0.5f + static_cast<float>((i / 64) % 5);
  x = Tensor::from_vector(x.shape(), pv);
  gx = as_activation(x);
  for (auto kind : {ops::PoolKind::max, ops::PoolKind::avg}) {
    for (ops::Pool2dParams p : {ops::Pool2dParams{2, 2, 0}, ops::Pool2dParams{3, 2, 1}}) {
      SCOPED_TRACE(std::string(kind == ops::PoolKind::max ? "max" : "avg") + " kernel " + std::to_string(p.kernel));
      const Shape ys{3, 5, ops::window_out(8, p.kernel, p.stride, p.padding),
                     ops::window_out(8, p.kernel, p.stride, p.padding)};
      Tensor py = Tensor::empty(ys), ws, gws;
      Tensor gpy = Tensor::empty(ys, kGpu, gx.dtype(), gx.layout());
      ops::pool2d_forward(kind, x, py, ws, p);
      ops::pool2d_forward(kind, gx, gpy, gws, p);
      EXPECT_LT(rel_error(gpy, py), tol(1e-6));
      Tensor pdy = random_tensor(ys, 13), pdx = Tensor::empty_like(x), gpdx = Tensor::empty_like(gx);
      ops::pool2d_backward(kind, x, py, pdy, ws, pdx, p);
      ops::pool2d_backward(kind, gx, gpy, as_activation(pdy), gws, gpdx, p);
      EXPECT_LT(rel_error(gpdx, pdx), tol(1e-5));
    }
  }

  Tensor gap = Tensor::empty({3, 5}), ggap = Tensor::empty({3, 5}, kGpu, gx.dtype());
  ops::global_avgpool_forward(x, gap);
  ops::global_avgpool_forward(gx, ggap);
  EXPECT_LT(rel_error(ggap, gap), tol());
  Tensor gdyp = random_tensor({3, 5}, 14), gapdx = Tensor::empty_like(x), ggapdx = Tensor::empty_like(gx);
  ops::global_avgpool_backward(gdyp, gapdx);
  ops::global_avgpool_backward(gdyp.to(kGpu).to_dtype(gx.dtype()), ggapdx);
  EXPECT_LT(rel_error(ggapdx, gapdx), tol());

  Tensor a = random_tensor(x.shape(), 15), ga = as_activation(a), s = Tensor::empty_like(x), gs = Tensor::empty_like(gx);
  ops::add(x, a, s);
  ops::add(gx, ga, gs);
  EXPECT_LT(rel_error(gs, s), tol(1e-6));
}

TEST_P(CudaOps, LossesMatchCpu) {
  test::PrecisionScope scope(GetParam());
  Tensor logits = random_tensor({37, 10}, 16, 3.0f);
  std::vector<int32_t> labels(37);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>((i * 7) % 10);
  Tensor y = Tensor::from_labels(labels);
  Tensor dz = Tensor::empty(logits.shape());
  int64_t correct = 0, gcorrect = 0;
  const float loss = ops::softmax_cross_entropy(logits, y, dz, &correct);
  Tensor glogits = logits.to(kGpu).to_dtype(compute_dtype(kGpu));
  Tensor gdz = Tensor::empty(logits.shape(), kGpu, glogits.dtype());
  const float gloss = ops::softmax_cross_entropy(glogits, y.to(kGpu), gdz, &gcorrect);
  EXPECT_NEAR(gloss, loss, tol(1e-5) * std::fabs(loss));
  EXPECT_LT(rel_error(gdz, dz), tol(1e-5));
  if (GetParam() != Precision::bf16) {
    EXPECT_EQ(gcorrect, correct);
  }
  // Deferred: the same totals, read later.
  Tensor gdz2 = Tensor::empty(logits.shape(), kGpu, glogits.dtype());
  const Tensor totals = ops::softmax_cross_entropy_deferred(glogits, y.to(kGpu), gdz2);
  int64_t dcorrect = 0;
  EXPECT_FLOAT_EQ(ops::read_cross_entropy(totals, 37, 10, &dcorrect), gloss);
  EXPECT_EQ(dcorrect, gcorrect);

  Tensor pred = random_tensor({6, 4}, 17), target = random_tensor({6, 4}, 18);
  Tensor dp = Tensor::empty(pred.shape()), gdp = Tensor::empty(pred.shape(), kGpu);
  const float mse = ops::mse_loss(pred, target, dp);
  const float gmse = ops::mse_loss(pred.to(kGpu), target.to(kGpu), gdp);
  EXPECT_NEAR(gmse, mse, 1e-5f * mse);
  EXPECT_LT(rel_error(gdp, dp), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Precisions, CudaOps, ::testing::Values(Precision::fp32, Precision::tf32, Precision::bf16),
                         [](const auto& info) { return std::string(precision_name(info.param)); });

TEST(CudaOpsErrors, LabelOutOfRangeIsAClearError) {
  DPB_REQUIRE_GPU();
  Tensor logits = random_tensor({4, 10}, 1).to(kGpu);
  Tensor y = Tensor::from_labels({1, 2, 10, 3}).to(kGpu), dz;
  try {
    ops::softmax_cross_entropy(logits, y, dz, nullptr);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("1 of 4 labels outside [0, 10)"), std::string::npos) << e.what();
  }
}

TEST(CudaOptimizers, SgdAndAdamMatchCpu) {
  DPB_REQUIRE_GPU();
  for (bool nesterov : {false, true}) {
    Tensor p = random_tensor({1000}, 1), g = random_tensor({1000}, 2), buf = Tensor::empty({1000});
    Tensor gp = p.to(kGpu), gg = g.to(kGpu), gbuf = Tensor::empty({1000}, kGpu);
    const ops::SgdHyper h{0.1f, 0.9f, 0.0f, 1e-3f, nesterov};
    for (int step = 0; step < 3; ++step) {
      ops::sgd_step(p, g, buf, h, step == 0);
      ops::sgd_step(gp, gg, gbuf, h, step == 0);
    }
    EXPECT_LT(rel_error(gp, p), 1e-6) << "nesterov " << nesterov;
  }
  for (bool decoupled : {false, true}) {
    Tensor p = random_tensor({1000}, 3), g = random_tensor({1000}, 4);
    Tensor m = Tensor::zeros({1000}), v = Tensor::zeros({1000});
    Tensor gp = p.to(kGpu), gg = g.to(kGpu), gm = m.to(kGpu), gv = v.to(kGpu);
    const ops::AdamHyper h{1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f, decoupled};
    for (int64_t step = 1; step <= 3; ++step) {
      ops::adam_step(p, g, m, v, h, step);
      ops::adam_step(gp, gg, gm, gv, h, step);
    }
    EXPECT_LT(rel_error(gp, p), 1e-6) << (decoupled ? "adamw" : "adam");
  }
  Tensor x = random_tensor({100}, 5), acc = random_tensor({100}, 6), gacc = acc.to(kGpu);
  ops::axpy(0.25f, x, acc);
  ops::axpy(0.25f, x.to(kGpu), gacc);
  ops::scale(acc, -3.0f);
  ops::scale(gacc, -3.0f);
  EXPECT_LT(rel_error(gacc, acc), 1e-6);
}

}  // namespace
}  // namespace dpb
