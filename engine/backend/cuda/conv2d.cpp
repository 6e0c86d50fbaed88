// Convolutions on cuDNN. Descriptors and algorithms are set up once per shape, dtype,
// layout and precision and cached in the device context; each pass's algorithm is
// found by timing the candidates on the real tensors (cudnnFind*AlgorithmEx, what
// torch.backends.cudnn.benchmark=True does) within the workspace limit.
#include <cstdlib>
#include <optional>

#include "engine/backend/cuda/cuda_ops.h"
#include "engine/backend/cuda/cudnn_util.h"
#include "engine/backend/cuda/kernels.h"
#include "engine/core/log.h"

namespace dpb::cuda {

Layout conv_layout() {
  static const std::optional<Layout> forced = []() -> std::optional<Layout> {
    const char* e = std::getenv("DPB_CUDA_LAYOUT");
    if (!e || !*e) return std::nullopt;
    const std::string v = e;
    if (v == "nchw") return Layout::plain;
    if (v == "nhwc") return Layout::nhwc;
    DPB_FAIL() << "DPB_CUDA_LAYOUT='" << v << "' (valid: nchw, nhwc)";
  }();
  if (forced) return *forced;
  return precision() == Precision::fp32 ? Layout::plain : Layout::nhwc;
}

namespace {

enum Pass { kForward = 0, kBackwardData = 1, kBackwardFilter = 2 };

struct ConvPlan {
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc conv[3];
  std::mutex mu;
  bool found[3] = {false, false, false};
  cudnnConvolutionFwdAlgo_t fwd{};
  cudnnConvolutionBwdDataAlgo_t bwd_data{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
  size_t ws[3] = {0, 0, 0};
};

// The weight in the dtype and layout the convolution computes in (one pass).
Tensor as_filter(const Tensor& w, DType dt, Layout l) {
  if (w.dtype() == dt && w.layout() == l) return w;
  Tensor out = Tensor::empty(w.shape(), w.device(), dt, l);
  set_device(w.device().index);
  k::convert4d(current_stream(w.device().index), w.raw(), w.dtype() == DType::bf16, w.layout() == Layout::nhwc,
               out.raw(), dt == DType::bf16, l == Layout::nhwc, w.size(0), w.size(1), w.size(2), w.size(3));
  return out;
}

std::shared_ptr<ConvPlan> get_plan(OpEnv& env, const Shape& xs, const Shape& ws, const ops::Conv2dParams& p, DType dt,
                                   Layout l) {
  const std::string key = "conv|" + xs.str() + "|" + ws.str() + "|" + std::to_string(p.stride) + "|" +
                          std::to_string(p.padding) + "|" + std::string(dtype_name(dt)) + "|" + layout_name(l) + "|" +
                          precision_name(precision()) + (deterministic() ? "|deterministic" : "");
  std::shared_ptr<ConvPlan> plan;
  if (env.ctx.find_cached(key, &plan)) return plan;
  plan = std::make_shared<ConvPlan>();
  const int64_t ho = ops::window_out(xs[2], static_cast<int>(ws[2]), p.stride, p.padding);
  const int64_t wo = ops::window_out(xs[3], static_cast<int>(ws[3]), p.stride, p.padding);
  plan->x.set(dt, l, xs[0], xs[1], xs[2], xs[3]);
  plan->y.set(dt, l, xs[0], ws[0], ho, wo);
  plan->w.set(dt, l, ws[0], ws[1], ws[2], ws[3]);
  const cudnnMathType_t math = precision() == Precision::fp32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
  for (auto& c : plan->conv) {
    DPB_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(c.d, p.padding, p.padding, p.stride, p.stride, 1, 1,
                                                    CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    DPB_CUDNN_CHECK(cudnnSetConvolutionMathType(c.d, math));
  }
  env.ctx.store_cached(key, plan);
  log::debug("cuda:{}: convolution plan {}", env.ctx.index(), key);
  return plan;
}

// Picks the fastest algorithm that succeeded (and is deterministic, when asked); sets
// its math type on the descriptor.
template <typename Perf>
const Perf& pick(const Perf* perf, int n, const char* pass, cudnnConvolutionDescriptor_t conv) {
  for (int i = 0; i < n; ++i) {
    if (perf[i].status == CUDNN_STATUS_SUCCESS && (!deterministic() || perf[i].determinism == CUDNN_DETERMINISTIC)) {
      DPB_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, perf[i].mathType));
      return perf[i];
    }
  }
  DPB_FAIL() << "cuDNN found no " << (deterministic() ? "deterministic " : "") << "algorithm for the convolution's "
             << pass << " pass";
}

constexpr int kMaxAlgos = 16;
const float kOne = 1.0f, kZero = 0.0f;

}  // namespace

Tensor compute_weight(const Tensor& w) {
  const DType dt = compute_dtype(w.device());
  if (w.ndim() == 4) return as_filter(w, dt, conv_layout());
  return w.to_dtype(dt);
}

Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, const ops::Conv2dParams& p) {
  const DType dt = compute_dtype(x.device());
  const Layout l = conv_layout();
  const Tensor xc = x.to_dtype(dt).to_layout(l);
  const Tensor wc = as_filter(w, dt, l);
  const int64_t N = x.size(0), O = w.size(0);
  const int64_t ho = ops::window_out(x.size(2), static_cast<int>(w.size(2)), p.stride, p.padding);
  const int64_t wo = ops::window_out(x.size(3), static_cast<int>(w.size(3)), p.stride, p.padding);
  Tensor y = Tensor::empty({N, O, ho, wo}, x.device(), dt, l);
  OpEnv env = op_env(x);
  auto plan = get_plan(env, x.shape(), w.shape(), p, dt, l);
  {
    std::lock_guard<std::mutex> lock(plan->mu);
    if (!plan->found[kForward]) {
      const size_t limit = env.ctx.workspace_limit();
      void* ws = env.ctx.workspace(env.stream, limit);
      cudnnConvolutionFwdAlgoPerf_t perf[kMaxAlgos];
      int n = 0;
      DPB_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(env.res.cudnn, plan->x.d, xc.raw(), plan->w.d, wc.raw(),
                                                             plan->conv[kForward].d, plan->y.d, y.raw(), kMaxAlgos,
                                                             &n, perf, ws, limit))
          << "finding the forward algorithm for input " << x.shape() << ", weight " << w.shape();
      const auto& best = pick(perf, n, "forward", plan->conv[kForward].d);
      plan->fwd = best.algo;
      plan->ws[kForward] = best.memory;
      plan->found[kForward] = true;
    }
  }
  void* ws = env.ctx.workspace(env.stream, plan->ws[kForward]);
  DPB_CUDNN_CHECK(cudnnConvolutionForward(env.res.cudnn, &kOne, plan->x.d, xc.raw(), plan->w.d, wc.raw(),
                                          plan->conv[kForward].d, plan->fwd, ws, plan->ws[kForward], &kZero, plan->y.d,
                                          y.raw()))
      << "convolution forward, input " << x.shape() << ", weight " << w.shape();
  if (b.defined())
    k::channel_bias_add(env.stream, y.raw(), dt == DType::bf16, l == Layout::nhwc, N, O, ho * wo, b.data());
  return y;
}

