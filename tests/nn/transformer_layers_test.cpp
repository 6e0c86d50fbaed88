// The transformer's layers: backward against finite differences, attention against a
// direct computation and its causality, and GPT-2's shapes and parameter counts.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/backend/ops.h"
#include "engine/models/gpt2.h"
#include "engine/models/model.h"
#include "engine/nn/embedding.h"
#include "engine/nn/gelu.h"
#include "engine/nn/layer_norm.h"
#include "tests/nn/gradcheck.h"

namespace dpb {
namespace {

using testing::expect_gradients_match;
using testing::random_tensor;

Tensor random_tokens(int64_t n, int64_t t, int64_t vocab, Generator& g) {
  Tensor x = Tensor::empty({n, t}, Device::cpu(), DType::i32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data_i32()[i] = static_cast<int32_t>(g.below(static_cast<uint64_t>(vocab)));
  return x;
}

TEST(GradCheck, LayerNorm) {
  Generator g(40);
  LayerNorm ln(8);
  // Non-trivial affine parameters, so their gradients and the input's depend on them.
  for (auto& [name, p] : ln.named_parameters()) p->data().copy_from(random_tensor({8}, g));
  expect_gradients_match(ln, random_tensor({2, 3, 8}, g), 41);
}

TEST(GradCheck, Gelu) {
  Generator g(42);
  GELU gelu;
  expect_gradients_match(gelu, random_tensor({3, 4, 5}, g, 2.0f), 43);
}

TEST(GradCheck, Embedding) {
  Generator g(44);
  Embedding e(11, 6, &g);
  testing::GradCheckOptions o;
  o.check_input = false;
  expect_gradients_match(e, random_tokens(3, 5, 11, g), 45, o);
}

TEST(GradCheck, PositionEmbedding) {
  Generator g(46);
  PositionEmbedding p(9, 6, &g);
  expect_gradients_match(p, random_tensor({2, 5, 6}, g), 47);
}

TEST(GradCheck, CausalSelfAttention) {
  Generator g(48);
  CausalSelfAttention a(8, 2, 0.3f, &g);
  // GPT-2's 0.02 initialisation makes every score near zero; larger weights exercise
  // the softmax away from uniform.
  for (auto& [name, p] : a.named_parameters()) p->data().copy_from(random_tensor(p->data().shape(), g, 0.4f));
  expect_gradients_match(a, random_tensor({2, 5, 8}, g), 49);
}

TEST(GradCheck, TransformerBlock) {
  Generator g(50);
  TransformerBlock b(8, 2, 2, &g);
  for (auto& [name, p] : b.named_parameters()) p->data().copy_from(random_tensor(p->data().shape(), g, 0.3f));
  expect_gradients_match(b, random_tensor({2, 4, 8}, g), 51);
}

// The whole GPT-2 (tiny), tokens in and logits out: every parameter's gradient,
// including the token embedding, which the tied output head also uses.
TEST(GradCheck, Gpt2TinyWithTiedHead) {
  Generator g(52);
  ModelOptions mo;
  mo.seq = 6;
  auto m = build_model("gpt2-tiny", g, mo);
  for (auto& [name, p] : m->named_parameters()) p->data().copy_from(random_tensor(p->data().shape(), g, 0.1f));
  testing::GradCheckOptions o;
  o.check_input = false;
  o.samples = 12;
  expect_gradients_match(*m, random_tokens(2, 6, 512, g), 53, o);
}

// Long sequences run attention's products in causal blocks (2 from 32 tokens, 4 from 128,
// of uneven sizes here): the gradients there, as in one block.
TEST(GradCheck, CausalSelfAttentionInBlocks) {
  for (int64_t T : {37, 130}) {
    Generator g(60 + static_cast<uint64_t>(T));
    CausalSelfAttention a(8, 2, 0.3f, &g);
    for (auto& [name, p] : a.named_parameters()) p->data().copy_from(random_tensor(p->data().shape(), g, 0.4f));
    testing::GradCheckOptions o;
    o.samples = 20;
    SCOPED_TRACE("T = " + std::to_string(T));
    expect_gradients_match(a, random_tensor({2, T, 8}, g), 61, o);
  }
}

// On a CPU device attention never runs fused, says so, and the fused ops refuse with the
// reason rather than computing something else.
TEST(AttentionFused, CpuSaysWhyNotAndTheFusedOpsRefuse) {
  Generator g(55);
  const Tensor qkv = random_tensor({1, 4, 3 * 8}, g);
  std::string why;
  EXPECT_FALSE(ops::attention_fused(qkv, 2, &why));
  EXPECT_NE(why.find("CPU"), std::string::npos) << why;
  Tensor y = Tensor::empty({1, 4, 8}), stats = Tensor::empty({1, 2, 4});
  try {
    ops::attention_forward_fused(qkv, 2, y, stats);
    ADD_FAILURE() << "the fused forward ran on a CPU device";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA only"), std::string::npos) << e.what();
  }
  Tensor wrong = Tensor::empty({1, 2, 4, 4});
  EXPECT_THROW(ops::attention_forward_fused(qkv, 2, y, wrong), Error);  // stats, not probabilities
  EXPECT_THROW(ops::attention_fused(random_tensor({1, 4, 25}, g), 2), Error);  // not 3 x C wide
}

// Attention's forward against the textbook formula, head by head, in one block and in
// causal blocks.
class AttentionForward : public ::testing::TestWithParam<int64_t> {};

TEST_P(AttentionForward, MatchesDirectComputation) {
  Generator g(54);
  const int64_t N = 2, T = GetParam(), H = 2, C = 6, D = C / H;
  Tensor qkv = random_tensor({N, T, 3 * C}, g);
  Tensor y = Tensor::empty({N, T, C}), probs = Tensor::empty({N, H, T, T});
  ops::attention_forward(qkv, H, y, probs);
  const float* q = qkv.data();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> s(static_cast<size_t>(t + 1));
        double mx = -1e30, sum = 0;
        for (int64_t j = 0; j <= t; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += q[(n * T + t) * 3 * C + h * D + d] * q[(n * T + j) * 3 * C + C + h * D + d];
          s[static_cast<size_t>(j)] = dot / std::sqrt(static_cast<double>(D));
          mx = std::max(mx, s[static_cast<size_t>(j)]);
        }
        for (auto& v : s) sum += (v = std::exp(v - mx));
        for (int64_t d = 0; d < D; ++d) {
          double out = 0;
          for (int64_t j = 0; j <= t; ++j) out += s[static_cast<size_t>(j)] / sum * q[(n * T + j) * 3 * C + 2 * C + h * D + d];
          EXPECT_NEAR(y.data()[(n * T + t) * C + h * D + d], out, 1e-5) << "n " << n << " h " << h << " t " << t;
        }
        for (int64_t j = t + 1; j < T; ++j) EXPECT_EQ(probs.data()[((n * H + h) * T + t) * T + j], 0.0f);
      }
}

INSTANTIATE_TEST_SUITE_P(Lengths, AttentionForward, ::testing::Values(5, 33, 131));

// A token never sees the tokens after it: changing the last token leaves every earlier
// position's logits as they were.
TEST(Attention, Gpt2IsCausal) {
  Generator g(55);
  ModelOptions mo;
  mo.seq = 8;
  auto m = build_model("gpt2-tiny", g, mo);
  m->eval();
  Tensor x = random_tokens(1, 8, 512, g);
  const std::vector<float> a = m->forward(x).to_vector();
  x.data_i32()[7] = (x.data_i32()[7] + 1) % 512;
  const std::vector<float> b = m->forward(x).to_vector();
  const size_t per_position = 512;
  for (size_t i = 0; i < 7 * per_position; ++i) ASSERT_EQ(a[i], b[i]) << "position " << i / per_position;
  bool last_changed = false;
  for (size_t i = 7 * per_position; i < a.size(); ++i) last_changed |= a[i] != b[i];
  EXPECT_TRUE(last_changed);
}

TEST(Gpt2, NamesShapesAndParameterCountsAreGpt2s) {
  Generator g(56);
  auto m = build_model("gpt2", g);
  EXPECT_EQ(m->spec().input, (Shape{1024}));
  EXPECT_EQ(m->spec().outputs, 50304);
  // GPT-2 124M with the vocabulary padded from 50257 to 50304, as llm.c counts it.
  EXPECT_EQ(m->parameter_count(), 124475904);
  EXPECT_EQ(m->parameter_count() - (50304 - 50257) * 768, 124439808);  // GPT-2's own
  std::map<std::string, Shape> shapes;
  for (auto& [name, p] : m->named_parameters()) shapes[name] = p->data().shape();
  EXPECT_EQ(shapes.size(), 2u + 12u * 12u + 2u);
  EXPECT_EQ(shapes["transformer.wte.weight"], (Shape{50304, 768}));
  EXPECT_EQ(shapes["transformer.wpe.weight"], (Shape{1024, 768}));
  EXPECT_EQ(shapes["transformer.h.0.attn.c_attn.weight"], (Shape{2304, 768}));
  EXPECT_EQ(shapes["transformer.h.11.mlp.c_proj.weight"], (Shape{768, 3072}));
  EXPECT_EQ(shapes["transformer.ln_f.bias"], (Shape{768}));
  EXPECT_EQ(shapes.count("lm_head.weight"), 0u) << "the head's weight is the token embedding, stored once";
}

TEST(Gpt2, MediumParameterCount) {
  Generator g(57);
  auto m = build_model("gpt2-medium", g);
  EXPECT_EQ(m->parameter_count() - (50304 - 50257) * 1024, 354823168);
}

TEST(Gpt2, SeqSetsTheContextUsed) {
  Generator g(58);
  ModelOptions mo;
  mo.seq = 257;
  EXPECT_EQ(build_model("gpt2-tiny", g, ModelOptions{{0, 0, 0}, 10, 32})->spec().input, (Shape{32}));
  EXPECT_EQ(build_model("gpt2-tiny", g)->spec().input, (Shape{256}));  // its context
  EXPECT_THROW(build_model("gpt2-tiny", g, mo), Error);
}

// A clone is tied to its own token embedding, not to the original's.
TEST(Gpt2, CloneKeepsTheTie) {
  Generator g(59);
  ModelOptions mo;
  mo.seq = 4;
  auto m = build_model("gpt2-tiny", g, mo);
  auto c = m->clone();
  Tensor x = random_tokens(2, 4, 512, g);
  EXPECT_EQ(m->forward(x).to_vector(), c->forward(x).to_vector());
  for (auto& [name, p] : c->named_parameters())
    if (name == "transformer.wte.weight") p->data().fill(0.0f);
  const std::vector<float> zero = c->forward(x).to_vector();
  for (float v : zero) ASSERT_EQ(v, 0.0f) << "the clone's head must use the clone's (zeroed) embedding";
  EXPECT_NE(m->forward(x).to_vector(), zero);
}

}  // namespace
}  // namespace dpb
