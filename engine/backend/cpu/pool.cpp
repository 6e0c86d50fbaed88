// Max/average pooling and global average pooling on oneDNN.
#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/cpu/dnnl_util.h"
#include "engine/backend/cpu/fast_math.h"

#include <algorithm>

namespace dpb::cpu {

namespace {
using namespace dnnl;

struct PoolFwd {
  pooling_forward::primitive_desc pd;
  pooling_forward prim;
};
struct PoolBwd {
  pooling_backward prim;
};

algorithm alg(ops::PoolKind k) {
  // PyTorch's AvgPool2d counts padding by default (count_include_pad=True).
  return k == ops::PoolKind::max ? algorithm::pooling_max : algorithm::pooling_avg_include_padding;
}

struct Window {
  dims kernel, strides, pad;
};

std::shared_ptr<PoolFwd> get_forward(CpuContext& ctx, ops::PoolKind k, const dims& src, const dims& dst, Layout l,
                                     const Window& w) {
  return ctx.cached<PoolFwd>(key("pool_fwd", static_cast<int>(k), src[0], src[1], src[2], src[3], w.kernel[0],
                                 w.kernel[1], w.strides[0], w.strides[1], w.pad[0], static_cast<int>(l)),
                             [&] {
                               pooling_forward::desc d(prop_kind::forward_training, alg(k), md4(src, l),
                                                       md4(dst, l), w.strides, w.kernel, w.pad, w.pad);
                               pooling_forward::primitive_desc pd(d, user_scratchpad(), ctx.engine());
                               return PoolFwd{pd, pooling_forward(pd)};
                             });
}

// y is written in x's layout (for global pooling, (N, C, 1, 1) in a blocked layout has
// the same memory order as plain (N, C)).
void forward(ops::PoolKind k, const Tensor& x, Tensor& y, Tensor* workspace, const dims& ydims, const Window& w) {
  auto& ctx = context(x.device().index);
  const dims src = dims4(x);
  const Layout l = x.layout();
  auto f = get_forward(ctx, k, src, ydims, l, w);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, mem(md4(x), ctx, x)},
                                       {DNNL_ARG_DST, mem(md4(ydims, l), ctx, y)}};
  const auto ws_md = f->pd.workspace_desc();
  if (ws_md.get_size() > 0) {
    DPB_CHECK(workspace != nullptr) << "max pooling needs a workspace";
    const auto words = static_cast<int64_t>((ws_md.get_size() + 3) / 4);
    if (!workspace->defined() || workspace->numel() < words) *workspace = Tensor::empty({words}, x.device());
    args.emplace(DNNL_ARG_WORKSPACE, memory(ws_md, ctx.engine(), workspace->data()));
  }
  run(ctx, f->prim, args);
}

void backward(ops::PoolKind k, const Tensor& dy, const Tensor* workspace, Tensor& dx, const dims& dst,
              const Window& w) {
  auto& ctx = context(dy.device().index);
  const dims src = dims4(dx);
  const Layout l = dx.layout();
  auto f = get_forward(ctx, k, src, dst, l, w);
  auto b = ctx.cached<PoolBwd>(key("pool_bwd", static_cast<int>(k), src[0], src[1], src[2], src[3], w.kernel[0],
                                   w.kernel[1], w.strides[0], w.strides[1], w.pad[0], static_cast<int>(l)),
                               [&] {
                                 pooling_backward::desc d(alg(k), md4(src, l), md4(dst, l), w.strides, w.kernel,
                                                          w.pad, w.pad);
                                 pooling_backward::primitive_desc pd(d, user_scratchpad(), ctx.engine(), f->pd);
                                 return PoolBwd{pooling_backward(pd)};
                               });
  std::unordered_map<int, memory> args{{DNNL_ARG_DIFF_DST, mem(md4(dst, l), ctx, dy)},
                                       {DNNL_ARG_DIFF_SRC, mem(md4(dx), ctx, dx)}};
  const auto ws_md = f->pd.workspace_desc();
  if (ws_md.get_size() > 0) {
    DPB_CHECK(workspace != nullptr && workspace->defined()) << "max-pool backward without the forward's workspace";
    args.emplace(DNNL_ARG_WORKSPACE, memory(ws_md, ctx.engine(), workspace->data()));
  }
  run(ctx, b->prim, args);
}
}  // namespace

