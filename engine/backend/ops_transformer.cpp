// Dispatch of the transformer's ops (embeddings, layer norm, GELU, attention) on the
// device of their tensors, shapes checked here as in ops.cpp.
#include <mutex>

#include "engine/backend/ops_dispatch.h"

namespace dpb::ops {

using namespace internal;  // NOLINT(google-build-using-namespace): the dispatch helpers

namespace {

// ops::attention_use's counts.
std::mutex attention_use_mu;
AttentionUse attention_use_counts;

void count_attention(bool fused) {
  std::lock_guard<std::mutex> lock(attention_use_mu);
  ++(fused ? attention_use_counts.fused : attention_use_counts.unfused);
}

void check_embedding(const char* op, const Tensor& tokens, const Tensor& table, const Tensor& act) {
  expect_ndim(op, "tokens", tokens, 2, "(N, T)");
  expect_dtype(op, "tokens", tokens, DType::i32);
  expect_ndim(op, "table", table, 2, "(V, C)");
  expect_shape(op, "activation", act, {tokens.size(0), tokens.size(1), table.size(1)});
  if (!act.device().is_cuda()) expect_dtype(op, "activation", act, DType::f32);
}

void check_position(const char* op, const Tensor& act, const Tensor& table) {
  expect_ndim(op, "activation", act, 3, "(N, T, C)");
  expect_ndim(op, "table", table, 2, "(P, C)");
  DPB_CHECK(act.size(1) <= table.size(0) && act.size(2) == table.size(1))
      << op << ": " << act.size(1) << " positions of width " << act.size(2) << " against a table " << table.shape()
      << " (the sequence is longer than the model's context)";
}

void check_qkv(const char* op, const Tensor& qkv, int64_t heads) {
  expect_ndim(op, "qkv", qkv, 3, "(N, T, 3C)");
  DPB_CHECK(qkv.size(2) % 3 == 0 && heads >= 1 && (qkv.size(2) / 3) % heads == 0)
      << op << ": qkv width " << qkv.size(2) << " is not 3 x a multiple of " << heads << " heads";
}

// y: the attention's output (or its gradient); saved: the probabilities (N, heads, T, T),
// or with `fused` the statistics (N, heads, T).
void check_attention(const char* op, const Tensor& qkv, int64_t heads, const Tensor& y, const Tensor& saved,
                     bool fused = false) {
  check_qkv(op, qkv, heads);
  expect_shape(op, "output", y, {qkv.size(0), qkv.size(1), qkv.size(2) / 3});
  if (fused) expect_shape(op, "stats", saved, {qkv.size(0), heads, qkv.size(1)});
  else expect_shape(op, "probabilities", saved, {qkv.size(0), heads, qkv.size(1), qkv.size(1)});
}
}  // namespace

void embedding_forward(const Tensor& tokens, const Tensor& table, Tensor& y) {
  embedding_part_forward(tokens, table, 0, table.size(0), y);
}

void embedding_backward(const Tensor& tokens, const Tensor& dy, Tensor& dtable, bool accumulate) {
  embedding_part_backward(tokens, dy, 0, dtable, accumulate);
}

void embedding_part_forward(const Tensor& tokens, const Tensor& table, int64_t first, int64_t vocab, Tensor& y) {
  check_embedding("embedding_forward", tokens, table, y);
  DPB_CHECK(first >= 0 && first + table.size(0) <= vocab)
      << "embedding_forward: rows [" << first << ", " << first + table.size(0) << ") outside a vocabulary of "
      << vocab;
  same_device("embedding_forward", tokens.device(), {&table, &y});
  dispatch("embedding_forward", tokens.device(), &KernelTable::embedding_forward, tokens, table, first, vocab, y);
}

void embedding_part_backward(const Tensor& tokens, const Tensor& dy, int64_t first, Tensor& dtable,
                             bool accumulate) {
  check_embedding("embedding_backward", tokens, dtable, dy);
  DPB_CHECK(first >= 0) << "embedding_backward: a part starting at row " << first;
  same_device("embedding_backward", tokens.device(), {&dy, &dtable});
  dispatch("embedding_backward", tokens.device(), &KernelTable::embedding_backward, tokens, dy, first, dtable, accumulate);
}

void position_embedding_forward(const Tensor& x, const Tensor& table, Tensor& y) {
  check_position("position_embedding_forward", x, table);
  expect_shape("position_embedding_forward", "output", y, x.shape());
  same_device("position_embedding_forward", x.device(), {&table, &y});
  dispatch("position_embedding_forward", x.device(), &KernelTable::position_embedding_forward, x, table, y);
}

void position_embedding_backward(const Tensor& dy, Tensor& dtable, bool accumulate) {
  check_position("position_embedding_backward", dy, dtable);
  same_device("position_embedding_backward", dy.device(), {&dtable});
  dispatch("position_embedding_backward", dy.device(), &KernelTable::position_embedding_backward, dy, dtable, accumulate);
}

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& mean,
                       Tensor& rstd, float eps) {
  DPB_CHECK(x.ndim() >= 1 && x.is_plain() && (x.dtype() == DType::f32 || x.device().is_cuda()))
      << "layernorm_forward: input must be plain f32 (..., C) (bf16 on CUDA), got " << dtype_name(x.dtype()) << " "
      << x.shape();
  const int64_t C = x.size(x.ndim() - 1);
  expect_shape("layernorm_forward", "weight", gamma, {C});
  expect_shape("layernorm_forward", "bias", beta, {C});
  expect_shape("layernorm_forward", "output", y, x.shape());
  expect_shape("layernorm_forward", "mean", mean, {x.numel() / C});
  expect_shape("layernorm_forward", "rstd", rstd, {x.numel() / C});
  same_device("layernorm_forward", x.device(), {&gamma, &beta, &y, &mean, &rstd});
  dispatch("layernorm_forward", x.device(), &KernelTable::layernorm_forward, x, gamma, beta, y, mean, rstd, eps);
}

