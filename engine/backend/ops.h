#pragma once
// The engine's operations: one function per op, dispatched on the device of the
// tensors (CPU: oneDNN + small loops in backend/cpu; CUDA: backend/cuda).
// All tensors passed to one call live on the same device (checked).
// Shapes: activations (N, C, H, W), linear weights (out, in), conv weights (O, I, kH, kW).
// Ops write into caller-provided outputs, except where the op chooses the output's
// memory layout (conv2d_forward returns it). Gradients have the layout of the tensor
// they are the gradient of (dx like x, dy like y); parameters are always plain.
#include <cstdint>
#include <optional>
#include <string>

#include "engine/tensor/tensor.h"

namespace dpb::ops {

struct Conv2dParams {
  int stride = 1;
  int padding = 0;
  // Whether conv2d_backward_data will run for this convolution (false for a model's
  // first layer); a layout hint only, never a change in results.
  bool input_grad = true;
};

struct Pool2dParams {
  int kernel = 2;
  int stride = 2;
  int padding = 0;
};

enum class PoolKind { max, avg };

// Output spatial size of a convolution or pooling window.
inline int64_t window_out(int64_t in, int kernel, int stride, int padding) {
  return (in + 2 * padding - kernel) / stride + 1;
}

// The form of a parameter `w` (f32, plain) that conv2d/linear compute with on its device:
// `w` itself on the CPU; on CUDA cast to the compute dtype (and channels-last for
// convolutions under tf32/bf16). Layers convert once per forward and reuse it in
// backward; ops also accept the plain f32 parameter (and convert it themselves).
Tensor compute_weight(const Tensor& w);

// --- convolution ---------------------------------------------------------------
// y (N, O, Ho, Wo) = conv(x (N, I, H, W), w (O, I, k, k)) + b (O) ; b may be undefined.
// y is channel-blocked on the CPU when O divides into the CPU's channel block.
Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p);
// dx = conv_transpose(dy, w)
void conv2d_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx, const Conv2dParams& p);
// dw (+)= corr(x, dy), db (+)= sum(dy) over N, H, W ; db may be undefined.
// With accumulate, results are added to dw/db (gradient accumulation), else they overwrite.
void conv2d_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& db, const Conv2dParams& p,
                             bool accumulate);

// --- linear ----------------------------------------------------------------------
// y (N, out) = x (N, in) * w^T (in, out) + b (out) ; b may be undefined.
void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y);
// dx (N, in) = dy (N, out) * w (out, in)
void linear_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx);
// dw (out, in) (+)= dy^T x ; db (out) (+)= sum_n dy ; db may be undefined.
void linear_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor& db, bool accumulate);

// --- batch norm (per channel of (N, C, H, W)) ------------------------------------------------
struct BatchNormSaved {
  Tensor mean;     // (C) batch mean
  Tensor var;      // (C) biased batch variance (CPU backend)
  Tensor invstd;   // (C) 1 / sqrt(var + eps) (CUDA backend, cuDNN's form, instead of var)
};
// Training: normalises with batch statistics, saves them, and updates the running
// statistics the way PyTorch does (running_var uses the unbiased batch variance).
void batchnorm_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                             BatchNormSaved& saved, Tensor& running_mean, Tensor& running_var, float momentum,
                             float eps);
// Evaluation: normalises with the running statistics.
void batchnorm_forward_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                            const Tensor& running_mean, const Tensor& running_var, float eps);
// Backward: dx; dgamma/dbeta (+)= as in conv2d_backward_weights. With global_stats the
// forward normalised with fixed statistics (saved = the running mean and variance) and
// dx does not flow through them; otherwise saved holds the batch statistics.
void batchnorm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const BatchNormSaved& saved,
                        Tensor& dx, Tensor& dgamma, Tensor& dbeta, float eps, bool accumulate,
                        bool global_stats = false);

// SyncBatchNorm's pieces. Per channel of x (any layout), over N, H, W: mean (C) and
// m2 (C) = sum of (x - mean)^2, in two passes (no cancellation when the mean is large
// against the spread); ranks combine them with Chan's formula.
void batchnorm_stats(const Tensor& x, Tensor& mean, Tensor& m2);
// The backward through batch statistics that were computed over all ranks: given
// dx = dy * gamma * invstd (batchnorm_backward with global_stats) and the global means
// mean_dy (C) = E[dy] and mean_dy_xhat (C) = E[dy * xhat], subtracts
// gamma * invstd * (mean_dy + xhat * mean_dy_xhat) from dx.
void batchnorm_sync_correction(const Tensor& x, const Tensor& mean, const Tensor& var, float eps,
                               const Tensor& gamma, const Tensor& mean_dy, const Tensor& mean_dy_xhat, Tensor& dx);

