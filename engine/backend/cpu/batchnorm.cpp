// Batch normalisation on oneDNN (training, inference, backward), with the running
// statistics kept the way PyTorch keeps them.
#include <cmath>
#include <vector>

#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/cpu/dnnl_util.h"

namespace dpb::cpu {

namespace {
using namespace dnnl;
const auto kScaleShift = normalization_flags::use_scale | normalization_flags::use_shift;

struct BnFwd {
  batch_normalization_forward::primitive_desc pd;
  batch_normalization_forward prim;
};
struct BnBwd {
  batch_normalization_backward prim;
};

// kind: 0 training with batch statistics, 1 inference, 2 training with global statistics
// (only as the hint for a global-statistics backward).
std::shared_ptr<BnFwd> get_forward(CpuContext& ctx, const dims& d, Layout l, float eps, int kind) {
  return ctx.cached<BnFwd>(key("bn_fwd", kind, d[0], d[1], d[2], d[3], static_cast<int64_t>(eps * 1e9f),
                               static_cast<int>(l)),
                           [&] {
                             auto flags = kind == 0 ? kScaleShift : (kScaleShift | normalization_flags::use_global_stats);
                             batch_normalization_forward::desc desc(
                                 kind == 1 ? prop_kind::forward_inference : prop_kind::forward_training,
                                 md4(d, l), eps, flags);
                             batch_normalization_forward::primitive_desc pd(desc, user_scratchpad(), ctx.engine());
                             return BnFwd{pd, batch_normalization_forward(pd)};
                           });
}
}  // namespace

void batchnorm_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                             ops::BatchNormSaved& saved, Tensor& running_mean, Tensor& running_var,
                             float momentum, float eps) {
  auto& ctx = context(x.device().index);
  const dims d = dims4(x);
  const int64_t C = d[1];
  if (!saved.mean.defined() || saved.mean.numel() != C) {
    saved.mean = Tensor::empty({C}, x.device());
    saved.var = Tensor::empty({C}, x.device());
  }
  auto f = get_forward(ctx, d, x.layout(), eps, 0);
  auto cmd = md({C}, tag::x);
  run(ctx, f->prim,
      {{DNNL_ARG_SRC, mem(md4(x), ctx, x)},
       {DNNL_ARG_DST, mem(md4(y), ctx, y)},
       {DNNL_ARG_SCALE, mem(cmd, ctx, gamma)},
       {DNNL_ARG_SHIFT, mem(cmd, ctx, beta)},
       {DNNL_ARG_MEAN, mem(cmd, ctx, saved.mean)},
       {DNNL_ARG_VARIANCE, mem(cmd, ctx, saved.var)}});
  const double n = static_cast<double>(d[0] * d[2] * d[3]);
  const float unbias = n > 1 ? static_cast<float>(n / (n - 1)) : 1.0f;
  const float* mean = saved.mean.data();
  const float* var = saved.var.data();
  float* rm = running_mean.data();
  float* rv = running_var.data();
  for (int64_t c = 0; c < C; ++c) {
    rm[c] = (1.0f - momentum) * rm[c] + momentum * mean[c];
    rv[c] = (1.0f - momentum) * rv[c] + momentum * var[c] * unbias;
  }
}

void batchnorm_forward_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                            const Tensor& running_mean, const Tensor& running_var, float eps) {
  auto& ctx = context(x.device().index);
  const dims d = dims4(x);
  auto f = get_forward(ctx, d, x.layout(), eps, 1);
  auto cmd = md({d[1]}, tag::x);
  run(ctx, f->prim,
      {{DNNL_ARG_SRC, mem(md4(x), ctx, x)},
       {DNNL_ARG_DST, mem(md4(y), ctx, y)},
       {DNNL_ARG_SCALE, mem(cmd, ctx, gamma)},
       {DNNL_ARG_SHIFT, mem(cmd, ctx, beta)},
       {DNNL_ARG_MEAN, mem(cmd, ctx, running_mean)},
       {DNNL_ARG_VARIANCE, mem(cmd, ctx, running_var)}});
}

