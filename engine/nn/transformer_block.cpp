#include "engine/nn/transformer_block.h"

#include <cmath>

#include "engine/backend/ops.h"
#include "engine/nn/gelu.h"

namespace dpb {

namespace {
// GPT-2 scales the residual projections' initialisation by 1/sqrt(2 x layers).
float proj_std(int64_t layers) {
  DPB_CHECK(layers >= 1) << "TransformerBlock: a model of " << layers << " layers";
  return 0.02f / std::sqrt(2.0f * static_cast<float>(layers));
}

std::unique_ptr<Module> gpt2_mlp(int64_t dim, float proj, Generator* gen) {
  auto mlp = std::make_unique<Sequential>();
  mlp->add("c_fc", gpt2_linear(dim, 4 * dim, 0.02f, gen));
  mlp->add("gelu", std::make_unique<GELU>());
  mlp->add("c_proj", gpt2_linear(4 * dim, dim, proj, gen));
  return mlp;
}
}  // namespace

TransformerBlock::TransformerBlock(int64_t dim, int64_t heads, int64_t layers, Generator* gen)
    : TransformerBlock(dim, std::make_unique<CausalSelfAttention>(dim, heads, proj_std(layers), gen),
                       gpt2_mlp(dim, proj_std(layers), gen)) {}

TransformerBlock::TransformerBlock(int64_t dim, std::unique_ptr<Module> attn, std::unique_ptr<Module> mlp)
    : dim_(dim) {
  ln_1_ = &register_module("ln_1", std::make_unique<LayerNorm>(dim));
  attn_ = &register_module("attn", std::move(attn));
  ln_2_ = &register_module("ln_2", std::make_unique<LayerNorm>(dim));
  mlp->set_needs_input_grad(true);
  mlp_ = &register_module("mlp", std::move(mlp));
}

void TransformerBlock::child_replaced(const std::string& name, Module* child) {
  if (name == "attn") attn_ = child;
  if (name == "mlp") mlp_ = child;
  DPB_CHECK(name != "ln_1" && name != "ln_2") << "TransformerBlock: its layer norms are not replaced";
}

void TransformerBlock::set_needs_input_grad(bool on) {
  Module::set_needs_input_grad(on);
  ln_1_->set_needs_input_grad(on);
}

// x (N, T, C) -> (N, T, C)
Tensor TransformerBlock::forward(const Tensor& x) {
  DPB_CHECK(x.ndim() == 3 && x.size(2) == dim_)
      << "TransformerBlock(" << dim_ << ") expects (N, T, " << dim_ << "), got " << x.shape();
  // The residual stream keeps x's dtype; under bf16 the branches come back in bf16 and
  // are added in f32, as autocast promotes them.
  Tensor a = attn_->forward(ln_1_->forward(x)).to_dtype(x.dtype());
  Tensor h = Tensor::empty_like(x);
  ops::add(x, a, h);
  Tensor m = mlp_->forward(ln_2_->forward(h)).to_dtype(x.dtype());
  Tensor out = Tensor::empty_like(h);
  ops::add(h, m, out);
  return out;
}

Tensor TransformerBlock::backward(const Tensor& dy) {
  // The MLP branch: dh = dy + ln_2'(mlp'(dy))
  Tensor dh = ln_2_->backward(mlp_->backward(dy)).to_dtype(dy.dtype());
  ops::add(dh, dy, dh);
  // The attention branch: dx = dh + ln_1'(attn'(dh))
  Tensor dx = ln_1_->backward(attn_->backward(dh));
  if (!dx.defined()) return Tensor();
  dx = dx.to_dtype(dh.dtype());
  ops::add(dx, dh, dx);
  return dx;
}

int64_t TransformerBlock::forward_flops(const Shape& input, Shape* output) const {
  Shape s;
  int64_t total = ln_1_->forward_flops(input, &s);
  total += attn_->forward_flops(s, &s);
  total += ln_2_->forward_flops(s, &s);
  total += mlp_->forward_flops(s, &s);
  total += 2 * input.numel();  // the residual adds
  *output = input;
  return total;
}

std::unique_ptr<Module> TransformerBlock::clone_structure() const {
  return std::make_unique<TransformerBlock>(dim_, attn_->clone_structure(), mlp_->clone_structure());
}

}  // namespace dpb
