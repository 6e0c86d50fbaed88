#include "engine/nn/attention.h"

#include "engine/backend/ops.h"
#include "engine/nn/init.h"

namespace dpb {

std::unique_ptr<Linear> gpt2_linear(int64_t in, int64_t out, float std, Generator* gen) {
  auto l = std::make_unique<Linear>(in, out, true, nullptr);
  if (gen) {
    for (auto& [name, p] : l->named_parameters()) {
      if (name == "weight") init::normal(p->data(), std, *gen);
      else p->data().zero();
    }
  }
  return l;
}

CausalSelfAttention::CausalSelfAttention(int64_t dim, int64_t heads, float proj_std, Generator* gen)
    : CausalSelfAttention(dim, heads, dim, gpt2_linear(dim, 3 * dim, 0.02f, gen), gpt2_linear(dim, dim, proj_std, gen)) {}

CausalSelfAttention::CausalSelfAttention(int64_t dim, int64_t heads, int64_t head_width,
                                         std::unique_ptr<Module> c_attn, std::unique_ptr<Module> c_proj)
    : dim_(dim), heads_(heads), head_width_(head_width), full_heads_(heads), full_width_(head_width) {
  DPB_CHECK(dim > 0 && heads > 0 && head_width > 0 && head_width % heads == 0)
      << "CausalSelfAttention: width " << head_width << " does not divide into " << heads << " heads";
  c_attn_ = &register_module("c_attn", std::move(c_attn));
  c_proj_ = &register_module("c_proj", std::move(c_proj));
}

bool CausalSelfAttention::split_heads(int ranks) {
  DPB_CHECK(ranks >= 1 && full_heads_ % ranks == 0)
      << "CausalSelfAttention: " << full_heads_ << " heads do not split over " << ranks << " ranks";
  heads_ = full_heads_ / ranks;
  head_width_ = full_width_ / ranks;
  return true;
}

void CausalSelfAttention::child_replaced(const std::string& name, Module* child) {
  if (name == "c_attn") c_attn_ = child;
  if (name == "c_proj") c_proj_ = child;
}

void CausalSelfAttention::set_needs_input_grad(bool on) {
  Module::set_needs_input_grad(on);
  c_attn_->set_needs_input_grad(on);
}

// x (N, T, C) -> qkv (N, T, 3C) -> y (N, T, C) -> out (N, T, C)
Tensor CausalSelfAttention::forward(const Tensor& x) {
  DPB_CHECK(x.ndim() == 3 && x.size(2) == dim_)
      << "CausalSelfAttention(" << dim_ << ") expects (N, T, " << dim_ << "), got " << x.shape();
  Tensor qkv = c_attn_->forward(x);
  DPB_CHECK(qkv.size(2) == 3 * head_width_) << "CausalSelfAttention: c_attn gives " << qkv.size(2)
                                            << " columns, not 3 x " << head_width_;
  Tensor y = Tensor::empty({x.size(0), x.size(1), head_width_}, x.device(), qkv.dtype());
  if (ops::attention_fused(qkv, heads_)) {
    Tensor stats = Tensor::empty({x.size(0), heads_, x.size(1)}, x.device());
    ops::attention_forward_fused(qkv, heads_, y, stats);
    if (training_) {
      qkv_ = qkv;
      y_ = y;
      stats_ = stats;
    }
  } else {
    Tensor probs = Tensor::empty({x.size(0), heads_, x.size(1), x.size(1)}, x.device(), qkv.dtype());
    ops::attention_forward(qkv, heads_, y, probs);
    if (training_) {
      qkv_ = qkv;
      probs_ = probs;
    }
  }
  return c_proj_->forward(y);
}

Tensor CausalSelfAttention::backward(const Tensor& dy) {
  DPB_CHECK(qkv_.defined()) << "CausalSelfAttention.backward without a training-mode forward";
  Tensor dattn = c_proj_->backward(dy);
  Tensor dqkv = Tensor::empty_like(qkv_);
  if (stats_.defined()) ops::attention_backward_fused(qkv_, y_, stats_, dattn, heads_, dqkv);
  else ops::attention_backward(qkv_, probs_, dattn, heads_, dqkv);
  qkv_ = probs_ = y_ = stats_ = Tensor();
  return c_attn_->backward(dqkv);
}

int64_t CausalSelfAttention::forward_flops(const Shape& input, Shape* output) const {
  Shape qkv, y;
  int64_t total = c_attn_->forward_flops(input, &qkv);
  std::vector<int64_t> heads_out = input.dims();
  heads_out.back() = head_width_;
  total += c_proj_->forward_flops(Shape(heads_out), &y);
  // q k^T and probs v: 2 x T x T x C multiply-adds each over the heads. The causal mask
  // halves the useful work, but the products are computed whole, as PaLM's count states.
  const int64_t T = input.ndim() >= 2 ? input[input.ndim() - 2] : 1;
  total += 2 * 2 * T * T * head_width_;
  *output = input;
  return total;
}

std::unique_ptr<Module> CausalSelfAttention::clone_structure() const {
  return std::make_unique<CausalSelfAttention>(dim_, heads_, head_width_, c_attn_->clone_structure(),
                                               c_proj_->clone_structure());
}

}  // namespace dpb
