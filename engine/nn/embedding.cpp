#include "engine/nn/embedding.h"

#include "engine/backend/ops.h"
#include "engine/nn/init.h"

namespace dpb {

namespace {
constexpr float kGpt2InitStd = 0.02f;
}

Embedding::Embedding(int64_t num, int64_t dim, Generator* gen) : num_(num), dim_(dim) {
  DPB_CHECK(num > 0 && dim > 0) << "Embedding(" << num << ", " << dim << "): sizes must be positive";
  Tensor w = Tensor::empty({num, dim});
  if (gen) init::normal(w, kGpt2InitStd, *gen);
  weight_ = &register_parameter("weight", w);
}

// tokens (N, T) i32 -> (N, T, C)
Tensor Embedding::forward(const Tensor& tokens) {
  DPB_CHECK(tokens.ndim() == 2 && tokens.dtype() == DType::i32)
      << "Embedding(" << num_ << ", " << dim_ << ") expects i32 tokens (N, T), got " << dtype_name(tokens.dtype())
      << " " << tokens.shape();
  Tensor y = Tensor::empty({tokens.size(0), tokens.size(1), dim_}, tokens.device());
  ops::embedding_forward(tokens, weight_->data(), y);
  if (training_) tokens_ = tokens;
  return y;
}

Tensor Embedding::backward(const Tensor& dy) {
  DPB_CHECK(tokens_.defined()) << "Embedding.backward without a training-mode forward";
  const bool acc = weight_->begin_grad();
  ops::embedding_backward(tokens_, dy, weight_->grad(), acc);
  weight_->mark_grad_ready();
  tokens_ = Tensor();
  return Tensor();
}

int64_t Embedding::forward_flops(const Shape& input, Shape* output) const {
  std::vector<int64_t> dims = input.dims();
  dims.push_back(dim_);
  *output = Shape(dims);
  return 0;
}

std::unique_ptr<Module> Embedding::clone_structure() const { return std::make_unique<Embedding>(num_, dim_, nullptr); }

PositionEmbedding::PositionEmbedding(int64_t positions, int64_t dim, Generator* gen)
    : positions_(positions), dim_(dim) {
  DPB_CHECK(positions > 0 && dim > 0) << "PositionEmbedding(" << positions << ", " << dim
                                      << "): sizes must be positive";
  Tensor w = Tensor::empty({positions, dim});
  if (gen) init::normal(w, kGpt2InitStd, *gen);
  weight_ = &register_parameter("weight", w);
}

// x (N, T, C) -> x + table[0..T)
Tensor PositionEmbedding::forward(const Tensor& x) {
  DPB_CHECK(x.ndim() == 3 && x.size(2) == dim_ && x.size(1) <= positions_)
      << "PositionEmbedding(" << positions_ << ", " << dim_ << ") expects (N, T <= " << positions_ << ", " << dim_
      << "), got " << x.shape();
  Tensor y = Tensor::empty_like(x);
  ops::position_embedding_forward(x, weight_->data(), y);
  return y;
}

Tensor PositionEmbedding::backward(const Tensor& dy) {
  const bool acc = weight_->begin_grad();
  ops::position_embedding_backward(dy, weight_->grad(), acc);
  weight_->mark_grad_ready();
  return needs_input_grad_ ? dy : Tensor();
}

int64_t PositionEmbedding::forward_flops(const Shape& input, Shape* output) const {
  *output = input;
  return input.numel();
}

std::unique_ptr<Module> PositionEmbedding::clone_structure() const {
  return std::make_unique<PositionEmbedding>(positions_, dim_, nullptr);
}

}  // namespace dpb
