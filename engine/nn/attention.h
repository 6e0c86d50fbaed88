#pragma once
// CausalSelfAttention, as GPT-2 (nanoGPT's names): x (N, T, C) -> c_attn (C -> 3C, the
// fused query/key/value projection) -> causal multi-head scaled dot-product attention
// (ops::attention_forward, one op; fused where ops::attention_fused says so) -> c_proj
// (C -> C).
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
  // Attention over `heads` heads `head_width` wide in total, with given projections:
  // c_attn (dim -> 3 x head_width, query/key/value side by side) and c_proj
  // (head_width -> dim) (clone_structure builds one so).
  CausalSelfAttention(int64_t dim, int64_t heads, int64_t head_width, std::unique_ptr<Module> c_attn,
                      std::unique_ptr<Module> c_proj);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  std::string type_name() const override { return "CausalSelfAttention"; }
  int64_t forward_flops(const Shape& input, Shape* output) const override;
  std::unique_ptr<Module> clone_structure() const override;
  void set_needs_input_grad(bool on) override;

  int64_t heads() const { return heads_; }
  bool split_heads(int ranks) override;
  int64_t attention_heads() const override { return full_heads_; }

 protected:
  void child_replaced(const std::string& name, Module* child) override;

 private:
  int64_t dim_, heads_, head_width_;
  int64_t full_heads_, full_width_;  // before split_heads
  Module* c_attn_;
  Module* c_proj_;
  // Saved by a training forward: qkv (N, T, 3C) and the probabilities (N, heads, T, T),
  // or, where attention runs fused, its output y (N, T, C) and statistics (N, heads, T).
  Tensor qkv_, probs_, y_, stats_;
};

}  // namespace dpb
