// Dispatch of every op on the device of its tensors. Shapes are checked here once,
// so backends can assume them; oneDNN errors become dpb::Error naming the op. The
// transformer's ops are dispatched in ops_transformer.cpp, with the same helpers
// (ops_dispatch.h).
#include "engine/backend/ops.h"

#include "engine/backend/ops_dispatch.h"

namespace dpb::ops {

using namespace internal;  // NOLINT(google-build-using-namespace): the dispatch helpers

namespace {

Shape conv_out(const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  return {x.size(0), w.size(0), window_out(x.size(2), static_cast<int>(w.size(2)), p.stride, p.padding),
          window_out(x.size(3), static_cast<int>(w.size(3)), p.stride, p.padding)};
}

void check_conv(const char* op, const Tensor& x, const Tensor& w, const Shape& y, const Conv2dParams& p) {
  expect_ndim(op, "input", x, 4, "(N, C, H, W)");
  expect_ndim(op, "weight", w, 4, "(O, I, kH, kW)");
  DPB_CHECK(x.size(1) == w.size(1)) << op << ": input has " << x.size(1) << " channels, weight expects " << w.size(1);
  DPB_CHECK(p.stride >= 1 && p.padding >= 0) << op << ": stride " << p.stride << ", padding " << p.padding;
  DPB_CHECK(y == conv_out(x, w, p)) << op << ": output has shape " << y << ", expected " << conv_out(x, w, p);
}

void check_linear(const char* op, const Tensor& x, const Tensor& w, const Tensor& y) {
  expect_ndim(op, "input", x, 2, "(N, in_features)");
  expect_ndim(op, "weight", w, 2, "(out_features, in_features)");
  DPB_CHECK(x.size(1) == w.size(1)) << op << ": input has " << x.size(1) << " features, weight expects " << w.size(1);
  expect_shape(op, "output", y, {x.size(0), w.size(0)});
}

}  // namespace

Tensor compute_weight(const Tensor& w) {
  return dispatch("compute_weight", w.device(), &KernelTable::compute_weight, w);
}

Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p) {
  expect_ndim("conv2d_forward", "input", x, 4, "(N, C, H, W)");
  expect_ndim("conv2d_forward", "weight", w, 4, "(O, I, kH, kW)");
  const Shape out = conv_out(x, w, p);
  DPB_CHECK(out[2] > 0 && out[3] > 0) << "conv2d_forward: input " << x.shape() << " is smaller than the kernel "
                                      << w.shape();
  check_conv("conv2d_forward", x, w, out, p);
  same_device("conv2d_forward", x.device(), {&w, &b});
  return dispatch("conv2d_forward", x.device(), &KernelTable::conv2d_forward, x, w, b, p);
}

void conv2d_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx, const Conv2dParams& p) {
  check_conv("conv2d_backward_data", dx, w, dy.shape(), p);
  same_device("conv2d_backward_data", dy.device(), {&w, &dx});
  dispatch("conv2d_backward_data", dy.device(), &KernelTable::conv2d_backward_data, dy, w, dx, p);
}

void conv2d_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& db, const Conv2dParams& p,
                             bool accumulate) {
  check_conv("conv2d_backward_weights", x, dw, dy.shape(), p);
  DPB_CHECK(dw.is_plain()) << "conv2d_backward_weights: weight gradients are plain";
  same_device("conv2d_backward_weights", x.device(), {&dy, &dw, &db});
  dispatch("conv2d_backward_weights", x.device(), &KernelTable::conv2d_backward_weights, x, dy, dw, db, p, accumulate);
}

void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
  check_linear("linear_forward", x, w, y);
  same_device("linear_forward", x.device(), {&w, &b, &y});
  dispatch("linear_forward", x.device(), &KernelTable::linear_forward, x, w, b, y);
}

void linear_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx) {
  check_linear("linear_backward_data", dx, w, dy);
  same_device("linear_backward_data", dy.device(), {&w, &dx});
  dispatch("linear_backward_data", dy.device(), &KernelTable::linear_backward_data, dy, w, dx);
}

