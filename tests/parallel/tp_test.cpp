// TensorParallel beyond "trains like one device" (tests/train/strategy_test.cpp): the
// vocabulary-parallel cross-entropy against the whole one, what each rank holds, the
// collectives a step issues, evaluation on a cut model, full checkpoints written by cut
// ranks and read back at another world size, and models that cannot be cut named with
// the reason. Ranks are threads on logical CPU devices over Gloo.
#include "engine/parallel/tensor_parallel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "engine/backend/cpu/cpu_context.h"
#include "engine/backend/ops.h"
#include "engine/data/synthetic.h"
#include "engine/data/tokens.h"
#include "engine/tensor/allocator.h"
#include "engine/train/safetensors.h"
#include "engine/train/trainer.h"
#include "tests/support/checkpoints.h"
#include "tests/support/models.h"
#include "tests/support/ranks.h"

namespace dpb {
namespace {

using test::checkpoint_difference;

using test::data_for;
using test::model_on;

// Logits cut into W column blocks: the two halves around the stats' all-gather give the
// whole cross-entropy's loss, correct count and gradient, labels in every part.
TEST(TensorParallel, VocabularyParallelCrossEntropyEqualsTheWholeOne) {
  const int64_t N = 37, V = 96;
  Generator g(3);
  std::vector<float> z(static_cast<size_t>(N * V));
  for (auto& v : z) v = static_cast<float>(3.0 * g.normal());
  std::vector<int32_t> y(static_cast<size_t>(N));
  for (auto& l : y) l = static_cast<int32_t>(g.below(V));
  y[0] = 0;
  y[1] = V - 1;
  // Some rows right (their label the first maximum), in every part.
  for (int64_t i = 2; i < N; i += 3) {
    int64_t arg = 0;
    for (int64_t j = 1; j < V; ++j)
      if (z[static_cast<size_t>(i * V + j)] > z[static_cast<size_t>(i * V + arg)]) arg = j;
    y[static_cast<size_t>(i)] = static_cast<int32_t>(arg);
  }
  const Tensor logits = Tensor::from_vector({N, V}, z), labels = Tensor::from_labels(y);
  Tensor want_grad = Tensor::empty({N, V});
  int64_t want_correct = 0;
  const float want = ops::softmax_cross_entropy(logits, labels, want_grad, &want_correct);
  ASSERT_GT(want_correct, 0);
  for (int64_t W : {1, 2, 3, 4}) {
    const int64_t part = V / W;
    std::vector<Tensor> parts;
    Tensor all = Tensor::empty({W, N, 4});
    for (int64_t r = 0; r < W; ++r) {
      Tensor p = Tensor::empty({N, part});
      for (int64_t i = 0; i < N; ++i)
        for (int64_t j = 0; j < part; ++j) p.data()[i * part + j] = z[static_cast<size_t>(i * V + r * part + j)];
      Tensor stats = Tensor::empty({N, 4});
      ops::cross_entropy_part_stats(p, labels, r * part, stats);
      all.slice(r, r + 1).view({N, 4}).copy_from(stats);
      parts.push_back(p);
    }
    for (int64_t r = 0; r < W; ++r) {
      Tensor grad = Tensor::empty({N, part});
      const Tensor totals = ops::cross_entropy_part_finish(parts[static_cast<size_t>(r)], labels, r * part, V, all, grad);
      int64_t correct = 0;
      const float loss = ops::read_cross_entropy(totals, N, V, &correct);
      EXPECT_NEAR(loss, want, 1e-5 * std::abs(want)) << W << " parts";
      EXPECT_EQ(correct, want_correct) << W << " parts";
      for (int64_t i = 0; i < N; ++i)
        for (int64_t j = 0; j < part; ++j)
          ASSERT_NEAR(grad.data()[i * part + j], want_grad.data()[i * V + r * part + j], 1e-6)
              << W << " parts, row " << i << ", class " << r * part + j;
    }
  }
  // A label outside the vocabulary is counted, and reading the totals names it.
  std::vector<int32_t> bad = y;
  bad[5] = static_cast<int32_t>(V);
  Tensor stats = Tensor::empty({N, 4});
  ops::cross_entropy_part_stats(logits, Tensor::from_labels(bad), 0, stats);
  Tensor none;
  const Tensor totals = ops::cross_entropy_part_finish(logits, Tensor::from_labels(bad), 0, V, stats.view({1, N, 4}), none);
  EXPECT_THROW(ops::read_cross_entropy(totals, N, V, nullptr), Error);
}

// A cut GPT-2 holds 1/W of every cut matrix (c_attn keeps its heads' rows of q, k and v),
// replicates the norms, position table and row-parallel biases; a step issues one
// all-reduce for the embedding, two per block forward and backward, one for the head's
// input gradient, and one all-gather of the loss's stats.
TEST(TensorParallel, EachRankHoldsItsPartsAndAStepIssuesMegatronsCollectives) {
  for (int world : {2, 4}) {
    test::run_ranks_ok(world, [&](int rank, comm::ProcessGroup& pg) {
      const Device dev = Device::cpu(rank);
      auto model = model_on("gpt2-tiny", dev);
      Generator g(7);
      auto whole = build_model("gpt2-tiny", g);
      std::map<std::string, Tensor> full;
      for (auto& [name, p] : whole->named_parameters()) full[name] = p->data();
      const int64_t full_bytes = whole->parameter_count() * 4;
      TensorParallel tp(*model, pg);
      const auto& spec = model->spec();
      const int64_t C = spec.width, L = spec.layers, V = spec.outputs;
      std::map<std::string, Parameter*> mine;
      for (auto& [name, p] : model->named_parameters()) mine[name] = p;
      EXPECT_EQ(mine.size(), full.size());
      EXPECT_EQ(mine.at("transformer.wte.weight")->data().shape(), (Shape{V / world, C}));
      EXPECT_EQ(mine.at("transformer.h.0.attn.c_attn.weight")->data().shape(), (Shape{3 * C / world, C}));
      EXPECT_EQ(mine.at("transformer.h.0.attn.c_proj.weight")->data().shape(), (Shape{C, C / world}));
      EXPECT_EQ(mine.at("transformer.h.1.mlp.c_fc.weight")->data().shape(), (Shape{4 * C / world, C}));
      EXPECT_EQ(mine.at("transformer.h.1.mlp.c_proj.bias")->data().shape(), (Shape{C}));
      EXPECT_EQ(mine.at("transformer.wpe.weight")->data().shape(), full.at("transformer.wpe.weight").shape());
      // The key rows of this rank's heads: rows C + rank x C/W.. of the whole c_attn.
      const auto part = mine.at("transformer.h.0.attn.c_attn.weight")->data().to_vector();
      const auto all = full.at("transformer.h.0.attn.c_attn.weight").to_vector();
      const int64_t rows = C / world;
      for (int64_t c = 0; c < C; ++c)
        ASSERT_EQ(part[static_cast<size_t>((rows + 1) * C + c)], all[static_cast<size_t>((C + rank * rows + 1) * C + c)]);
      const TpMemory& mem = tp.memory();
      EXPECT_EQ(mem.full_parameter_bytes, full_bytes);
      EXPECT_EQ(mem.rank_parameter_bytes, (full_bytes - mem.replicated_bytes) / world + mem.replicated_bytes);
      // Replicated: the position table, the norms and the row-parallel layers' biases.
      EXPECT_EQ(mem.replicated_bytes, 4 * (spec.context * C + L * 6 * C + 2 * C));

      auto data = data_for(*model, 8);
      Batch b = make_batch(*data, {0, 1, 2, 3});
      LossResult l = tp.loss(model->forward(b.x.to(dev)), b.target.to(dev), true, false);
      model->backward(l.grad);
      tp.take_step();
      int all_reduces = 0, all_gathers = 0;
      for (const auto& c : tp.collectives()) {
        EXPECT_GE(c.wait_end_ns, c.wait_begin_ns);
        EXPECT_GT(c.bytes, 0);
        (c.kind == "all-reduce" ? all_reduces : all_gathers) += 1;
      }
      EXPECT_EQ(all_reduces, 1 + 2 * L + 2 * L + 1);
      EXPECT_EQ(all_gathers, 1);
    });
  }
}

// `steps` optimizer steps of gpt2-tiny on 4-sequence batches, cut over `world` ranks or
// on one device, evaluated on a held-out set.
struct Run {
  int world;
  int64_t steps;
  std::string save, resume;
  OptimizerKind optimizer = OptimizerKind::adamw;
};

std::vector<double> train(const Run& r) {
  std::vector<double> test_loss(static_cast<size_t>(r.world));
  auto body = [&](int rank, comm::ProcessGroup* pg) {
    const Device dev = Device::cpu(rank);
    auto model = model_on("gpt2-tiny", dev);
    auto data = data_for(*model, 32);
    SyntheticTokens test(model->spec().input[0], model->spec().outputs, 12, 9);
    TrainOptions o;
    o.batch = 4;
    o.steps = r.steps;
    o.warmup = 0;
    o.seed = 11;
    o.optim.kind = r.optimizer;
    o.optim.lr = r.optimizer == OptimizerKind::sgd ? 0.05f : 2e-3f;
    o.device = dev;
    o.eval_batch = 5;
    o.save_path = r.save;
    o.resume_path = r.resume;
    if (pg) {
      o.mode = ParallelMode::tp;
      o.ddp.group = pg;
    }
    test_loss[static_cast<size_t>(rank)] = Trainer(*model, *data, o, &test).run().test->loss;
  };
  if (r.world == 1) {
    cpu::CpuDeviceScope scope(0);
    body(0, nullptr);
  } else {
    test::run_ranks_ok(r.world, [&](int rank, comm::ProcessGroup& pg) { body(rank, &pg); });
  }
  return test_loss;
}

// Cut ranks evaluate as one device does (the vocabulary-parallel loss on their parts of
// the logits), write one full checkpoint (the usual names and shapes, both AdamW moments
// gathered) equal to one device's, and resume from it, or from one device's, at another
// world size, continuing as one device continues. (SGD: AdamW's first steps move a
// parameter whose gradient is near zero by a whole learning rate either way, so two
// summation orders may part by that much.)
TEST(TensorParallel, EvaluatesAndCheckpointsAsOneDevice) {
  cpu::set_threads_per_device(1);
  const auto dir = std::filesystem::temp_directory_path() / ("dpb_tp_ckpt_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto path = [&](const char* f) { return (dir / f).string(); };
  const double single = train({1, 2, path("single2.safetensors"), "", OptimizerKind::sgd})[0];
  for (double loss : train({2, 2, path("tp2.safetensors"), "", OptimizerKind::sgd}))
    EXPECT_NEAR(loss, single, 1e-5 * single);
  EXPECT_LT(checkpoint_difference(path("single2.safetensors"), path("tp2.safetensors")), 1e-4);
  train({1, 2, path("single4.safetensors"), path("single2.safetensors"), OptimizerKind::sgd});
  train({4, 2, path("tp4.safetensors"), path("tp2.safetensors"), OptimizerKind::sgd});
  train({2, 2, path("mixed4.safetensors"), path("single2.safetensors"), OptimizerKind::sgd});
  EXPECT_LT(checkpoint_difference(path("single4.safetensors"), path("tp4.safetensors")), 1e-4);
  EXPECT_LT(checkpoint_difference(path("single4.safetensors"), path("mixed4.safetensors")), 1e-4);
  EXPECT_GT(checkpoint_difference(path("single2.safetensors"), path("single4.safetensors")), 1e-4);

  train({2, 2, path("adamw2.safetensors"), ""});
  train({4, 1, path("adamw3.safetensors"), path("adamw2.safetensors")});
  for (const auto& [file, steps] : {std::pair{"adamw2.safetensors", 2.0f}, {"adamw3.safetensors", 3.0f}}) {
    const auto f = safetensors::load(path(file));
    std::map<std::string, Tensor> t(f.tensors.begin(), f.tensors.end());
    for (const std::string p : {"optimizer.transformer.h.1.attn.c_attn.weight.", "optimizer.transformer.wte.weight."}) {
      const Shape want = p.find("wte") != std::string::npos ? Shape{512, 64} : Shape{192, 64};
      EXPECT_EQ(t.at(p + "exp_avg").shape(), want) << file << " " << p;
      EXPECT_EQ(t.at(p + "exp_avg_sq").shape(), want) << file << " " << p;
      EXPECT_EQ(t.at(p + "step").item(), steps) << file;
      // Every rank's part of the second moment is there (no block of zeros).
      const auto v = t.at(p + "exp_avg_sq").to_vector();
      const size_t half = v.size() / 2;
      double lo = 0, hi = 0;
      for (size_t i = 0; i < v.size(); ++i) (i < half ? lo : hi) += v[i];
      EXPECT_GT(lo, 0.0) << file << " " << p;
      EXPECT_GT(hi, 0.0) << file << " " << p;
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(TensorParallel, ModelsThatCannotBeCutAreNamedWithTheReason) {
  Generator g(1);
  auto gpt = build_model("gpt2-tiny", g);
  EXPECT_EQ(TensorParallel::cannot_split(*gpt, 2), "");
  EXPECT_EQ(TensorParallel::cannot_split(*gpt, 4), "");
  const std::string three = TensorParallel::cannot_split(*gpt, 3);
  EXPECT_NE(three.find("4 heads"), std::string::npos) << three;
  auto mlp = build_model("mlp", g);
  EXPECT_EQ(TensorParallel::cannot_split(*mlp, 8), "");
  const std::string mlp3 = TensorParallel::cannot_split(*mlp, 3);
  EXPECT_NE(mlp3.find("fc1"), std::string::npos) << mlp3;
  EXPECT_NE(mlp3.find("512 outputs"), std::string::npos) << mlp3;
  auto lenet = build_model("lenet", g);
  const std::string conv = TensorParallel::cannot_split(*lenet, 2);
  EXPECT_NE(conv.find("declares no tensor-parallel plan"), std::string::npos) << conv;
  EXPECT_NE(conv.find("ModelSpec::tp_plan"), std::string::npos) << conv;  // where one is declared
  auto simple = build_model("simple", g);
  EXPECT_NE(TensorParallel::cannot_split(*simple, 2).find("declares no tensor-parallel plan"), std::string::npos);
  // A plan that names what the model lacks, or cuts what cannot be cut, says which rule.
  simple->set_tp_plan({{"fc2", TpStyle::colwise}});
  EXPECT_NE(TensorParallel::cannot_split(*simple, 2).find("its plan names 'fc2', which is no module of it"),
            std::string::npos);
  simple->set_tp_plan({{"fc", TpStyle::heads}});
  EXPECT_NE(TensorParallel::cannot_split(*simple, 2).find("is a Linear, which has no attention heads"),
            std::string::npos);
  simple->set_tp_plan({{"fc", TpStyle::colwise}});  // one output
  EXPECT_NE(TensorParallel::cannot_split(*simple, 2).find("layer 'fc' has 1 outputs"), std::string::npos);
  // A transformer judged from its description alone, as the launcher does: the same
  // answer, and no parameter allocated (GPT-2 124M's would be 498 MB).
  reset_peak_memory(Device::cpu());
  const int64_t before = memory_stats(Device::cpu()).current_bytes;
  const auto described = describe_transformer("gpt2");
  ASSERT_TRUE(described.has_value());
  EXPECT_EQ(memory_stats(Device::cpu()).peak_bytes, before);
  EXPECT_EQ(described->heads, 12);
  EXPECT_EQ(described->outputs, 50304);
  EXPECT_EQ(TensorParallel::cannot_split(*described, 4), "");
  EXPECT_NE(TensorParallel::cannot_split(*described, 5).find("12 heads do not divide evenly"), std::string::npos);
  EXPECT_EQ(TensorParallel::cannot_split(*describe_transformer("gpt2-tiny"), 3), three);
  EXPECT_FALSE(describe_transformer("mlp").has_value());
  // Constructing one anyway is the same error, on every rank.
  const auto errors = test::run_ranks(3, [](int rank, comm::ProcessGroup& pg) {
    auto model = model_on("gpt2-tiny", Device::cpu(rank));
    TensorParallel tp(*model, pg);
  });
  for (const auto& e : errors) EXPECT_NE(e.find("heads do not divide evenly"), std::string::npos) << e;
}

TEST(TensorParallel, DifferentModelsOnTwoRanksNameTheParameter) {
  const auto errors = test::run_ranks(2, [](int rank, comm::ProcessGroup& pg) {
    auto model = model_on(rank == 0 ? "mlp" : "widemlp", Device::cpu(rank));
    TensorParallel tp(*model, pg);
  });
  for (const auto& e : errors) EXPECT_NE(e.find("every rank must build the same model"), std::string::npos) << e;
}

}  // namespace
}  // namespace dpb
