// dpbench's GPT-2 against PyTorch's: tests/data/gpt2/gpt2_tiny_pytorch.safetensors was
// written by benchmarks/pytorch_reference/gpt2_reference.py (PyTorch 2.15, a nanoGPT-style
// model with these parameter names, one batch of byte-level tokens of a real text). From
// the same weights and batch, the loss must agree within 1e-5 and every gradient within
// 1e-4 (relative, in norm); five AdamW steps later, so must the parameters.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include "engine/data/tokens.h"
#include "engine/models/model.h"
#include "engine/optim/optimizer.h"
#include "tests/models/pytorch_fixture.h"

namespace dpb {
namespace {

using test::norm_of_difference;

float loss_and_gradients(Model& m, const Tensor& tokens, const Tensor& targets) {
  LossResult l = compute_loss(LossKind::cross_entropy, m.forward(tokens), targets, true);
  m.backward(l.grad);
  return l.loss;
}

TEST(Gpt2MatchesPyTorch, LossGradientsAndFiveAdamWSteps) {
  auto f = test::load_gpt2_fixture("gpt2_tiny_pytorch.safetensors");
  const Tensor tokens = f.at("tokens"), targets = f.at("targets");
  ASSERT_EQ(tokens.dtype(), DType::i32);
  Generator g(0);
  ModelOptions mo;
  mo.seq = tokens.size(1);
  auto model = build_model("gpt2-tiny", g, mo);
  int loaded = 0;
  for (auto& [name, p] : model->named_parameters()) {
    ASSERT_TRUE(f.count("init." + name)) << "the PyTorch model has no parameter " << name;
    ASSERT_EQ(f.at("init." + name).shape(), p->data().shape()) << name;
    p->data().copy_from(f.at("init." + name));
    ++loaded;
  }
  EXPECT_EQ(loaded, 28);

  // The batch is the text's first windows, as --data=text:PATH cuts them.
  const std::string text = "/usr/share/common-licenses/GPL-3";
  if (std::filesystem::exists(text)) {
    TextTokens ds(text, true, tokens.size(1), 512);
    std::vector<int64_t> idx(static_cast<size_t>(tokens.size(0)));
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int64_t>(i);
    Batch b = make_batch(ds, idx);
    EXPECT_EQ(b.x.to_labels(), tokens.to_labels());
    EXPECT_EQ(b.target.to_labels(), targets.to_labels());
  }

  model->zero_grad();
  const float loss = loss_and_gradients(*model, tokens, targets);
  const float want = f.at("loss").item();
  EXPECT_NEAR(loss, want, 1e-5 * want);
  double worst_grad = 0, worst_after = 0;
  for (auto& [name, p] : model->named_parameters()) {
    double norm = 0;
    const double diff = norm_of_difference(p->grad(), f.at("grad." + name), &norm);
    worst_grad = std::max(worst_grad, diff / norm);
    EXPECT_LT(diff, 1e-4 * norm) << "gradient of " << name << ": |ours - PyTorch's| " << diff << ", |PyTorch's| "
                                 << norm;
  }

  OptimizerOptions oo;
  oo.kind = OptimizerKind::adamw;
  oo.lr = 1e-3f;
  oo.weight_decay = 0.1f;
  auto opt = make_optimizer(oo, model->parameters());
  opt->set_decay_mask(model->weight_decay_mask());
  for (int step = 0; step < 5; ++step) {
    opt->zero_grad();
    loss_and_gradients(*model, tokens, targets);
    opt->step();
  }
  for (auto& [name, p] : model->named_parameters()) {
    double norm = 0, unused = 0;
    const double diff = norm_of_difference(p->data(), f.at("after." + name), &norm);
    const double movement = norm_of_difference(f.at("after." + name), f.at("init." + name), &unused);
    worst_after = std::max(worst_after, diff / movement);
    EXPECT_LT(diff, 1e-5 * norm + 1e-3 * movement)
        << name << " after 5 AdamW steps: |ours - PyTorch's| " << diff << ", |PyTorch's| " << norm
        << ", how far PyTorch moved it " << movement;
  }
  std::printf("loss %.7f against PyTorch's %.7f; worst gradient %.2e, worst step %.2e (relative)\n", loss, want,
              worst_grad, worst_after);
}

// The decay groups are nanoGPT's matrices without the embedding tables.
TEST(Gpt2MatchesPyTorch, WeightDecayOnLinearWeightsOnly) {
  Generator g(0);
  auto model = build_model("gpt2-tiny", g);
  const auto mask = model->weight_decay_mask();
  auto named = model->named_parameters();
  ASSERT_EQ(mask.size(), named.size());
  int decayed = 0;
  for (size_t i = 0; i < named.size(); ++i) {
    const std::string& n = named[i].first;
    const bool linear_weight = n.find(".c_") != std::string::npos && n.size() > 7 && n.substr(n.size() - 7) == ".weight";
    EXPECT_EQ(mask[i], linear_weight) << n;
    decayed += mask[i] ? 1 : 0;
  }
  EXPECT_EQ(decayed, 2 * 4);  // c_attn, attn.c_proj, c_fc, mlp.c_proj per block
  Generator g2(0);
  for (bool m : build_model("mlp", g2)->weight_decay_mask()) EXPECT_TRUE(m);
}

}  // namespace
}  // namespace dpb