namespace {
// 2 x 2 max pooling with stride 2 and no padding (LeNet's, VGG's), our own loops: several
// times faster than oneDNN 2.6's on LeNet's first pooling (64 x 6 x 28 x 28,
// channels-last), measured in reports/results/cpu-speed-scaling-2026-11-25.md. Every layout is planes of H x W vectors of V
// contiguous channels: plain (N*C planes, V = 1), channel-blocked (N * C/b planes,
// V = b) and channels-last (N planes, V = C). The workspace holds, for each output
// element, the position (h * W + w) of its maximum in its plane; the first maximum
// wins and NaN propagates, as in PyTorch.
bool own_max_pool(ops::PoolKind kind, const ops::Pool2dParams& p) {
  return kind == ops::PoolKind::max && p.kernel == 2 && p.stride == 2 && p.padding == 0;
}

struct Planes {
  int64_t count, vec;
};

Planes planes_of(const Tensor& t) {
  const int64_t N = t.size(0), C = t.size(1);
  if (t.layout() == Layout::nhwc) return {N, C};
  const int64_t b = layout_block(t.layout());
  return {N * ((C + b - 1) / b), b};
}

// One output row from input rows a and b (= a + one row).
template <int kV>
DPB_SIMD_INLINE void max2x2_row(const float* a, const float* b, float* y, int32_t* arg, int64_t Wo, int64_t W, int64_t v_dyn,
                       int32_t row_pos) {
  const int64_t V = kV > 0 ? kV : v_dyn;
  for (int64_t ow = 0; ow < Wo; ++ow) {
    const float *c0 = a + 2 * ow * V, *c1 = c0 + V, *c2 = b + 2 * ow * V, *c3 = c2 + V;
    const int32_t p0 = row_pos + static_cast<int32_t>(2 * ow), p1 = p0 + 1, p2 = p0 + static_cast<int32_t>(W),
                  p3 = p2 + 1;
    float* yo = y + ow * V;
    int32_t* ao = arg + ow * V;
#pragma omp simd
    for (int64_t v = 0; v < V; ++v) {
      float m = c0[v];
      int32_t at = p0;
      bool take = (c1[v] > m) | (c1[v] != c1[v]);
      m = take ? c1[v] : m;
      at = take ? p1 : at;
      take = (c2[v] > m) | (c2[v] != c2[v]);
      m = take ? c2[v] : m;
      at = take ? p2 : at;
      take = (c3[v] > m) | (c3[v] != c3[v]);
      m = take ? c3[v] : m;
      at = take ? p3 : at;
      yo[v] = m;
      ao[v] = at;
    }
  }
}

// One plane's output rows.
DPB_SIMD_INLINE void max2x2_forward_plane_body(const float* x, float* y, int32_t* arg, int64_t o, int64_t V, int64_t H,
                                               int64_t W) {
  const int64_t Ho = H / 2, Wo = W / 2;
  for (int64_t oh = 0; oh < Ho; ++oh) {
    const float* a = x + (o * H + 2 * oh) * W * V;
    const int64_t at = (o * Ho + oh) * Wo * V;
    const auto row_pos = static_cast<int32_t>(2 * oh * W);
    if (V == 1) max2x2_row<1>(a, a + W, y + at, arg + at, Wo, W, V, row_pos);
    else if (V == 8) max2x2_row<8>(a, a + W * 8, y + at, arg + at, Wo, W, V, row_pos);
    else if (V == 16) max2x2_row<16>(a, a + W * 16, y + at, arg + at, Wo, W, V, row_pos);
    else max2x2_row<0>(a, a + W * V, y + at, arg + at, Wo, W, V, row_pos);
  }
}
DPB_SIMD_KERNEL(void, max2x2_forward_plane,
                (const float* x, float* y, int32_t* arg, int64_t o, int64_t V, int64_t H, int64_t W),
                (x, y, arg, o, V, H, W))

void max2x2_forward(const float* x, float* y, int32_t* arg, Planes pl, int64_t H, int64_t W) {
#pragma omp parallel for schedule(static) if (pl.count * H * W * pl.vec > (1 << 16))
  for (int64_t o = 0; o < pl.count; ++o) max2x2_forward_plane(x, y, arg, o, pl.vec, H, W);
}

// Each input position lies in at most one window: it gets its window's gradient where
// it was the maximum, zero elsewhere (and zero in a last odd row or column).
DPB_SIMD_INLINE void max2x2_backward_plane_body(const float* dy, const int32_t* arg, float* dx, int64_t o, int64_t V,
                                                int64_t H, int64_t W) {
  const int64_t Ho = H / 2, Wo = W / 2;
  float* plane = dx + o * H * W * V;
  for (int64_t oh = 0; oh < Ho; ++oh) {
    float *a = plane + 2 * oh * W * V, *b = a + W * V;
    const int64_t at = (o * Ho + oh) * Wo * V;
    const auto row_pos = static_cast<int32_t>(2 * oh * W);
    for (int64_t ow = 0; ow < Wo; ++ow) {
      const float* g = dy + at + ow * V;
      const int32_t* m = arg + at + ow * V;
      const int32_t p0 = row_pos + static_cast<int32_t>(2 * ow), p2 = p0 + static_cast<int32_t>(W);
      float *d0 = a + 2 * ow * V, *d1 = d0 + V, *d2 = b + 2 * ow * V, *d3 = d2 + V;
#pragma omp simd
      for (int64_t v = 0; v < V; ++v) {
        d0[v] = m[v] == p0 ? g[v] : 0.0f;
        d1[v] = m[v] == p0 + 1 ? g[v] : 0.0f;
        d2[v] = m[v] == p2 ? g[v] : 0.0f;
        d3[v] = m[v] == p2 + 1 ? g[v] : 0.0f;
      }
    }
    if (W % 2 != 0) {
      std::fill_n(a + (W - 1) * V, V, 0.0f);
      std::fill_n(b + (W - 1) * V, V, 0.0f);
    }
  }
  if (H % 2 != 0) std::fill_n(plane + (H - 1) * W * V, W * V, 0.0f);
}
DPB_SIMD_KERNEL(void, max2x2_backward_plane,
                (const float* dy, const int32_t* arg, float* dx, int64_t o, int64_t V, int64_t H, int64_t W),
                (dy, arg, dx, o, V, H, W))

void max2x2_backward(const float* dy, const int32_t* arg, float* dx, Planes pl, int64_t H, int64_t W) {
#pragma omp parallel for schedule(static) if (pl.count * H * W * pl.vec > (1 << 16))
  for (int64_t o = 0; o < pl.count; ++o) max2x2_backward_plane(dy, arg, dx, o, pl.vec, H, W);
}
}  // namespace