void batchnorm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const ops::BatchNormSaved& saved,
                        Tensor& dx, Tensor& dgamma, Tensor& dbeta, float eps, bool accumulate, bool global_stats) {
  auto& ctx = context(x.device().index);
  const dims d = dims4(x);
  const Layout l = x.layout();
  auto b = ctx.cached<BnBwd>(key("bn_bwd", d[0], d[1], d[2], d[3], static_cast<int64_t>(eps * 1e9f),
                                 static_cast<int>(l), global_stats),
                             [&] {
    const auto flags = global_stats ? (kScaleShift | normalization_flags::use_global_stats) : kScaleShift;
    batch_normalization_backward::desc desc(prop_kind::backward, md4(d, l), md4(d, l), eps, flags);
    batch_normalization_backward::primitive_desc pd(desc, user_scratchpad(), ctx.engine(),
                                                    get_forward(ctx, d, l, eps, global_stats ? 2 : 0)->pd);
    return BnBwd{batch_normalization_backward(pd)};
  });
  Tensor dg = accumulate ? Tensor::empty(dgamma.shape(), dgamma.device()) : dgamma;
  Tensor dbt = accumulate ? Tensor::empty(dbeta.shape(), dbeta.device()) : dbeta;
  auto cmd = md({d[1]}, tag::x);
  run(ctx, b->prim,
      {{DNNL_ARG_SRC, mem(md4(x), ctx, x)},
       {DNNL_ARG_DIFF_DST, mem(md4(dy), ctx, dy)},
       {DNNL_ARG_MEAN, mem(cmd, ctx, saved.mean)},
       {DNNL_ARG_VARIANCE, mem(cmd, ctx, saved.var)},
       {DNNL_ARG_SCALE, mem(cmd, ctx, gamma)},
       // oneDNN 2.6 validates a SHIFT argument in backward although it never reads it.
       {DNNL_ARG_SHIFT, mem(cmd, ctx, gamma)},
       {DNNL_ARG_DIFF_SRC, mem(md4(dx), ctx, dx)},
       {DNNL_ARG_DIFF_SCALE, mem(cmd, ctx, dg)},
       {DNNL_ARG_DIFF_SHIFT, mem(cmd, ctx, dbt)}});
  if (accumulate) {
    axpy(1.0f, dg, dgamma);
    axpy(1.0f, dbt, dbeta);
  }
}

}  // namespace dpb::cpu

namespace dpb::cpu {

namespace {
// Calls f(channel, offset) for every element of a 4-d tensor in its storage layout.
template <typename F>
void for_each_element(const Tensor& t, F&& f) {
  const int64_t N = t.size(0), C = t.size(1), HW = t.size(2) * t.size(3);
  const int64_t b = layout_block(t.layout());
  if (t.layout() == Layout::nhwc) {
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i)
        for (int64_t c = 0; c < C; ++c) f(c, (n * HW + i) * C + c);
    return;
  }
  if (b == 1) {
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t i = 0; i < HW; ++i) f(c, (n * C + c) * HW + i);
    return;
  }
  const int64_t CB = (C + b - 1) / b;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t cb = 0; cb < CB; ++cb)
      for (int64_t i = 0; i < HW; ++i)
        for (int64_t k = 0; k < b && cb * b + k < C; ++k) f(cb * b + k, ((n * CB + cb) * HW + i) * b + k);
}
}  // namespace

void batchnorm_stats(const Tensor& x, Tensor& mean, Tensor& m2) {
  const int64_t C = x.size(1);
  const double n = static_cast<double>(x.size(0) * x.size(2) * x.size(3));
  std::vector<double> s(static_cast<size_t>(C), 0.0), ss(static_cast<size_t>(C), 0.0);
  const float* p = x.data();
  for_each_element(x, [&](int64_t c, int64_t o) { s[static_cast<size_t>(c)] += p[o]; });
  for (auto& v : s) v = n > 0 ? v / n : 0.0;
  for_each_element(x, [&](int64_t c, int64_t o) {
    const double d = p[o] - s[static_cast<size_t>(c)];
    ss[static_cast<size_t>(c)] += d * d;
  });
  for (int64_t c = 0; c < C; ++c) {
    mean.data()[c] = static_cast<float>(s[static_cast<size_t>(c)]);
    m2.data()[c] = static_cast<float>(ss[static_cast<size_t>(c)]);
  }
}

void batchnorm_sync_correction(const Tensor& x, const Tensor& mean, const Tensor& var, float eps, const Tensor& gamma,
                               const Tensor& mean_dy, const Tensor& mean_dy_xhat, Tensor& dx) {
  const int64_t C = x.size(1);
  std::vector<float> inv(static_cast<size_t>(C)), k1(static_cast<size_t>(C)), k2(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    inv[static_cast<size_t>(c)] = 1.0f / std::sqrt(var.data()[c] + eps);
    k1[static_cast<size_t>(c)] = gamma.data()[c] * inv[static_cast<size_t>(c)];
    k2[static_cast<size_t>(c)] = mean_dy.data()[c];
  }
  const float* xp = x.data();
  float* dp = dx.data();
  const float* m = mean.data();
  const float* g2 = mean_dy_xhat.data();
  for_each_element(x, [&](int64_t c, int64_t o) {
    const auto ci = static_cast<size_t>(c);
    const float xhat = (xp[o] - m[c]) * inv[ci];
    dp[o] -= k1[ci] * (k2[ci] + xhat * g2[c]);
  });
}

}  // namespace dpb::cpu