// --- activations, pooling, element-wise --------------------------------------------------------
void relu_forward(const Tensor& x, Tensor& y);
// Uses the forward output y (relu'(x) = y > 0), so the forward may run in place.
void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx);

// `workspace` holds what max-pool backward needs on the CPU (the argmax; allocated by the
// op); backward also gets the forward's input x and output y (cuDNN's pooling needs them).
void pool2d_forward(PoolKind kind, const Tensor& x, Tensor& y, Tensor& workspace, const Pool2dParams& p);
void pool2d_backward(PoolKind kind, const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& workspace,
                     Tensor& dx, const Pool2dParams& p);

// y (N, C) = mean over H, W of x (N, C, H, W)
void global_avgpool_forward(const Tensor& x, Tensor& y);
void global_avgpool_backward(const Tensor& dy, Tensor& dx);

// out = a + b (same shapes; out may alias a or b)
void add(const Tensor& a, const Tensor& b, Tensor& out);
// acc += alpha * x
void axpy(float alpha, const Tensor& x, Tensor& acc);
// x *= alpha
void scale(Tensor& x, float alpha);
// The sum of squares of x's elements (f32), accumulated in double; waits for the device.
double sum_squares(const Tensor& x);

// --- transformer ---------------------------------------------------------------------
// Token tensors are i32; activations (N, T, C) f32, plain.
// y (N, T, C) = table (V, C) rows at tokens (N, T); a token outside [0, V) is an error.
void embedding_forward(const Tensor& tokens, const Tensor& table, Tensor& y);
// dtable (V, C) (+)= the rows of dy (N, T, C) added at their tokens.
void embedding_backward(const Tensor& tokens, const Tensor& dy, Tensor& dtable, bool accumulate);
// The same over a part of a vocabulary split across tensor-parallel ranks: the table
// (V, C) holds rows [first, first + V) of a vocabulary of `vocab`. A token outside the
// part gets a zero row and adds nothing; a token outside [0, vocab) is an error (checked
// on the host for host tensors; on a GPU batches are checked when they are made).
void embedding_part_forward(const Tensor& tokens, const Tensor& table, int64_t first, int64_t vocab, Tensor& y);
void embedding_part_backward(const Tensor& tokens, const Tensor& dy, int64_t first, Tensor& dtable, bool accumulate);
// y (N, T, C) = x + table (P, C) rows 0..T-1 (learned position embedding; P >= T).
void position_embedding_forward(const Tensor& x, const Tensor& table, Tensor& y);
// dtable rows 0..T-1 (+)= sum over N of dy; rows T..P-1 get zero (or keep theirs).
void position_embedding_backward(const Tensor& dy, Tensor& dtable, bool accumulate);
// Layer norm over the last dimension C of x (..., C): y = (x - mean) * rstd * gamma + beta,
// saving mean and rstd (one per row, M = numel / C).
void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& mean,
                       Tensor& rstd, float eps);
// dx (undefined: not computed); dgamma/dbeta (+)= as in linear_backward_weights.
void layernorm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta, bool accumulate);
// GELU, tanh approximation (GPT-2's): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
void gelu_forward(const Tensor& x, Tensor& y);
void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx);
// Causal multi-head scaled dot-product attention on the fused projection qkv (N, T, 3C)
// (q, k, v side by side, each C = heads x D wide, head h in columns h*D..h*D+D-1):
// y (N, T, C) = softmax(q k^T / sqrt(D), masked to keys <= query) v per head; saves the
// probabilities in probs (N, heads, T, T).
void attention_forward(const Tensor& qkv, int64_t heads, Tensor& y, Tensor& probs);
// dqkv (N, T, 3C) from dy (N, T, C) and the forward's qkv and probs (overwritten).
void attention_backward(const Tensor& qkv, const Tensor& probs, const Tensor& dy, int64_t heads, Tensor& dqkv);
// Whether attention on qkv runs fused (flash attention: cuDNN's fused kernels, CUDA bf16),
// saving each row's softmax statistics instead of the probabilities. When it does not,
// *why (when given) says why: the device, dtype, head width, GPU or cuDNN's refusal.
bool attention_fused(const Tensor& qkv, int64_t heads, std::string* why = nullptr);
// How attention ran in this process since reset_attention_use(): forward calls fused
// and not, and why the last one that was not fused could not be (attention_fused's why).
struct AttentionUse {
  int64_t fused = 0, unfused = 0;
  std::string why_not;
};
AttentionUse attention_use();
void reset_attention_use();
// The fused forward: y (N, T, C) and stats (N, heads, T) fp32, each row's log-sum-exp of
// its scaled, masked scores.
void attention_forward_fused(const Tensor& qkv, int64_t heads, Tensor& y, Tensor& stats);
// dqkv (N, T, 3C) from the fused forward's qkv, y and stats, and dy (N, T, C).
void attention_backward_fused(const Tensor& qkv, const Tensor& y, const Tensor& stats, const Tensor& dy,
                              int64_t heads, Tensor& dqkv);

