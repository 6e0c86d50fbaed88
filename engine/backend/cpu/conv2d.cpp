// Convolution on oneDNN: forward, backward-data, backward-weights (+bias).
//
// Activations keep their layout (see Tensor): the source is described as it is, the
// destination is written channel-blocked when its channels divide into blocks, and
// weights are left to oneDNN (`any`). Parameters stay plain (O, I, kH, kW), as in
// PyTorch and in checkpoints; they are reordered to the primitive's weight format on
// the way in, and weight gradients back to plain on the way out.
#include "engine/backend/cpu/cpu_ops.h"

#include <atomic>
#include <cstdlib>

#include "engine/backend/cpu/dnnl_util.h"
#include "engine/backend/cpu/winograd.h"
#include "engine/core/log.h"
#include "engine/core/text.h"

namespace dpb::cpu {

namespace {
std::atomic<int> g_algorithms{-1};  // -1: not yet read from DPB_CPU_CONV
}  // namespace

void set_conv_algorithms(ConvAlgorithms a) { g_algorithms = static_cast<int>(a); }

ConvAlgorithms conv_algorithms() {
  int v = g_algorithms.load();
  if (v < 0) {
    const char* e = std::getenv("DPB_CPU_CONV");
    const std::string name = e ? e : "";
    if (name.empty() || name == "auto")
      v = static_cast<int>(ConvAlgorithms::automatic);
    else if (name == "direct")
      v = static_cast<int>(ConvAlgorithms::direct_only);
    else
      DPB_FAIL() << "DPB_CPU_CONV='" << escape_untrusted(name) << "' (valid: auto, direct)";
    int expected = -1;
    g_algorithms.compare_exchange_strong(expected, v);
    v = g_algorithms.load();
  }
  return static_cast<ConvAlgorithms>(v);
}

namespace {
using namespace dnnl;

struct ConvShapes {
  dims src, wei, bias, dst, strides, pad;
  bool has_bias;
  Layout src_layout, dst_layout;
};

ConvShapes shapes(const Tensor& x, const Tensor& w, const dims& y, Layout y_layout, bool has_bias,
                  const ops::Conv2dParams& p) {
  return {dims4(x), dims4(w), {w.size(0)}, y, {p.stride, p.stride}, {p.padding, p.padding}, has_bias, x.layout(),
          y_layout};
}

dims out_dims(const Tensor& x, const Tensor& w, const ops::Conv2dParams& p) {
  return {x.size(0), w.size(0), ops::window_out(x.size(2), static_cast<int>(w.size(2)), p.stride, p.padding),
          ops::window_out(x.size(3), static_cast<int>(w.size(3)), p.stride, p.padding)};
}

std::string conv_key(const char* op, const ConvShapes& s) {
  return key(op, s.src[0], s.src[1], s.src[2], s.src[3], s.wei[0], s.wei[2], s.wei[3], s.strides[0], s.pad[0],
             s.has_bias, static_cast<int>(s.src_layout), static_cast<int>(s.dst_layout),
             static_cast<int>(conv_algorithms()));
}

memory::desc any_weights(const ConvShapes& s) { return memory::desc(s.wei, dt::f32, tag::any); }
memory::desc plain_weights(const ConvShapes& s) { return md(s.wei, tag::oihw); }

struct Fwd {
  convolution_forward::primitive_desc pd;
  convolution_forward prim;
};
struct BwdData {
  convolution_backward_data::primitive_desc pd;
  convolution_backward_data prim;
};
struct BwdWeights {
  convolution_backward_weights::primitive_desc pd;
  convolution_backward_weights prim;
};

convolution_forward::primitive_desc forward_pd(CpuContext& ctx, const ConvShapes& s, algorithm alg) {
  auto src = md4(s.src, s.src_layout), dst = md4(s.dst, s.dst_layout);
  auto d = s.has_bias ? convolution_forward::desc(prop_kind::forward_training, alg, src, any_weights(s),
                                                  md(s.bias, tag::x), dst, s.strides, s.pad, s.pad)
                      : convolution_forward::desc(prop_kind::forward_training, alg, src, any_weights(s), dst,
                                                  s.strides, s.pad, s.pad);
  return convolution_forward::primitive_desc(d, user_scratchpad(), ctx.engine());
}

// The algorithm for this convolution, all three passes: Winograd (F(4x4, 3x3)) for 3x3
// stride-1 convolutions whose output is at least 7x7, where oneDNN has optimised kernels
// for it (AVX-512); else direct. Measured one pass at a time (batch 16, one thread),
// Winograd against direct, it is faster from 7x7 up and slower at 4x4
// (reports/results/cpu-winograd-2026-11-26.md).
// A rule of the shape, not a timing: the same layer runs the same arithmetic in every run
// and on every rank (the two algorithms round differently).
algorithm conv_algorithm(CpuContext& ctx, const ConvShapes& s) {
  struct Choice {
    algorithm alg;
  };
  if (conv_algorithms() == ConvAlgorithms::direct_only) return algorithm::convolution_direct;
  return ctx.cached<Choice>(conv_key("conv_algorithm", s), [&] {
    const bool shape = s.wei[2] == 3 && s.wei[3] == 3 && s.strides[0] == 1 && s.strides[1] == 1 && s.dst[2] >= 7 &&
                       s.dst[3] >= 7;
    if (!shape) return Choice{algorithm::convolution_direct};
    std::string why;
    try {
      const auto wino = forward_pd(ctx, s, algorithm::convolution_winograd);
      why = wino.impl_info_str();
    } catch (const dnnl::error&) {
      why = "none";  // no Winograd kernels for this layout or processor
    }
    const bool wino = why.rfind("ref", 0) != 0 && why != "none";
    log::debug("conv {}x{}x{}x{} -> {} channels, {} source: {} (Winograd kernels: {})", s.src[0], s.src[1], s.src[2],
               s.src[3], s.dst[1], layout_name(s.src_layout), wino ? "Winograd" : "direct", why);
    return Choice{wino ? algorithm::convolution_winograd : algorithm::convolution_direct};
  })->alg;
}

// Our own Winograd F(4x4, 3x3) (winograd.h) where oneDNN has no Winograd kernels
// (processors without AVX-512, or oneDNN held below it): 3x3 stride-1 padding-1
// convolutions of at least 32 channels in and out (in blocks of eight), the forward and
// data gradient where the output is at least 8x8, the weight gradient from 4x4: where,
// measured one pass at a time with oneDNN held to AVX2 (batch 16, one thread), it beats
// oneDNN's direct AVX2 kernels; at 4x4 the 36-point filters (4x the weights) cost as much
// as the products they save, except in the weight gradient, and below 32 channels it can
// lose (reports/results/cpu-winograd-avx2-2026-11-26.md).
// A rule of the shape and the pass, as oneDNN's above.
constexpr int64_t kOwnWinogradMinSide = 8;  // forward and data gradient; the weight gradient from 4
bool own_winograd(CpuContext& ctx, const ConvShapes& s, bool weight_gradient) {
  if (conv_algorithms() == ConvAlgorithms::direct_only) return false;
  const int64_t min_side = weight_gradient ? 4 : kOwnWinogradMinSide;
  const bool shape = s.wei[2] == 3 && s.wei[3] == 3 && s.strides[0] == 1 && s.strides[1] == 1 && s.pad[0] == 1 &&
                     s.pad[1] == 1 && s.src[1] % winograd::kBlock == 0 && s.dst[1] % winograd::kBlock == 0 &&
                     s.src[1] >= 32 && s.dst[1] >= 32 && s.dst[2] >= min_side && s.dst[3] >= min_side;
  if (!shape || blocked_layout() != Layout::nChw8c || !winograd::processor_supported()) return false;
  // Only where oneDNN has no Winograd kernels of its own for this shape in these layouts.
  struct Choice {
    bool own;
  };
  ConvShapes blocked = s;
  blocked.src_layout = blocked.dst_layout = Layout::nChw8c;
  return ctx.cached<Choice>(conv_key("own_winograd", blocked), [&] {
    bool own = true;
    try {
      own = std::string(forward_pd(ctx, blocked, algorithm::convolution_winograd).impl_info_str()).rfind("ref", 0) == 0;
    } catch (const dnnl::error&) {
    }
    log::debug("conv {}x{}x{}x{} -> {} channels: {}", s.src[0], s.src[1], s.src[2], s.src[3], s.dst[1],
               !own ? "oneDNN's Winograd"
               : s.dst[2] >= kOwnWinogradMinSide && s.dst[3] >= kOwnWinogradMinSide
                   ? "our own Winograd F(4x4, 3x3) in all three passes"
                   : "our own Winograd F(4x4, 3x3) in the weight gradient, direct in the others");
    return Choice{own};
  })->own;
}

// A backward pass's primitive in the convolution's algorithm, or direct where oneDNN has no
// Winograd kernels for this pass.
template <typename Pd, typename Make>
Pd with_fallback(algorithm alg, Make&& make) {
  if (alg == algorithm::convolution_direct) return make(alg);
  try {
    return make(alg);
  } catch (const dnnl::error&) {
    return make(algorithm::convolution_direct);
  }
}

std::shared_ptr<Fwd> get_forward(CpuContext& ctx, const ConvShapes& s) {
  return ctx.cached<Fwd>(conv_key("conv_fwd", s), [&] {
    auto pd = forward_pd(ctx, s, conv_algorithm(ctx, s));
    return Fwd{pd, convolution_forward(pd)};
  });
}

// Memory holding `t` (described by `have`) in format `want`: `t` itself when the
// formats agree, else a reorder into `scratch`.
memory in_format(CpuContext& ctx, const memory::desc& have, const memory::desc& want, const Tensor& t,
                 Tensor& scratch) {
  if (have == want) return mem(have, ctx, t);
  const auto words = static_cast<int64_t>((want.get_size() + 3) / 4);
  scratch = Tensor::empty({words}, t.device());
  memory src = mem(have, ctx, t), dst(want, ctx.engine(), scratch.data());
  // Reorder primitives come from oneDNN's own primitive cache after the first call.
  reorder_memory(ctx, src, dst);
  ctx.stream().wait();
  return dst;
}
}  // namespace

namespace {
bool is_reference(const std::string& impl) { return impl.rfind("ref", 0) == 0; }

// The layouts a convolution runs in: the destination blocked (else plain), and for each
// pass the source as given, blocked or plain, whichever oneDNN has optimised kernels for
// first (the passes may differ: for a 1-channel image the forward reads it plain while
// the weight gradient wants it blocked). Converting a small plain source costs
// little and unlocks the direct kernels; PyTorch's oneDNN path does the same. Output
// channels that do not fill whole blocks, or no optimised kernels in any such
// combination, run channels-last (nhwc) when every pass has optimised kernels there;
// else everything runs plain.
struct ConvLayouts {
  Layout dst;
  Layout fwd_src, bwd_weights_src, bwd_data_src;
};

enum class Pass { forward, backward_data, backward_weights };

std::string impl_of(CpuContext& ctx, const ConvShapes& s, Pass pass) {
  auto fwd = get_forward(ctx, s);
  if (pass == Pass::forward) return fwd->pd.impl_info_str();
  auto src = md4(s.src, s.src_layout), dst = md4(s.dst, s.dst_layout);
  if (pass == Pass::backward_data) {
    return convolution_backward_data::primitive_desc(
               convolution_backward_data::desc(algorithm::convolution_direct, src, any_weights(s), dst, s.strides,
                                               s.pad, s.pad),
               user_scratchpad(), ctx.engine(), fwd->pd)
        .impl_info_str();
  }
  return convolution_backward_weights::primitive_desc(
             convolution_backward_weights::desc(algorithm::convolution_direct, src, any_weights(s), dst, s.strides,
                                                s.pad, s.pad),
             user_scratchpad(), ctx.engine(), fwd->pd)
      .impl_info_str();
}

ConvLayouts choose_layouts(CpuContext& ctx, const Tensor& x, const Tensor& w, const dims& yd, bool has_bias,
                           const ops::Conv2dParams& p) {
  auto given = shapes(x, w, yd, blocked_layout(), has_bias, p);
  return *ctx.cached<ConvLayouts>(conv_key("conv_layouts", given) + (p.input_grad ? ":dx" : ""), [&] {
    const Layout b = blocked_layout();
    // The first source layout with optimised kernels for `pass`: as given, blocked, plain.
    auto source_for = [&](Pass pass, Layout* out) {
      for (const Layout src : {x.layout(), b, Layout::plain}) {
        ConvShapes s = given;
        s.src_layout = src;
        if (!is_reference(impl_of(ctx, s, pass))) {
          *out = src;
          return true;
        }
      }
      return false;
    };
    // Channels-last throughout: oneDNN's brgemm and direct kernels take any channel
    // count there (LeNet's 6 -> 16 convolution ran im2col + GEMM otherwise:
    // reports/results/cpu-speed-scaling-2026-11-25.md).
    auto all_nhwc = [&] {
      ConvShapes n = given;
      n.src_layout = n.dst_layout = Layout::nhwc;
      return !is_reference(impl_of(ctx, n, Pass::forward)) && !is_reference(impl_of(ctx, n, Pass::backward_weights)) &&
             (!p.input_grad || !is_reference(impl_of(ctx, n, Pass::backward_data)));
    };
    constexpr ConvLayouts nhwc{Layout::nhwc, Layout::nhwc, Layout::nhwc, Layout::nhwc};
    // Output channels that leave a block part-empty (LeNet's 6 of 16) would carry the
    // padding through every layer after: the activation, the pooling and the next
    // convolution's source all grow by the same factor. Channels-last has no padding.
    ConvLayouts l{b, x.layout(), x.layout(), x.layout()};
    if (given.dst[1] % layout_block(b) != 0 && all_nhwc()) {
      l = nhwc;
    } else if (!(source_for(Pass::forward, &l.fwd_src) && source_for(Pass::backward_weights, &l.bwd_weights_src) &&
                 (!p.input_grad || source_for(Pass::backward_data, &l.bwd_data_src)))) {
      l = all_nhwc() ? nhwc : ConvLayouts{Layout::plain, Layout::plain, Layout::plain, Layout::plain};
    }
    log::debug("conv {}x{}x{}x{} -> {} channels: dst {}, forward src {}, weight-grad src {}, data-grad src {}",
               given.src[0], given.src[1], given.src[2], given.src[3], given.dst[1], layout_name(l.dst),
               layout_name(l.fwd_src), layout_name(l.bwd_weights_src), layout_name(l.bwd_data_src));
    return l;
  });
}
// Whether a pass of the convolution of x by w (layouts `l`) runs our own Winograd, decided
// before any of oneDNN's conversions for it are made.
bool runs_own_winograd(CpuContext& ctx, const ConvLayouts& l, const Tensor& x, const Tensor& w, const dims& y,
                       bool bias, const ops::Conv2dParams& p, bool weight_gradient) {
  return l.dst == Layout::nChw8c && own_winograd(ctx, shapes(x, w, y, l.dst, bias, p), weight_gradient);
}
}  // namespace

Tensor conv2d_forward(const Tensor& x_in, const Tensor& w, const Tensor& b, const ops::Conv2dParams& p) {
  auto& ctx = context(x_in.device().index);
  const dims yd = out_dims(x_in, w, p);
  const ConvLayouts l = choose_layouts(ctx, x_in, w, yd, b.defined(), p);
  Tensor y = Tensor::empty(Shape(std::vector<int64_t>(yd.begin(), yd.end())), x_in.device(), DType::f32, l.dst);
  if (runs_own_winograd(ctx, l, x_in, w, yd, b.defined(), p, false)) {
    const Tensor xb = x_in.to_layout(Layout::nChw8c);
    winograd::forward(xb.data(), w.data(), b.defined() ? b.data() : nullptr, y.data(), yd[0], x_in.size(1), yd[2],
                      yd[3], yd[1]);
    return y;
  }
  const Tensor x = x_in.to_layout(l.fwd_src);
  const auto s = shapes(x, w, yd, l.dst, b.defined(), p);
  auto f = get_forward(ctx, s);
  Tensor w_scratch;
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, mem(md4(x), ctx, x)},
                                       {DNNL_ARG_WEIGHTS, in_format(ctx, plain_weights(s), f->pd.weights_desc(), w, w_scratch)},
                                       {DNNL_ARG_DST, mem(md4(y), ctx, y)}};
  if (s.has_bias) args.emplace(DNNL_ARG_BIAS, mem(md(s.bias, tag::x), ctx, b));
  run(ctx, f->prim, args);
  return y;
}

