#include "engine/nn/batchnorm2d.h"

#include <algorithm>
#include <vector>

#include "engine/comm/process_group.h"

namespace dpb {

BatchNorm2d::BatchNorm2d(int64_t channels, float eps, float momentum)
    : channels_(channels), eps_(eps), momentum_(momentum) {
  DPB_CHECK(channels > 0) << "BatchNorm2d(" << channels << "): channels must be positive";
  weight_ = &register_parameter("weight", Tensor::full({channels}, 1.0f));
  bias_ = &register_parameter("bias", Tensor::zeros({channels}));
  running_mean_ = &register_buffer("running_mean", Tensor::zeros({channels}));
  running_var_ = &register_buffer("running_var", Tensor::full({channels}, 1.0f));
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  DPB_CHECK(x.ndim() == 4 && x.size(1) == channels_)
      << "BatchNorm2d(" << channels_ << ") expects input (N, " << channels_ << ", H, W), got " << x.shape();
  if (sync_ && training_ && !frozen_) return sync_forward(x);
  Tensor y = Tensor::empty_like(x);
  if (training_ && frozen_) {
    ops::batchnorm_forward_eval(x, weight_->data(), bias_->data(), y, *running_mean_, *running_var_, eps_);
    x_ = x;
  } else if (training_) {
    DPB_CHECK(x.size(0) * x.size(2) * x.size(3) > 1)
        << "BatchNorm2d in training mode needs more than one value per channel, got input " << x.shape()
        << " (use a larger batch, or eval mode)";
    ops::batchnorm_forward_train(x, weight_->data(), bias_->data(), y, saved_, *running_mean_, *running_var_,
                                 momentum_, eps_);
    x_ = x;
  } else {
    ops::batchnorm_forward_eval(x, weight_->data(), bias_->data(), y, *running_mean_, *running_var_, eps_);
  }
  return y;
}

Tensor BatchNorm2d::backward(const Tensor& dy) {
  DPB_CHECK(x_.defined()) << "BatchNorm2d.backward without a training-mode forward";
  if (sync_ && !frozen_) return sync_backward(dy);
  const bool acc = weight_->begin_grad();
  DPB_CHECK(bias_->begin_grad() == acc) << "BatchNorm2d: weight and bias gradients out of step";
  Tensor dx = Tensor::empty_like(x_);
  if (frozen_) {
    const ops::BatchNormSaved running{*running_mean_, *running_var_, Tensor()};
    ops::batchnorm_backward(x_, dy, weight_->data(), running, dx, weight_->grad(), bias_->grad(), eps_, acc, true);
  } else {
    ops::batchnorm_backward(x_, dy, weight_->data(), saved_, dx, weight_->grad(), bias_->grad(), eps_, acc);
  }
  bias_->mark_grad_ready();
  weight_->mark_grad_ready();
  x_ = Tensor();
  return dx;
}

int64_t BatchNorm2d::forward_flops(const Shape& input, Shape* output) const {
  *output = input;
  return 2 * input.numel();
}

std::unique_ptr<Module> BatchNorm2d::clone_structure() const {
  return std::make_unique<BatchNorm2d>(channels_, eps_, momentum_);
}

Tensor BatchNorm2d::sync_forward(const Tensor& x) {
  const Device d = x.device();
  const int64_t C = channels_;
  // Each rank's [mean (C), sum of squared deviations M2 (C), count (1)], gathered from all
  // ranks and combined with Chan's parallel formula (as torch.nn.SyncBatchNorm gathers
  // mean, invstd and count): M2 = sum_r M2_r + sum_r n_r (mean_r - mean)^2. Summing raw
  // sums of squares instead loses the variance to cancellation when |mean| >> std.
  const int world = sync_->size();
  const int64_t width = 2 * C + 1;
  Tensor local = Tensor::empty({width}, d);
  Tensor lmean = local.slice(0, C), lm2 = local.slice(C, 2 * C);
  ops::batchnorm_stats(x, lmean, lm2);
  local.slice(2 * C, width).fill(static_cast<float>(x.size(0) * x.size(2) * x.size(3)));
  Tensor all = Tensor::empty({world * width}, d);
  sync_->allgather(all, local)->wait();
  const auto s = all.to_vector();
  auto at = [&](int r, int64_t k) { return static_cast<double>(s[static_cast<size_t>(r * width + k)]); };
  double n = 0;
  for (int r = 0; r < world; ++r) n += at(r, 2 * C);
  DPB_CHECK(n > 1) << "SyncBatchNorm(" << C << ") needs more than one value per channel over all ranks, got " << n;
  std::vector<float> mean(static_cast<size_t>(C)), var(static_cast<size_t>(C)), unbiased(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    double m = 0;
    for (int r = 0; r < world; ++r) m += at(r, 2 * C) * at(r, c);
    m /= n;
    double m2 = 0;
    for (int r = 0; r < world; ++r) {
      const double dm = at(r, c) - m;
      m2 += at(r, C + c) + at(r, 2 * C) * dm * dm;
    }
    const double v = std::max(0.0, m2 / n);
    mean[static_cast<size_t>(c)] = static_cast<float>(m);
    var[static_cast<size_t>(c)] = static_cast<float>(v);
    unbiased[static_cast<size_t>(c)] = static_cast<float>(m2 / (n - 1));
  }
  sync_mean_ = Tensor::from_vector({C}, mean, d);
  sync_var_ = Tensor::from_vector({C}, var, d);
  sync_count_ = static_cast<int64_t>(n);
  // Running statistics as PyTorch: (1 - momentum) * running + momentum * batch (unbiased var).
  ops::scale(*running_mean_, 1.0f - momentum_);
  ops::axpy(momentum_, sync_mean_, *running_mean_);
  ops::scale(*running_var_, 1.0f - momentum_);
  ops::axpy(momentum_, Tensor::from_vector({C}, unbiased, d), *running_var_);
  Tensor y = Tensor::empty_like(x);
  ops::batchnorm_forward_eval(x, weight_->data(), bias_->data(), y, sync_mean_, sync_var_, eps_);
  x_ = x;
  return y;
}

Tensor BatchNorm2d::sync_backward(const Tensor& dy) {
  const Device d = x_.device();
  const int64_t C = channels_;
  // dx = dy * gamma * invstd and the local sum(dy), sum(dy * xhat); then the global sums
  // complete dx as one device holding the whole batch would compute it.
  Tensor sums = Tensor::empty({2 * C}, d);
  Tensor dgamma = sums.slice(C, 2 * C), dbeta = sums.slice(0, C);
  Tensor dx = Tensor::empty_like(x_);
  const ops::BatchNormSaved stats{sync_mean_, sync_var_, Tensor()};
  ops::batchnorm_backward(x_, dy, weight_->data(), stats, dx, dgamma, dbeta, eps_, false, /*global_stats=*/true);
  const bool acc = weight_->begin_grad();
  DPB_CHECK(bias_->begin_grad() == acc) << "BatchNorm2d: weight and bias gradients out of step";
  if (acc) {
    ops::axpy(1.0f, dgamma, weight_->grad());
    ops::axpy(1.0f, dbeta, bias_->grad());
  } else {
    weight_->grad().copy_from(dgamma);
    bias_->grad().copy_from(dbeta);
  }
  Tensor global = sums.clone();
  sync_->allreduce(global, comm::ReduceOp::sum)->wait();
  ops::scale(global, 1.0f / static_cast<float>(sync_count_));
  ops::batchnorm_sync_correction(x_, sync_mean_, sync_var_, eps_, weight_->data(), global.slice(0, C),
                                 global.slice(C, 2 * C), dx);
  bias_->mark_grad_ready();
  weight_->mark_grad_ready();
  x_ = Tensor();
  return dx;
}

void convert_sync_batchnorm(Module& m, comm::ProcessGroup* group) {
  if (auto* bn = dynamic_cast<BatchNorm2d*>(&m)) bn->set_sync_group(group);
  for (auto& [name, child] : m.named_children()) convert_sync_batchnorm(*child, group);
}

void freeze_batchnorm(Module& m, bool frozen) {
  if (auto* bn = dynamic_cast<BatchNorm2d*>(&m)) bn->set_frozen(frozen);
  for (auto& [name, child] : m.named_children()) freeze_batchnorm(*child, frozen);
}

}  // namespace dpb
