#pragma once
// CausalSelfAttention, as GPT-2 (nanoGPT's names): x (N, T, C) -> c_attn (C -> 3C, the
// fused query/key/value projection) -> causal multi-head scaled dot-product attention
// (ops::attention_forward, one op) -> c_proj (C -> C).
//
// Initialisation as GPT-2: weights N(0, 0.02^2), biases zero, and c_proj's weight
// scaled by 1/sqrt(2 x layers) (the residual projections; `proj_std` gives it).
#include "engine/core/rng.h"
#include "engine/nn/linear.h"

namespace dpb {

// A Linear initialised as GPT-2's: weight N(0, std^2), bias zero.
std::unique_ptr<Linear> gpt2_linear(int64_t in, int64_t out, float std, Generator* gen);

class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(int64_t dim, int64_t heads, float proj_std, Generator* gen);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  std::string type_name() const override { return "CausalSelfAttention"; }
  int64_t forward_flops(const Shape& input, Shape* output) const override;
  std::unique_ptr<Module> clone_structure() const override;
  void set_needs_input_grad(bool on) override;

  int64_t heads() const { return heads_; }

 private:
  int64_t dim_, heads_;
  float proj_std_;
  Linear* c_attn_;
  Linear* c_proj_;
  Tensor qkv_, probs_;  // saved (N, T, 3C) and (N, heads, T, T)
};

}  // namespace dpb
