#pragma once
// GPT-2 on one page: engine/models/gpt2.cpp reads top-down as nanoGPT's model.py does:
// the configuration, attention, the MLP, the block, the model (its parameter names, its
// FSDP units and tensor-parallel plan) and its FLOPs per token. The ops it calls
// (ops::attention_forward, layernorm, gelu, the linears' products) keep their maths in
// engine/backend, one file per layer, forward and backward side by side.
#include <memory>
#include <vector>

#include "engine/core/rng.h"
#include "engine/models/model.h"
#include "engine/nn/layer_norm.h"
#include "engine/nn/linear.h"
#include "engine/nn/sequential.h"

namespace dpb {

// GPT-2's size: nanoGPT's GPTConfig (n_layer, n_head, n_embd, block_size, vocab_size).
struct Gpt2Config {
  const char* name;
  int64_t layers, heads, width, context, vocab;
};
// gpt2 (124M), gpt2-medium (350M) and gpt2-tiny (for tests), in that order.
const std::vector<const Gpt2Config*>& gpt2_configs();

// A Linear initialised as GPT-2's: weight N(0, std^2), bias zero.
std::unique_ptr<Linear> gpt2_linear(int64_t in, int64_t out, float std, Generator* gen);

// CausalSelfAttention (nanoGPT's names): x (N, T, C) -> c_attn (C -> 3C, the fused
// query/key/value projection) -> causal multi-head scaled dot-product attention
// (ops::attention_forward, one op; fused where ops::attention_fused says so) -> c_proj
// (C -> C). Initialisation as GPT-2: weights N(0, 0.02^2), biases zero, and c_proj's
// weight scaled by 1/sqrt(2 x layers) (the residual projections; `proj_std` gives it).
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

// A GPT-2 transformer block (pre-norm), nanoGPT's `Block` with its names:
//   h   = x + attn(ln_1(x))
//   out = h + mlp(ln_2(h)),   mlp = c_fc (C -> 4C), gelu, c_proj (4C -> C)
// The two residual adds are this module's; backward adds each branch's input gradient
// to the gradient that skips it.
class TransformerBlock : public Module {
 public:
  // `layers` is the depth of the whole model (GPT-2 scales the residual projections'
  // initialisation by 1/sqrt(2 x layers)).
  TransformerBlock(int64_t dim, int64_t heads, int64_t layers, Generator* gen);
  // A block with given branches: attn and mlp each map (N, T, dim) to (N, T, dim)
  // (clone_structure builds one so).
  TransformerBlock(int64_t dim, std::unique_ptr<Module> attn, std::unique_ptr<Module> mlp);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  std::string type_name() const override { return "TransformerBlock"; }
  int64_t forward_flops(const Shape& input, Shape* output) const override;
  std::unique_ptr<Module> clone_structure() const override;
  void set_needs_input_grad(bool on) override;

 protected:
  void child_replaced(const std::string& name, Module* child) override;

 private:
  int64_t dim_;
  LayerNorm* ln_1_;
  Module* attn_;
  LayerNorm* ln_2_;
  Module* mlp_;
};

// The model's description (no parameter built): input (T) tokens, the vocabulary, depth,
// width and heads, the tied head, FSDP's units and the tensor-parallel plan.
ModelSpec gpt2_spec(const Gpt2Config& c, const ModelOptions& o);
// GPT-2 as nanoGPT builds it, with its parameter names.
std::unique_ptr<Model> build_gpt2(const Gpt2Config& c, Generator& gen, const ModelOptions& o);
// Training FLOPs per token (PaLM's appendix B, nanoGPT's estimate_mfu): 6 N + 12 L C T,
// N the parameters without the position table.
double gpt2_flops_per_token(const ModelSpec& spec, int64_t parameters);

}  // namespace dpb