void linear_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& db, bool accumulate) {
  check_linear("linear_backward_weights", x, dw, dy);
  same_device("linear_backward_weights", x.device(), {&dy, &dw, &db});
  dispatch("linear_backward_weights", x.device(), &KernelTable::linear_backward_weights, x, dy, dw, db, accumulate);
}

void batchnorm_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                             BatchNormSaved& saved, Tensor& running_mean, Tensor& running_var, float momentum,
                             float eps) {
  expect_ndim("batchnorm_forward", "input", x, 4, "(N, C, H, W)");
  const Shape c{x.size(1)};
  expect_shape("batchnorm_forward", "weight", gamma, c);
  expect_shape("batchnorm_forward", "running_var", running_var, c);
  expect_shape("batchnorm_forward", "output", y, x.shape());
  DPB_CHECK(y.layout() == x.layout()) << "batchnorm_forward: output layout differs from the input's";
  same_device("batchnorm_forward", x.device(), {&gamma, &beta, &y, &running_mean, &running_var});
  dispatch("batchnorm_forward", x.device(), &KernelTable::batchnorm_forward_train, x, gamma, beta, y, saved, running_mean, running_var, momentum, eps);
}

void batchnorm_forward_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                            const Tensor& running_mean, const Tensor& running_var, float eps) {
  expect_ndim("batchnorm_forward", "input", x, 4, "(N, C, H, W)");
  expect_shape("batchnorm_forward", "output", y, x.shape());
  same_device("batchnorm_forward", x.device(), {&gamma, &beta, &y, &running_mean, &running_var});
  dispatch("batchnorm_forward", x.device(), &KernelTable::batchnorm_forward_eval, x, gamma, beta, y, running_mean, running_var, eps);
}

void batchnorm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const BatchNormSaved& saved,
                        Tensor& dx, Tensor& dgamma, Tensor& dbeta, float eps, bool accumulate, bool global_stats) {
  expect_shape("batchnorm_backward", "grad_output", dy, x.shape());
  expect_shape("batchnorm_backward", "grad_input", dx, x.shape());
  DPB_CHECK(dy.layout() == x.layout() && dx.layout() == x.layout())
      << "batchnorm_backward: input " << layout_name(x.layout()) << ", grad_output " << layout_name(dy.layout())
      << ", grad_input " << layout_name(dx.layout()) << " (gradients come in their tensor's layout)";
  same_device("batchnorm_backward", x.device(), {&dy, &gamma, &dx, &dgamma, &dbeta});
  dispatch("batchnorm_backward", x.device(), &KernelTable::batchnorm_backward, x, dy, gamma, saved, dx, dgamma, dbeta, eps, accumulate, global_stats);
}

void batchnorm_stats(const Tensor& x, Tensor& mean, Tensor& m2) {
  expect_ndim("batchnorm_stats", "input", x, 4, "(N, C, H, W)");
  expect_shape("batchnorm_stats", "mean", mean, {x.size(1)});
  expect_shape("batchnorm_stats", "m2", m2, {x.size(1)});
  same_device("batchnorm_stats", x.device(), {&mean, &m2});
  dispatch("batchnorm_stats", x.device(), &KernelTable::batchnorm_stats, x, mean, m2);
}

void batchnorm_sync_correction(const Tensor& x, const Tensor& mean, const Tensor& var, float eps,
                               const Tensor& gamma, const Tensor& mean_dy, const Tensor& mean_dy_xhat, Tensor& dx) {
  expect_ndim("batchnorm_sync_correction", "input", x, 4, "(N, C, H, W)");
  const Shape c{x.size(1)};
  for (const Tensor* t : {&mean, &var, &gamma, &mean_dy, &mean_dy_xhat})
    expect_shape("batchnorm_sync_correction", "per-channel statistic", *t, c);
  expect_shape("batchnorm_sync_correction", "grad_input", dx, x.shape());
  DPB_CHECK(dx.layout() == x.layout()) << "batchnorm_sync_correction: grad_input in another layout than the input";
  same_device("batchnorm_sync_correction", x.device(), {&mean, &var, &gamma, &mean_dy, &mean_dy_xhat, &dx});
  dispatch("batchnorm_sync_correction", x.device(), &KernelTable::batchnorm_sync_correction, x, mean, var, eps, gamma, mean_dy, mean_dy_xhat, dx);
}

