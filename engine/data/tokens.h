#pragma once
// Token-sequence datasets for the language models. A sample is T tokens and its target
// the T tokens that follow each (the sequence shifted by one), i32 both.
// - SyntheticTokens: learnable arithmetic sequences. Sample i starts at a random token
//   s and steps by a random stride k from {1, 2, 3, 5}: token_t = (s + k t) mod M, with
//   M = min(vocabulary, 64). Every token after the second follows from the two before
//   it, so a causal model's loss falls towards zero; sample i depends only on (seed, i).
// - TextTokens: byte-level tokens (0..255) of any file, as nanoGPT's character-level
//   Shakespeare: the first 90 % of the bytes are the training split, the rest the
//   validation split, each cut into consecutive windows of T + 1 bytes overlapping by one.
#include <string>
#include <vector>

#include "engine/data/dataset.h"

namespace dpb {

// What every token dataset shares: samples of `seq` i32 tokens, targets over `vocab`
// classes, read with get_tokens (get, for float samples, is an error naming it).
class TokenSequences : public Dataset {
 public:
  int64_t size() const override { return size_; }
  Shape sample_shape() const override { return Shape{seq_}; }
  LossKind target_kind() const override { return LossKind::cross_entropy; }
  int64_t target_width() const override { return vocab_; }
  DType input_dtype() const override { return DType::i32; }
  void get(int64_t index, float* x, int32_t* label, float* target) const override;

 protected:
  TokenSequences(int64_t seq, int64_t vocab, int64_t size) : seq_(seq), vocab_(vocab), size_(size) {}
  int64_t seq_, vocab_, size_;
};

class SyntheticTokens : public TokenSequences {
 public:
  SyntheticTokens(int64_t seq, int64_t vocab, int64_t size, uint64_t seed, int64_t first = 0);

  std::string name() const override { return "synthetic"; }
  void get_tokens(int64_t index, int32_t* tokens, int32_t* next) const override;

 private:
  uint64_t seed_;
  int64_t first_;
};

class TextTokens : public TokenSequences {
 public:
  // Reads `path` whole; `train` picks the split. `vocab` is the model's (at least 256).
  TextTokens(const std::string& path, bool train, int64_t seq, int64_t vocab);

  std::string name() const override { return "text"; }
  void get_tokens(int64_t index, int32_t* tokens, int32_t* next) const override;

  int64_t bytes() const { return static_cast<int64_t>(bytes_.size()); }

 private:
  std::vector<unsigned char> bytes_;  // this split's bytes
};

}  // namespace dpb
