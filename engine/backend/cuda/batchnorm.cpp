// BatchNorm: plain (N, C, H, W) tensors on cuDNN (training forward with running
// statistics, inference, backward through the batch statistics); channels-last tensors
// on the engine's own kernels (bn_nhwc.cu: cuDNN's legacy NHWC batch norm is an order of
// magnitude slower); with fixed statistics (a frozen BatchNorm) the engine's own
// kernels, since cuDNN's backward always differentiates through the batch statistics.
#include "engine/backend/cuda/cuda_ops.h"
#include "engine/backend/cuda/cudnn_util.h"
#include "engine/backend/cuda/kernels.h"

namespace dpb::cuda {

namespace {

const float kOne = 1.0f, kZero = 0.0f;

cudnnBatchNormMode_t bn_mode(const Tensor& x) {
  return x.layout() == Layout::nhwc ? CUDNN_BATCHNORM_SPATIAL_PERSISTENT : CUDNN_BATCHNORM_SPATIAL;
}

// Runs call(mode) with the persistent kernels where they apply, falling back to the
// plain spatial ones where cuDNN does not support them for this shape or dtype (both
// modes save the same statistics, so forward and backward may differ in mode).
template <typename Call>
cudnnStatus_t with_mode(const Tensor& x, Call&& call) {
  const cudnnBatchNormMode_t m = bn_mode(x);
  cudnnStatus_t s = call(m);
  if (s == CUDNN_STATUS_NOT_SUPPORTED && m != CUDNN_BATCHNORM_SPATIAL) s = call(CUDNN_BATCHNORM_SPATIAL);
  return s;
}

struct BnDescs {
  TensorDesc x, param;
  explicit BnDescs(const Tensor& t) {
    x.set(t);
    DPB_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(param.d, x.d, CUDNN_BATCHNORM_SPATIAL));
  }
};

}  // namespace

void batchnorm_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                             ops::BatchNormSaved& saved, Tensor& running_mean, Tensor& running_var, float momentum,
                             float eps) {
  const int64_t C = x.size(1);
  if (!saved.mean.defined() || saved.mean.numel() != C || saved.mean.device() != x.device()) {
    saved.mean = Tensor::empty({C}, x.device());
    saved.invstd = Tensor::empty({C}, x.device());
  }
  saved.var = Tensor();
  OpEnv env = op_env(x);
  if (x.layout() == Layout::nhwc) {
    const int64_t M = x.size(0) * x.size(2) * x.size(3);
    Tensor scratch = Tensor::empty({k::bn_nhwc_scratch_floats(M, C)}, x.device());
    k::bn_nhwc_forward_train(env.stream, x.raw(), y.raw(), x.dtype() == DType::bf16, M, C, eps, momentum, gamma.data(),
                             beta.data(), saved.mean.data(), saved.invstd.data(), running_mean.data(),
                             running_var.data(), scratch.data());
    return;
  }
  BnDescs d(x);
  DPB_CUDNN_CHECK(with_mode(x, [&](cudnnBatchNormMode_t m) {
    return cudnnBatchNormalizationForwardTraining(env.res.cudnn, m, &kOne, &kZero, d.x.d, x.raw(), d.x.d, y.raw(),
                                                  d.param.d, gamma.data(), beta.data(), momentum, running_mean.data(),
                                                  running_var.data(), eps, saved.mean.data(), saved.invstd.data());
  })) << "batch norm forward, input " << x.shape();
}

void batchnorm_forward_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                            const Tensor& running_mean, const Tensor& running_var, float eps) {
  OpEnv env = op_env(x);
  if (eps < CUDNN_BN_MIN_EPSILON) {
    k::bn_fixed_forward(env.stream, x.raw(), y.raw(), x.dtype() == DType::bf16, x.layout() == Layout::nhwc,
                        x.size(0), x.size(1), x.size(2) * x.size(3), gamma.data(), beta.data(), running_mean.data(),
                        running_var.data(), eps);
    return;
  }
  BnDescs d(x);
  DPB_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(env.res.cudnn, CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero,
                                                          d.x.d, x.raw(), d.x.d, y.raw(), d.param.d, gamma.data(),
                                                          beta.data(), running_mean.data(), running_var.data(), eps))
      << "batch norm inference, input " << x.shape();
}

void batchnorm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const ops::BatchNormSaved& saved,
                        Tensor& dx, Tensor& dgamma, Tensor& dbeta, float eps, bool accumulate, bool global_stats) {
  OpEnv env = op_env(x);
  if (global_stats) {
    k::bn_fixed_backward(env.stream, x.raw(), dy.raw(), dx.raw(), x.dtype() == DType::bf16,
                         x.layout() == Layout::nhwc, x.size(0), x.size(1), x.size(2) * x.size(3), gamma.data(),
                         saved.mean.data(), saved.var.data(), eps, dgamma.data(), dbeta.data(), accumulate);
    return;
  }
  DPB_CHECK(saved.invstd.defined()) << "batch norm backward on " << x.device()
                                    << " without the statistics of a CUDA forward";
  if (x.layout() == Layout::nhwc) {
    const int64_t M = x.size(0) * x.size(2) * x.size(3), C = x.size(1);
    Tensor scratch = Tensor::empty({k::bn_nhwc_scratch_floats(M, C)}, x.device());
    k::bn_nhwc_backward(env.stream, x.raw(), dy.raw(), dx.raw(), x.dtype() == DType::bf16, M, C, gamma.data(),
                        saved.mean.data(), saved.invstd.data(), dgamma.data(), dbeta.data(), accumulate,
                        scratch.data());
    return;
  }
  BnDescs d(x);
  const float beta_param = accumulate ? 1.0f : 0.0f;
  DPB_CUDNN_CHECK(with_mode(x, [&](cudnnBatchNormMode_t m) {
    return cudnnBatchNormalizationBackward(env.res.cudnn, m, &kOne, &kZero, &kOne, &beta_param, d.x.d, x.raw(), d.x.d,
                                           dy.raw(), d.x.d, dx.raw(), d.param.d, gamma.data(), dgamma.data(),
                                           dbeta.data(), eps, saved.mean.data(), saved.invstd.data());
  })) << "batch norm backward, input " << x.shape();
}

}  // namespace dpb::cuda

namespace dpb::cuda {

void batchnorm_stats(const Tensor& x, Tensor& mean, Tensor& m2) {
  OpEnv env = op_env(x);
  k::bn_stats(env.stream, x.raw(), x.dtype() == DType::bf16, x.layout() == Layout::nhwc, x.size(0), x.size(1),
              x.size(2) * x.size(3), mean.data(), m2.data());
}

void batchnorm_sync_correction(const Tensor& x, const Tensor& mean, const Tensor& var, float eps, const Tensor& gamma,
                               const Tensor& mean_dy, const Tensor& mean_dy_xhat, Tensor& dx) {
  OpEnv env = op_env(x);
  k::bn_sync_correction(env.stream, x.raw(), dx.raw(), x.dtype() == DType::bf16, x.layout() == Layout::nhwc,
                        x.size(0), x.size(1), x.size(2) * x.size(3), mean.data(), var.data(), eps, gamma.data(),
                        mean_dy.data(), mean_dy_xhat.data());
}

}  // namespace dpb::cuda