void layernorm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta, bool accumulate) {
  const int64_t C = x.size(x.ndim() - 1);
  expect_shape("layernorm_backward", "grad_output", dy, x.shape());
  if (dx.defined()) expect_shape("layernorm_backward", "grad_input", dx, x.shape());
  expect_shape("layernorm_backward", "weight gradient", dgamma, {C});
  expect_shape("layernorm_backward", "bias gradient", dbeta, {C});
  expect_shape("layernorm_backward", "mean", mean, {x.numel() / C});
  same_device("layernorm_backward", x.device(), {&dy, &gamma, &mean, &rstd, &dx, &dgamma, &dbeta});
  dispatch("layernorm_backward", x.device(), &KernelTable::layernorm_backward, x, dy, gamma, mean, rstd, dx, dgamma, dbeta, accumulate);
}

void gelu_forward(const Tensor& x, Tensor& y) {
  expect_shape("gelu_forward", "output", y, x.shape());
  DPB_CHECK(x.is_plain() && y.is_plain() && x.dtype() == y.dtype() && (x.dtype() == DType::f32 || x.device().is_cuda()))
      << "gelu_forward: plain f32 tensors (bf16 on CUDA) of one dtype";
  same_device("gelu_forward", x.device(), {&y});
  dispatch("gelu_forward", x.device(), &KernelTable::gelu_forward, x, y);
}

void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  expect_shape("gelu_backward", "grad_output", dy, x.shape());
  expect_shape("gelu_backward", "grad_input", dx, x.shape());
  same_device("gelu_backward", x.device(), {&dy, &dx});
  dispatch("gelu_backward", x.device(), &KernelTable::gelu_backward, x, dy, dx);
}

void attention_forward(const Tensor& qkv, int64_t heads, Tensor& y, Tensor& probs) {
  check_attention("attention_forward", qkv, heads, y, probs);
  same_device("attention_forward", qkv.device(), {&y, &probs});
  dispatch("attention_forward", qkv.device(), &KernelTable::attention_forward, qkv, heads, y, probs);
  count_attention(false);
}

void attention_backward(const Tensor& qkv, const Tensor& probs, const Tensor& dy, int64_t heads, Tensor& dqkv) {
  check_attention("attention_backward", qkv, heads, dy, probs);
  expect_shape("attention_backward", "grad_input", dqkv, qkv.shape());
  same_device("attention_backward", qkv.device(), {&probs, &dy, &dqkv});
  dispatch("attention_backward", qkv.device(), &KernelTable::attention_backward, qkv, probs, dy, heads, dqkv);
}


AttentionUse attention_use() {
  std::lock_guard<std::mutex> lock(attention_use_mu);
  return attention_use_counts;
}

void reset_attention_use() {
  std::lock_guard<std::mutex> lock(attention_use_mu);
  attention_use_counts = AttentionUse{};
}

bool attention_fused(const Tensor& qkv, int64_t heads, std::string* why) {
  check_qkv("attention_fused", qkv, heads);
  std::string no = "CPU (oneDNN products and a fused causal softmax)";
  if (qkv.device().is_cuda()) {
#if DPB_WITH_CUDA
    no = cuda::fused_attention_unsupported(qkv, heads);
#else
    no = "no CUDA in this build";
#endif
  }
  if (!no.empty()) {
    std::lock_guard<std::mutex> lock(attention_use_mu);
    attention_use_counts.why_not = no;
  }
  if (why) *why = no;
  return no.empty();
}

void attention_forward_fused(const Tensor& qkv, int64_t heads, Tensor& y, Tensor& stats) {
  check_attention("attention_forward_fused", qkv, heads, y, stats, true);
  same_device("attention_forward_fused", qkv.device(), {&y, &stats});
  dispatch("attention_forward", qkv.device(), &KernelTable::fused_attention_forward, qkv, heads, y, stats);
  count_attention(true);
}

void attention_backward_fused(const Tensor& qkv, const Tensor& y, const Tensor& stats, const Tensor& dy,
                              int64_t heads, Tensor& dqkv) {
  check_attention("attention_backward_fused", qkv, heads, dy, stats, true);
  expect_shape("attention_backward_fused", "output", y, dy.shape());
  expect_shape("attention_backward_fused", "grad_input", dqkv, qkv.shape());
  same_device("attention_backward_fused", qkv.device(), {&y, &stats, &dy, &dqkv});
  dispatch("attention_backward", qkv.device(), &KernelTable::fused_attention_backward, qkv, y, stats, dy, heads, dqkv);
}

}  // namespace dpb::ops