void relu_forward(const Tensor& x, Tensor& y) {
  expect_shape("relu_forward", "output", y, x.shape());
  DPB_CHECK(x.layout() == y.layout()) << "relu_forward: input and output in different layouts";
  same_device("relu_forward", x.device(), {&y});
  dispatch("relu_forward", x.device(), &KernelTable::relu_forward, x, y);
}

void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  expect_shape("relu_backward", "grad_output", dy, y.shape());
  expect_shape("relu_backward", "grad_input", dx, y.shape());
  DPB_CHECK(y.layout() == dy.layout() && dy.layout() == dx.layout())
      << "relu_backward: output, grad_output and grad_input in different layouts";
  same_device("relu_backward", y.device(), {&dy, &dx});
  dispatch("relu_backward", y.device(), &KernelTable::relu_backward, y, dy, dx);
}

void pool2d_forward(PoolKind kind, const Tensor& x, Tensor& y, Tensor& workspace, const Pool2dParams& p) {
  expect_ndim("pool2d_forward", "input", x, 4, "(N, C, H, W)");
  DPB_CHECK(p.kernel >= 1 && p.stride >= 1 && p.padding >= 0 && 2 * p.padding <= p.kernel)
      << "pool2d: kernel " << p.kernel << ", stride " << p.stride << ", padding " << p.padding
      << " (padding must be at most half the kernel)";
  DPB_CHECK(y.layout() == x.layout()) << "pool2d_forward: output layout differs from the input's";
  expect_shape("pool2d_forward", "output", y,
               {x.size(0), x.size(1), window_out(x.size(2), p.kernel, p.stride, p.padding),
                window_out(x.size(3), p.kernel, p.stride, p.padding)});
  same_device("pool2d_forward", x.device(), {&y});
  dispatch("pool2d_forward", x.device(), &KernelTable::pool2d_forward, kind, x, y, workspace, p);
}

void pool2d_backward(PoolKind kind, const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& workspace,
                     Tensor& dx, const Pool2dParams& p) {
  expect_ndim("pool2d_backward", "grad_output", dy, 4, "(N, C, H, W)");
  expect_ndim("pool2d_backward", "grad_input", dx, 4, "(N, C, H, W)");
  DPB_CHECK(dy.layout() == dx.layout()) << "pool2d_backward: grad_output " << layout_name(dy.layout())
                                        << " and grad_input " << layout_name(dx.layout()) << " differ in layout";
  DPB_CHECK(x.shape() == dx.shape() && y.shape() == dy.shape())
      << "pool2d_backward: input " << x.shape() << " and output " << y.shape() << " of the forward do not match grad_input "
      << dx.shape() << " and grad_output " << dy.shape();
  same_device("pool2d_backward", dy.device(), {&x, &y, &dx, &workspace});
  dispatch("pool2d_backward", dy.device(), &KernelTable::pool2d_backward, kind, x, y, dy, workspace, dx, p);
}

void global_avgpool_forward(const Tensor& x, Tensor& y) {
  expect_ndim("global_avgpool_forward", "input", x, 4, "(N, C, H, W)");
  DPB_CHECK(y.numel() == x.size(0) * x.size(1)) << "global_avgpool_forward: output " << y.shape() << " for input "
                                                << x.shape();
  same_device("global_avgpool_forward", x.device(), {&y});
  dispatch("global_avgpool_forward", x.device(), &KernelTable::global_avgpool_forward, x, y);
}

void global_avgpool_backward(const Tensor& dy, Tensor& dx) {
  expect_ndim("global_avgpool_backward", "grad_input", dx, 4, "(N, C, H, W)");
  DPB_CHECK(dy.numel() == dx.size(0) * dx.size(1)) << "global_avgpool_backward: grad_output " << dy.shape()
                                                   << " for input " << dx.shape();
  same_device("global_avgpool_backward", dy.device(), {&dx});
  dispatch("global_avgpool_backward", dy.device(), &KernelTable::global_avgpool_backward, dy, dx);
}

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  expect_shape("add", "second operand", b, a.shape());
  expect_shape("add", "output", out, a.shape());
  DPB_CHECK(a.layout() == b.layout() && a.layout() == out.layout())
      << "add: operands in different layouts (" << layout_name(a.layout()) << ", " << layout_name(b.layout())
      << " -> " << layout_name(out.layout()) << ")";
  same_device("add", a.device(), {&b, &out});
  dispatch("add", a.device(), &KernelTable::add, a, b, out);
}