void pool2d_forward(ops::PoolKind kind, const Tensor& x, Tensor& y, Tensor& workspace, const ops::Pool2dParams& p) {
  if (own_max_pool(kind, p)) {
    const Planes pl = planes_of(x);
    const int64_t outputs = pl.count * y.size(2) * y.size(3) * pl.vec;
    if (!workspace.defined() || workspace.numel() < outputs || workspace.dtype() != DType::i32)
      workspace = Tensor::empty({outputs}, x.device(), DType::i32);
    max2x2_forward(x.data(), y.data(), workspace.data_i32(), pl, x.size(2), x.size(3));
    return;
  }
  forward(kind, x, y, &workspace, dims4(y), {{p.kernel, p.kernel}, {p.stride, p.stride}, {p.padding, p.padding}});
}

void pool2d_backward(ops::PoolKind kind, const Tensor& /*x*/, const Tensor& /*y*/, const Tensor& dy,
                     const Tensor& workspace, Tensor& dx, const ops::Pool2dParams& p) {
  if (own_max_pool(kind, p)) {
    DPB_CHECK(workspace.defined() && workspace.dtype() == DType::i32)
        << "max-pool backward without the forward's workspace";
    max2x2_backward(dy.data(), workspace.data_i32(), dx.data(), planes_of(dx), dx.size(2), dx.size(3));
    return;
  }
  backward(kind, dy, &workspace, dx, dims4(dy), {{p.kernel, p.kernel}, {p.stride, p.stride}, {p.padding, p.padding}});
}

// y is (N, C) plain. A blocked (N, C, 1, 1) has the same memory order when C fills
// whole channel blocks; with channel padding it goes through a blocked temporary.
void global_avgpool_forward(const Tensor& x, Tensor& y) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const Window w{{H, W}, {H, W}, {0, 0}};
  if (C % layout_block(x.layout()) == 0) {
    forward(ops::PoolKind::avg, x, y, nullptr, {N, C, 1, 1}, w);
    return;
  }
  Tensor tmp = Tensor::empty({N, C, 1, 1}, x.device(), DType::f32, x.layout());
  forward(ops::PoolKind::avg, x, tmp, nullptr, {N, C, 1, 1}, w);
  y.copy_from(tmp.to_plain());
}

void global_avgpool_backward(const Tensor& dy, Tensor& dx) {
  const int64_t N = dx.size(0), C = dx.size(1), H = dx.size(2), W = dx.size(3);
  const Window w{{H, W}, {H, W}, {0, 0}};
  if (C % layout_block(dx.layout()) == 0) {
    backward(ops::PoolKind::avg, dy, nullptr, dx, {N, C, 1, 1}, w);
    return;
  }
  Tensor dy_blocked = dy.view({N, C, 1, 1}).to_layout(dx.layout());
  backward(ops::PoolKind::avg, dy_blocked, nullptr, dx, {N, C, 1, 1}, w);
}

}  // namespace dpb::cpu