std::string conv2d_forward_impl(const Tensor& x_in, const Tensor& w, bool bias, const ops::Conv2dParams& p) {
  auto& ctx = context(x_in.device().index);
  const dims yd = out_dims(x_in, w, p);
  const ConvLayouts l = choose_layouts(ctx, x_in, w, yd, bias, p);
  if (runs_own_winograd(ctx, l, x_in, w, yd, bias, p, false)) return "dpbench_wino_4x3:avx2";
  const Tensor x = x_in.to_layout(l.fwd_src);
  return get_forward(ctx, shapes(x, w, yd, l.dst, bias, p))->pd.impl_info_str();
}

void conv2d_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx_out, const ops::Conv2dParams& p) {
  auto& ctx = context(dy.device().index);
  ops::Conv2dParams pg = p;
  pg.input_grad = true;
  const ConvLayouts l = choose_layouts(ctx, dx_out, w, dims4(dy), false, pg);
  const bool own = runs_own_winograd(ctx, l, dx_out, w, dims4(dy), false, p, false);
  // dx is computed in the layout chosen for this pass (nChw8c for our own Winograd), then
  // given back in the layout of the caller's x.
  const Layout computed = own ? Layout::nChw8c : l.bwd_data_src;
  Tensor dx = computed == dx_out.layout() ? dx_out
                                          : Tensor::empty(dx_out.shape(), dx_out.device(), DType::f32, computed);
  if (own) {
    const Tensor dyb = dy.to_layout(Layout::nChw8c);
    winograd::backward_data(dyb.data(), w.data(), dx.data(), dx.size(0), dx.size(1), dx.size(2), dx.size(3),
                            dy.size(1));
    if (!dx.shares_storage_with(dx_out)) dx_out.copy_from(dx);
    return;
  }
  const auto s = shapes(dx, w, dims4(dy), dy.layout(), false, p);
  auto b = ctx.cached<BwdData>(conv_key("conv_bwd_data", s), [&] {
    auto pd_for = [&](algorithm alg) {
      convolution_backward_data::desc d(alg, md4(s.src, s.src_layout), any_weights(s), md4(s.dst, s.dst_layout),
                                        s.strides, s.pad, s.pad);
      return convolution_backward_data::primitive_desc(d, user_scratchpad(), ctx.engine(), get_forward(ctx, s)->pd);
    };
    const auto pd = with_fallback<convolution_backward_data::primitive_desc>(conv_algorithm(ctx, s), pd_for);
    return BwdData{pd, convolution_backward_data(pd)};
  });
  Tensor w_scratch;
  run(ctx, b->prim,
      {{DNNL_ARG_DIFF_DST, mem(md4(dy), ctx, dy)},
       {DNNL_ARG_WEIGHTS, in_format(ctx, plain_weights(s), b->pd.weights_desc(), w, w_scratch)},
       {DNNL_ARG_DIFF_SRC, mem(md4(dx), ctx, dx)}});
  if (!dx.shares_storage_with(dx_out)) dx_out.copy_from(dx);
}

