#pragma once
// Embeddings, as GPT-2 uses them:
// - Embedding: a table (V, C) looked up by i32 tokens (N, T) -> (N, T, C)
//   (torch.nn.Embedding; GPT-2's `wte`);
// - PositionEmbedding: adds the table's rows 0..T-1 to (N, T, C) (GPT-2's learned `wpe`,
//   written as its own layer so that the pair is two layers of a Sequential with
//   nanoGPT's parameter names, transformer.wte.weight and transformer.wpe.weight).
// Both are initialised N(0, 0.02^2), as GPT-2.
#include "engine/core/rng.h"
#include "engine/nn/module.h"

namespace dpb {

class Embedding : public Module {
 public:
  // `gen` null leaves the table uninitialised (for clones).
  Embedding(int64_t num, int64_t dim, Generator* gen);

  Tensor forward(const Tensor& tokens) override;
  // Returns no input gradient (tokens have none).
  Tensor backward(const Tensor& grad_out) override;
  // Its backward scatters the output gradient into the table's gradient by token.
  bool backward_reads_parameters() const override { return false; }
  std::string type_name() const override { return "Embedding"; }
  int64_t forward_flops(const Shape& input, Shape* output) const override;
  std::unique_ptr<Module> clone_structure() const override;

  Parameter& weight() { return *weight_; }
  int64_t num() const { return num_; }
  int64_t dim() const { return dim_; }

 private:
  int64_t num_, dim_;
  Parameter* weight_;  // (num, dim)
  Tensor tokens_;      // (N, T) saved input
};

class PositionEmbedding : public Module {
 public:
  PositionEmbedding(int64_t positions, int64_t dim, Generator* gen);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  std::string type_name() const override { return "PositionEmbedding"; }
  int64_t forward_flops(const Shape& input, Shape* output) const override;
  std::unique_ptr<Module> clone_structure() const override;

 private:
  int64_t positions_, dim_;
  Parameter* weight_;  // (positions, dim)
};

}  // namespace dpb