void axpy(float alpha, const Tensor& x, Tensor& acc) {
  DPB_CHECK(x.numel() == acc.numel() && x.layout() == acc.layout())
      << "axpy: " << x.shape() << " " << layout_name(x.layout()) << " into " << acc.shape() << " "
      << layout_name(acc.layout());
  same_device("axpy", x.device(), {&acc});
  dispatch("axpy", x.device(), &KernelTable::axpy, alpha, x, acc);
}

void scale(Tensor& x, float alpha) {
  dispatch("scale", x.device(), &KernelTable::scale, x, alpha);
}

double sum_squares(const Tensor& x) {
  DPB_CHECK(x.dtype() == DType::f32) << "sum_squares: f32 tensors only, got " << dtype_name(x.dtype());
  return dispatch("sum_squares", x.device(), &KernelTable::sum_squares, x);
}

float softmax_cross_entropy(const Tensor& logits, const Tensor& labels, Tensor& dlogits, int64_t* correct) {
  expect_ndim("cross_entropy", "logits", logits, 2, "(N, classes)");
  DPB_CHECK(labels.dtype() == DType::i32 && labels.ndim() == 1 && labels.size(0) == logits.size(0))
      << "cross_entropy: labels must be (N) int32 for logits " << logits.shape() << ", got " << labels.shape() << " "
      << dtype_name(labels.dtype());
  if (dlogits.defined()) expect_shape("cross_entropy", "grad", dlogits, logits.shape());
  same_device("cross_entropy", logits.device(), {&labels, &dlogits});
  return dispatch("cross_entropy", logits.device(), &KernelTable::softmax_cross_entropy, logits, labels, dlogits, correct);
}

Tensor softmax_cross_entropy_deferred(const Tensor& logits, const Tensor& labels, Tensor& dlogits) {
  expect_ndim("cross_entropy", "logits", logits, 2, "(N, classes)");
  DPB_CHECK(labels.dtype() == DType::i32 && labels.ndim() == 1 && labels.size(0) == logits.size(0))
      << "cross_entropy: labels must be (N) int32 for logits " << logits.shape() << ", got " << labels.shape() << " "
      << dtype_name(labels.dtype());
  if (dlogits.defined()) expect_shape("cross_entropy", "grad", dlogits, logits.shape());
  same_device("cross_entropy", logits.device(), {&labels, &dlogits});
  return dispatch("cross_entropy", logits.device(), &KernelTable::softmax_cross_entropy_deferred, logits, labels,
                  dlogits);
}

void cross_entropy_part_stats(const Tensor& logits, const Tensor& labels, int64_t first, Tensor& stats) {
  expect_ndim("cross_entropy", "logits", logits, 2, "(N, classes)");
  DPB_CHECK(labels.dtype() == DType::i32 && labels.ndim() == 1 && labels.size(0) == logits.size(0))
      << "cross_entropy: labels must be (N) int32 for logits " << logits.shape() << ", got " << labels.shape() << " "
      << dtype_name(labels.dtype());
  expect_shape("cross_entropy", "stats", stats, {logits.size(0), 4});
  expect_dtype("cross_entropy", "stats", stats, DType::f32);
  DPB_CHECK(first >= 0) << "cross_entropy: a part starting at class " << first;
  same_device("cross_entropy", logits.device(), {&labels, &stats});
  dispatch("cross_entropy", logits.device(), &KernelTable::cross_entropy_part_stats, logits, labels, first, stats);
}