void conv2d_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx, const ops::Conv2dParams& p) {
  const DType dt = compute_dtype(dy.device());
  const Layout l = conv_layout();
  const Tensor dyc = dy.to_dtype(dt).to_layout(l);
  const Tensor wc = as_filter(w, dt, l);
  Tensor out = dx.dtype() == dt && dx.layout() == l ? dx : Tensor::empty(dx.shape(), dx.device(), dt, l);
  OpEnv env = op_env(dy);
  auto plan = get_plan(env, dx.shape(), w.shape(), p, dt, l);
  {
    std::lock_guard<std::mutex> lock(plan->mu);
    if (!plan->found[kBackwardData]) {
      const size_t limit = env.ctx.workspace_limit();
      void* ws = env.ctx.workspace(env.stream, limit);
      cudnnConvolutionBwdDataAlgoPerf_t perf[kMaxAlgos];
      int n = 0;
      DPB_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
          env.res.cudnn, plan->w.d, wc.raw(), plan->y.d, dyc.raw(), plan->conv[kBackwardData].d, plan->x.d, out.raw(),
          kMaxAlgos, &n, perf, ws, limit))
          << "finding the backward-data algorithm for input " << dx.shape() << ", weight " << w.shape();
      const auto& best = pick(perf, n, "backward-data", plan->conv[kBackwardData].d);
      plan->bwd_data = best.algo;
      plan->ws[kBackwardData] = best.memory;
      plan->found[kBackwardData] = true;
    }
  }
  void* ws = env.ctx.workspace(env.stream, plan->ws[kBackwardData]);
  DPB_CUDNN_CHECK(cudnnConvolutionBackwardData(env.res.cudnn, &kOne, plan->w.d, wc.raw(), plan->y.d, dyc.raw(),
                                               plan->conv[kBackwardData].d, plan->bwd_data, ws,
                                               plan->ws[kBackwardData], &kZero, plan->x.d, out.raw()))
      << "convolution backward-data, input " << dx.shape() << ", weight " << w.shape();
  if (!out.shares_storage_with(dx)) dx.copy_from(out.to_dtype(dx.dtype()));
}

