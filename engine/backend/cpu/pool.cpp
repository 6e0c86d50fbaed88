// Max/average pooling and global average pooling on oneDNN.
#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/cpu/dnnl_util.h"

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

void pool2d_forward(ops::PoolKind kind, const Tensor& x, Tensor& y, Tensor& workspace, const ops::Pool2dParams& p) {
  forward(kind, x, y, &workspace, dims4(y), {{p.kernel, p.kernel}, {p.stride, p.stride}, {p.padding, p.padding}});
}

void pool2d_backward(ops::PoolKind kind, const Tensor& dy, const Tensor& workspace, Tensor& dx,
                     const ops::Pool2dParams& p) {
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