Tensor cross_entropy_part_finish(const Tensor& logits, const Tensor& labels, int64_t first, int64_t classes,
                                 const Tensor& all_stats, Tensor& dlogits) {
  expect_ndim("cross_entropy", "logits", logits, 2, "(N, classes)");
  expect_ndim("cross_entropy", "stats", all_stats, 3, "(ranks, N, 4)");
  DPB_CHECK(all_stats.size(1) == logits.size(0) && all_stats.size(2) == 4 && all_stats.dtype() == DType::f32)
      << "cross_entropy: stats must be f32 (ranks, " << logits.size(0) << ", 4), got " << all_stats.shape();
  DPB_CHECK(first >= 0 && first + logits.size(1) <= classes)
      << "cross_entropy: classes [" << first << ", " << first + logits.size(1) << ") outside " << classes;
  if (dlogits.defined()) expect_shape("cross_entropy", "grad", dlogits, logits.shape());
  same_device("cross_entropy", logits.device(), {&labels, &all_stats, &dlogits});
  return dispatch("cross_entropy", logits.device(), &KernelTable::cross_entropy_part_finish, logits, labels, first, classes, all_stats, dlogits);
}

float read_cross_entropy(const Tensor& totals, int64_t rows, int64_t classes, int64_t* correct) {
  DPB_CHECK(totals.defined() && totals.numel() == 3) << "read_cross_entropy: not the totals of a cross-entropy";
  struct {
    float loss;
    int32_t correct, bad;
  } host{};
  copy_bytes(Device::cpu(), &host, totals.device(), totals.raw(), sizeof(host));
  DPB_CHECK(host.bad == 0) << "cross_entropy: " << host.bad << " of " << rows << " labels outside [0, " << classes
                           << ")";
  if (correct) *correct = host.correct;
  return host.loss / static_cast<float>(rows);
}

float mse_loss(const Tensor& pred, const Tensor& target, Tensor& dpred) {
  DPB_CHECK(pred.numel() == target.numel()) << "mse_loss: prediction " << pred.shape() << " vs target "
                                            << target.shape();
  same_device("mse_loss", pred.device(), {&target, &dpred});
  return dispatch("mse_loss", pred.device(), &KernelTable::mse_loss, pred, target, dpred);
}

void synchronize(const Device& device) {
  if (!device.is_cuda()) return;
#if DPB_WITH_CUDA
  cuda::synchronize(device.index);
#else
  DPB_FAIL() << "synchronize on " << device << ": this build has no CUDA backend";
#endif
}

DeviceMarks::~DeviceMarks() {
#if DPB_WITH_CUDA
  for (void* e : events_) cuda::destroy_event(e);
#endif
}

size_t DeviceMarks::mark() {
  if (!device_.is_cuda()) {
    host_ns_.push_back(now_ns());
    return host_ns_.size() - 1;
  }
#if DPB_WITH_CUDA
  events_.push_back(cuda::record_event(device_.index));
  return events_.size() - 1;
#else
  DPB_FAIL() << "timing " << device_ << ": this build has no CUDA backend";
#endif
}

double DeviceMarks::seconds(size_t a, size_t b) const {
  if (!device_.is_cuda()) return static_cast<double>(host_ns_.at(b) - host_ns_.at(a)) * 1e-9;
#if DPB_WITH_CUDA
  return static_cast<double>(cuda::event_elapsed_ms(events_.at(a), events_.at(b))) * 1e-3;
#else
  DPB_FAIL() << "timing " << device_ << ": this build has no CUDA backend";
#endif
}

std::optional<int64_t> DeviceMarks::host_ns(size_t mark) const {
  if (device_.is_cuda()) return std::nullopt;
  return host_ns_.at(mark);
}

void sgd_step(Tensor& param, const Tensor& grad, Tensor& buf, const SgdHyper& h, bool first) {
  DPB_CHECK(grad.numel() == param.numel()) << "sgd_step: grad " << grad.shape() << " for param " << param.shape();
  same_device("sgd_step", param.device(), {&grad, &buf});
  dispatch("sgd_step", param.device(), &KernelTable::sgd_step, param, grad, buf, h, first);
}

void adam_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamHyper& h, int64_t step) {
  DPB_CHECK(grad.numel() == param.numel()) << "adam_step: grad " << grad.shape() << " for param " << param.shape();
  same_device("adam_step", param.device(), {&grad, &m, &v});
  dispatch("adam_step", param.device(), &KernelTable::adam_step, param, grad, m, v, h, step);
}

}  // namespace dpb::ops