// --- losses ----------------------------------------------------------------------
// Mean softmax cross-entropy of logits (N, C) against labels (N) i32; writes
// dlogits = (softmax - onehot) / N when dlogits is defined. Returns the loss, and the
// number of correct argmax predictions in *correct when not null.
float softmax_cross_entropy(const Tensor& logits, const Tensor& labels, Tensor& dlogits, int64_t* correct = nullptr);
// The same, leaving the result on the logits' device: the returned tensor holds the
// summed loss, the correct predictions and the labels out of range; read_cross_entropy
// waits for the device, checks the labels and returns the mean loss.
Tensor softmax_cross_entropy_deferred(const Tensor& logits, const Tensor& labels, Tensor& dlogits);
float read_cross_entropy(const Tensor& totals, int64_t rows, int64_t classes, int64_t* correct);
// Cross-entropy over logits split by class across tensor-parallel ranks (Megatron's
// vocabulary-parallel cross-entropy), in two halves around one all-gather of the stats.
// This rank's logits (N, Cp) are classes [first, first + Cp). stats (N, 4) f32, per row:
// its max, the sum of exp(z - max), the label's logit (0 where the label is another
// rank's) and the class index of its first maximum.
void cross_entropy_part_stats(const Tensor& logits, const Tensor& labels, int64_t first, Tensor& stats);
// From every rank's stats (W, N, 4), in rank order (ascending parts): dlogits for this
// rank's columns (when defined) = (softmax - onehot) / N over all `classes`, and the
// totals as softmax_cross_entropy_deferred leaves them (read_cross_entropy reads them).
Tensor cross_entropy_part_finish(const Tensor& logits, const Tensor& labels, int64_t first, int64_t classes,
                                 const Tensor& all_stats, Tensor& dlogits);
// Mean squared error over all elements; dpred = 2 (pred - target) / numel when defined.
float mse_loss(const Tensor& pred, const Tensor& target, Tensor& dpred);

// Waits until the work queued on `device` by this thread has completed (a no-op on the CPU,
// whose ops complete before they return).
void synchronize(const Device& device);

// Points in a device's work on its own clock, for timing what ran between them without
// waiting in between: on a GPU a CUDA timing event recorded on this thread's current
// stream (read once the later point has passed), on a logical CPU device the host clock
// (its ops complete before they return: the host's clock is its own).
class DeviceMarks {
 public:
  explicit DeviceMarks(Device device) : device_(device) {}
  ~DeviceMarks();
  DeviceMarks(const DeviceMarks&) = delete;
  DeviceMarks& operator=(const DeviceMarks&) = delete;
  size_t mark();
  // Seconds from mark `a` to mark `b` (waits for `b` to pass on a GPU).
  double seconds(size_t a, size_t b) const;
  // The host clock's time of a mark where it is the device's (a logical CPU device);
  // nullopt on a GPU, whose marks pass when its work reaches them.
  std::optional<int64_t> host_ns(size_t mark) const;

 private:
  Device device_;
  std::vector<int64_t> host_ns_;
  std::vector<void*> events_;
};

// --- optimizer steps (in place on the parameter's device) ------------------------------------
struct SgdHyper {
  float lr = 0.01f;
  float momentum = 0.0f;
  float dampening = 0.0f;
  float weight_decay = 0.0f;
  bool nesterov = false;
};
// PyTorch's SGD: `buf` is the momentum buffer; `first` says it holds no history yet.
void sgd_step(Tensor& param, const Tensor& grad, Tensor& buf, const SgdHyper& h, bool first);

struct AdamHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  bool decoupled = false;  // AdamW
};
// PyTorch's Adam/AdamW; `step` counts from 1.
void adam_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamHyper& h, int64_t step);

}  // namespace dpb::ops