void conv2d_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& db, const ops::Conv2dParams& p,
                             bool accumulate) {
  const DType dt = compute_dtype(x.device());
  const Layout l = conv_layout();
  const Tensor xc = x.to_dtype(dt).to_layout(l);
  const Tensor dyc = dy.to_dtype(dt).to_layout(l);
  // The gradient is f32 and plain; cuDNN writes it in the convolution's own form.
  const bool direct = dt == DType::f32 && l == Layout::plain;
  Tensor out = direct ? dw : Tensor::empty(dw.shape(), dw.device(), dt, l);
  OpEnv env = op_env(x);
  auto plan = get_plan(env, x.shape(), dw.shape(), p, dt, l);
  {
    std::lock_guard<std::mutex> lock(plan->mu);
    if (!plan->found[kBackwardFilter]) {
      const size_t limit = env.ctx.workspace_limit();
      void* ws = env.ctx.workspace(env.stream, limit);
      Tensor scratch = Tensor::empty(dw.shape(), dw.device(), dt, l);  // the search must not touch dw
      cudnnConvolutionBwdFilterAlgoPerf_t perf[kMaxAlgos];
      int n = 0;
      DPB_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
          env.res.cudnn, plan->x.d, xc.raw(), plan->y.d, dyc.raw(), plan->conv[kBackwardFilter].d, plan->w.d,
          scratch.raw(), kMaxAlgos, &n, perf, ws, limit))
          << "finding the backward-filter algorithm for input " << x.shape() << ", weight " << dw.shape();
      const auto& best = pick(perf, n, "backward-filter", plan->conv[kBackwardFilter].d);
      plan->bwd_filter = best.algo;
      plan->ws[kBackwardFilter] = best.memory;
      plan->found[kBackwardFilter] = true;
    }
  }
  void* ws = env.ctx.workspace(env.stream, plan->ws[kBackwardFilter]);
  const float beta = direct && accumulate ? 1.0f : 0.0f;
  DPB_CUDNN_CHECK(cudnnConvolutionBackwardFilter(env.res.cudnn, &kOne, plan->x.d, xc.raw(), plan->y.d, dyc.raw(),
                                                 plan->conv[kBackwardFilter].d, plan->bwd_filter, ws,
                                                 plan->ws[kBackwardFilter], &beta, plan->w.d, out.raw()))
      << "convolution backward-filter, input " << x.shape() << ", weight " << dw.shape();
  if (!direct)  // back to the f32 plain gradient, added or written in one pass
    k::convert4d(env.stream, out.raw(), dt == DType::bf16, l == Layout::nhwc, dw.raw(), false, false, dw.size(0),
                 dw.size(1), dw.size(2), dw.size(3), accumulate);
  if (db.defined())
    k::channel_sum(env.stream, dyc.raw(), dt == DType::bf16, l == Layout::nhwc, dy.size(0), dy.size(1),
                   dy.size(2) * dy.size(3), db.data(), accumulate);
}

}  // namespace dpb::cuda
