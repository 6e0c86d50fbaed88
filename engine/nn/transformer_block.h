#pragma once
// A GPT-2 transformer block (pre-norm), nanoGPT's `Block` with its names:
//   h   = x + attn(ln_1(x))
//   out = h + mlp(ln_2(h)),   mlp = c_fc (C -> 4C), gelu, c_proj (4C -> C)
// The two residual adds are this module's; backward adds each branch's input gradient
// to the gradient that skips it.
#include "engine/nn/attention.h"
#include "engine/nn/layer_norm.h"
#include "engine/nn/sequential.h"

namespace dpb {

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

}  // namespace dpb
