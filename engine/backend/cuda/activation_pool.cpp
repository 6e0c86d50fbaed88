// ReLU and max/average pooling on cuDNN. ReLU runs in place when asked to (y == x) and
// its backward needs only the output (relu'(x) = y > 0, so y stands in for x). Pooling
// backward needs the forward's input and output.
#include "engine/backend/cuda/cuda_ops.h"
#include "engine/backend/cuda/cudnn_util.h"

namespace dpb::cuda {

namespace {

const float kOne = 1.0f, kZero = 0.0f;

struct ActivationDesc {
  cudnnActivationDescriptor_t d = nullptr;
  ActivationDesc() {
    DPB_CUDNN_CHECK(cudnnCreateActivationDescriptor(&d));
    DPB_CUDNN_CHECK(cudnnSetActivationDescriptor(d, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));
  }
  ~ActivationDesc() { cudnnDestroyActivationDescriptor(d); }
};

struct PoolingDesc {
  cudnnPoolingDescriptor_t d = nullptr;
  PoolingDesc(ops::PoolKind kind, const ops::Pool2dParams& p) {
    DPB_CUDNN_CHECK(cudnnCreatePoolingDescriptor(&d));
    // PyTorch's AvgPool2d counts padding by default (count_include_pad=True).
    const cudnnPoolingMode_t mode =
        kind == ops::PoolKind::max ? CUDNN_POOLING_MAX_DETERMINISTIC : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
    DPB_CUDNN_CHECK(cudnnSetPooling2dDescriptor(d, mode, CUDNN_NOT_PROPAGATE_NAN, p.kernel, p.kernel, p.padding,
                                                p.padding, p.stride, p.stride));
  }
  ~PoolingDesc() { cudnnDestroyPoolingDescriptor(d); }
};

}  // namespace

void relu_forward(const Tensor& x, Tensor& y) {
  OpEnv env = op_env(x);
  static thread_local ActivationDesc act;
  TensorDesc d;
  d.set_flat(x);
  DPB_CUDNN_CHECK(cudnnActivationForward(env.res.cudnn, act.d, &kOne, d.d, x.raw(), &kZero, d.d, y.raw()))
      << "ReLU forward, " << x.shape();
}

void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  OpEnv env = op_env(y);
  static thread_local ActivationDesc act;
  TensorDesc d;
  d.set_flat(y);
  DPB_CUDNN_CHECK(cudnnActivationBackward(env.res.cudnn, act.d, &kOne, d.d, y.raw(), d.d, dy.raw(), d.d, y.raw(),
                                          &kZero, d.d, dx.raw()))
      << "ReLU backward, " << y.shape();
}

void pool2d_forward(ops::PoolKind kind, const Tensor& x, Tensor& y, Tensor& /*workspace*/, const ops::Pool2dParams& p) {
  OpEnv env = op_env(x);
  PoolingDesc pool(kind, p);
  TensorDesc dx, dy;
  dx.set(x);
  dy.set(y);
  DPB_CUDNN_CHECK(cudnnPoolingForward(env.res.cudnn, pool.d, &kOne, dx.d, x.raw(), &kZero, dy.d, y.raw()))
      << "pooling forward, " << x.shape();
}

void pool2d_backward(ops::PoolKind kind, const Tensor& x, const Tensor& y, const Tensor& dy,
                     const Tensor& /*workspace*/, Tensor& dx, const ops::Pool2dParams& p) {
  OpEnv env = op_env(dy);
  PoolingDesc pool(kind, p);
  TensorDesc xd, yd;
  xd.set(x);
  yd.set(y);
  DPB_CUDNN_CHECK(cudnnPoolingBackward(env.res.cudnn, pool.d, &kOne, yd.d, y.raw(), yd.d, dy.raw(), xd.d, x.raw(),
                                       &kZero, xd.d, dx.raw()))
      << "pooling backward, " << x.shape();
}

}  // namespace dpb::cuda