void conv2d_backward_weights(const Tensor& x_in, const Tensor& dy, Tensor& dw, Tensor& db,
                             const ops::Conv2dParams& p, bool accumulate) {
  auto& ctx = context(x_in.device().index);
  const ConvLayouts l = choose_layouts(ctx, x_in, dw, dims4(dy), db.defined(), p);
  if (runs_own_winograd(ctx, l, x_in, dw, dims4(dy), db.defined(), p, true)) {
    const Tensor xb = x_in.to_layout(Layout::nChw8c), dyb = dy.to_layout(Layout::nChw8c);
    winograd::backward_weights(xb.data(), dyb.data(), dw.data(), db.defined() ? db.data() : nullptr, xb.size(0),
                               xb.size(1), xb.size(2), xb.size(3), dy.size(1), accumulate);
    return;
  }
  const Tensor x = x_in.to_layout(l.bwd_weights_src);
  const auto s = shapes(x, dw, dims4(dy), dy.layout(), db.defined(), p);
  auto b = ctx.cached<BwdWeights>(conv_key("conv_bwd_weights", s), [&] {
    auto src = md4(s.src, s.src_layout), dst = md4(s.dst, s.dst_layout);
    auto pd_for = [&](algorithm alg) {
      auto d = s.has_bias ? convolution_backward_weights::desc(alg, src, any_weights(s), md(s.bias, tag::x), dst,
                                                               s.strides, s.pad, s.pad)
                          : convolution_backward_weights::desc(alg, src, any_weights(s), dst, s.strides, s.pad, s.pad);
      return convolution_backward_weights::primitive_desc(d, user_scratchpad(), ctx.engine(), get_forward(ctx, s)->pd);
    };
    const auto pd = with_fallback<convolution_backward_weights::primitive_desc>(conv_algorithm(ctx, s), pd_for);
    return BwdWeights{pd, convolution_backward_weights(pd)};
  });
  // oneDNN overwrites its outputs: compute into scratch when accumulating or when the
  // primitive's weight format is not plain, then reorder / add into the gradients.
  const auto plain = plain_weights(s), native = b->pd.diff_weights_desc();
  const bool direct = native == plain && !accumulate;
  Tensor dw_native = direct ? dw : Tensor::empty({static_cast<int64_t>((native.get_size() + 3) / 4)}, dw.device());
  Tensor db_out = (accumulate && s.has_bias) ? Tensor::empty(db.shape(), db.device()) : db;
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, mem(md4(x), ctx, x)},
                                       {DNNL_ARG_DIFF_DST, mem(md4(dy), ctx, dy)},
                                       {DNNL_ARG_DIFF_WEIGHTS, mem(native, ctx, dw_native)}};
  if (s.has_bias) args.emplace(DNNL_ARG_DIFF_BIAS, mem(md(s.bias, tag::x), ctx, db_out));
  run(ctx, b->prim, args);
  if (!direct) {
    Tensor dw_plain = accumulate ? Tensor::empty(dw.shape(), dw.device()) : dw;
    if (native == plain) {
      dw_plain = dw_native.view(dw.shape());
    } else {
      memory from = mem(native, ctx, dw_native), to = mem(plain, ctx, dw_plain);
      reorder_memory(ctx, from, to);
      ctx.stream().wait();
    }
    if (accumulate) axpy(1.0f, dw_plain, dw);
  }
  if (accumulate && s.has_bias) axpy(1.0f, db_out, db);
}

}  // namespace dpb::cpu
