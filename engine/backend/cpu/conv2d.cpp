// Convolution on oneDNN: forward, backward-data, backward-weights (+bias).
#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/cpu/dnnl_util.h"

namespace dpb::cpu {

namespace {
using namespace dnnl;

struct ConvShapes {
  dims src, wei, bias, dst, strides, pad;
  bool has_bias;
};

ConvShapes shapes(const Tensor& x, const Tensor& w, const Tensor& y, bool has_bias, const ops::Conv2dParams& p) {
  return {dims4(x), dims4(w), {w.size(0)}, dims4(y), {p.stride, p.stride}, {p.padding, p.padding}, has_bias};
}

std::string conv_key(const char* op, const ConvShapes& s) {
  return key(op, s.src[0], s.src[1], s.src[2], s.src[3], s.wei[0], s.wei[2], s.wei[3], s.strides[0], s.pad[0],
             s.has_bias);
}

convolution_forward::primitive_desc forward_pd(CpuContext& ctx, const ConvShapes& s) {
  auto src = md(s.src, tag::nchw), wei = md(s.wei, tag::oihw), dst = md(s.dst, tag::nchw);
  if (s.has_bias) {
    convolution_forward::desc d(prop_kind::forward_training, algorithm::convolution_direct, src, wei,
                                md(s.bias, tag::x), dst, s.strides, s.pad, s.pad);
    return {d, ctx.engine()};
  }
  convolution_forward::desc d(prop_kind::forward_training, algorithm::convolution_direct, src, wei, dst, s.strides,
                              s.pad, s.pad);
  return {d, ctx.engine()};
}

struct Fwd {
  convolution_forward::primitive_desc pd;
  convolution_forward prim;
};
struct BwdData {
  convolution_backward_data prim;
};
struct BwdWeights {
  convolution_backward_weights prim;
};

std::shared_ptr<Fwd> get_forward(CpuContext& ctx, const ConvShapes& s) {
  return ctx.cached<Fwd>(conv_key("conv_fwd", s), [&] {
    auto pd = forward_pd(ctx, s);
    return Fwd{pd, convolution_forward(pd)};
  });
}
}  // namespace

void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y, const ops::Conv2dParams& p) {
  auto& ctx = context(x.device().index);
  const auto s = shapes(x, w, y, b.defined(), p);
  auto f = get_forward(ctx, s);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, mem(md(s.src, tag::nchw), ctx, x)},
                                       {DNNL_ARG_WEIGHTS, mem(md(s.wei, tag::oihw), ctx, w)},
                                       {DNNL_ARG_DST, mem(md(s.dst, tag::nchw), ctx, y)}};
  if (s.has_bias) args.emplace(DNNL_ARG_BIAS, mem(md(s.bias, tag::x), ctx, b));
  run(ctx, f->prim, args);
}

void conv2d_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx, const ops::Conv2dParams& p) {
  auto& ctx = context(dy.device().index);
  const auto s = shapes(dx, w, dy, false, p);
  auto b = ctx.cached<BwdData>(conv_key("conv_bwd_data", s), [&] {
    convolution_backward_data::desc d(algorithm::convolution_direct, md(s.src, tag::nchw), md(s.wei, tag::oihw),
                                      md(s.dst, tag::nchw), s.strides, s.pad, s.pad);
    convolution_backward_data::primitive_desc pd(d, ctx.engine(), get_forward(ctx, s)->pd);
    return BwdData{convolution_backward_data(pd)};
  });
  run(ctx, b->prim,
      {{DNNL_ARG_DIFF_DST, mem(md(s.dst, tag::nchw), ctx, dy)},
       {DNNL_ARG_WEIGHTS, mem(md(s.wei, tag::oihw), ctx, w)},
       {DNNL_ARG_DIFF_SRC, mem(md(s.src, tag::nchw), ctx, dx)}});
}

void conv2d_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& db,
                             const ops::Conv2dParams& p, bool accumulate) {
  auto& ctx = context(x.device().index);
  const auto s = shapes(x, dw, dy, db.defined(), p);
  auto b = ctx.cached<BwdWeights>(conv_key("conv_bwd_weights", s), [&] {
    auto src = md(s.src, tag::nchw), wei = md(s.wei, tag::oihw), dst = md(s.dst, tag::nchw);
    auto make = [&](const convolution_backward_weights::desc& d) {
      convolution_backward_weights::primitive_desc pd(d, ctx.engine(), get_forward(ctx, s)->pd);
      return BwdWeights{convolution_backward_weights(pd)};
    };
    if (s.has_bias)
      return make({algorithm::convolution_direct, src, wei, md(s.bias, tag::x), dst, s.strides, s.pad, s.pad});
    return make({algorithm::convolution_direct, src, wei, dst, s.strides, s.pad, s.pad});
  });
  // oneDNN overwrites its outputs; to accumulate, compute into scratch and add.
  Tensor dw_out = accumulate ? Tensor::empty(dw.shape(), dw.device()) : dw;
  Tensor db_out = (accumulate && s.has_bias) ? Tensor::empty(db.shape(), db.device()) : db;
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, mem(md(s.src, tag::nchw), ctx, x)},
                                       {DNNL_ARG_DIFF_DST, mem(md(s.dst, tag::nchw), ctx, dy)},
                                       {DNNL_ARG_DIFF_WEIGHTS, mem(md(s.wei, tag::oihw), ctx, dw_out)}};
  if (s.has_bias) args.emplace(DNNL_ARG_DIFF_BIAS, mem(md(s.bias, tag::x), ctx, db_out));
  run(ctx, b->prim, args);
  if (accumulate) {
    axpy(1.0f, dw_out, dw);
    if (s.has_bias) axpy(1.0f, db_out, db);
  }
}

}  // namespace dpb::cpu
