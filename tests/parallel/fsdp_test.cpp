// FullyShardedDataParallel beyond "trains like one device" (tests/train/strategy_test.cpp):
// what each rank holds at rest and at most, the collectives a step issues, evaluation on
// a sharded model, full checkpoints written by sharded ranks and read back at another
// world size, and a model that differs between ranks named. Ranks are threads on
// logical CPU devices over Gloo.
#include "engine/parallel/fully_sharded.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "engine/backend/cpu/cpu_context.h"
#include "engine/backend/ops.h"
#include "engine/data/synthetic.h"
#include "engine/data/tokens.h"
#include "engine/nn/init.h"
#include "engine/nn/linear.h"
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

int64_t optimizer_bytes(const Optimizer& o) {
  int64_t b = 0;
  for (const auto& s : o.state()) b += s.value.numel() * 4;
  return b;
}

// Per rank at rest only shards; what a step gathers, frees and reduce-scatters; and the
// memory target: parameters + gradients + AdamW's two moments per rank within 1/W of one
// device's plus one gathered unit (+5 %).
TEST(Fsdp, EachRankHoldsItsShardsAndOneUnitAtATime) {
  for (const std::string name : {"gpt2-tiny", "mlp"})
    for (int world : {2, 4}) {
      test::run_ranks_ok(world, [&](int rank, comm::ProcessGroup& pg) {
        const Device dev = Device::cpu(rank);
        auto model = model_on(name, dev);
        const int64_t params = model->parameter_count();
        FullyShardedDataParallel fsdp(*model, pg);
        for (auto* p : model->parameters()) EXPECT_FALSE(p->data().defined()) << name << ": full parameter at rest";
        const FsdpMemory& mem = fsdp.memory();
        EXPECT_EQ(mem.full_parameter_bytes, params * 4);
        // Each parameter's chunk is padded by less than one of its rows.
        int64_t padding_bound = 0;
        for (const auto& s : fsdp.local_shards()) padding_bound += 4 * (s.shape.ndim() > 1 ? s.shape.row_numel() : 1);
        EXPECT_LE(mem.shard_parameter_bytes, params * 4 / world + padding_bound);
        EXPECT_GE(mem.shard_parameter_bytes * world, params * 4);

        OptimizerOptions oo;
        oo.kind = OptimizerKind::adamw;
        oo.lr = 1e-3f;
        auto opt = make_optimizer(oo, fsdp.shard_parameters());
        auto data = data_for(*model, 8);
        std::vector<int64_t> idx{2 * rank, 2 * rank + 1};
        Batch b = make_batch(*data, idx);
        LossResult l = compute_loss(model->spec().loss, fsdp.forward(b.x.to(dev)), b.target.to(dev), true);
        fsdp.backward(l.grad);
        opt->step();
        for (auto* p : model->parameters()) {
          EXPECT_FALSE(p->data().defined()) << name << ": a gathered parameter outlived the step";
          EXPECT_FALSE(p->grad().defined()) << name << ": a full gradient outlived the step";
        }
        // Forward gathers every unit (and the root, where parameters are shared); backward
        // gathers all but the last again; every unit's gradient is reduce-scattered once.
        const int units = fsdp.units();
        const bool root = name == "gpt2-tiny";  // the tied token embedding
        const int layer_units = units - (root ? 1 : 0);
        int gathers = 0, scatters = 0;
        for (const auto& c : fsdp.collectives()) {
          (c.kind == "all-gather" ? gathers : scatters) += 1;
          EXPECT_GE(c.wait_end_ns, c.wait_begin_ns);
          EXPECT_GT(c.bytes, 0);
        }
        EXPECT_EQ(gathers, 2 * layer_units - 1 + (root ? 1 : 0)) << name;
        EXPECT_EQ(scatters, units) << name;
        // At most the root, the unit running and the one prefetched (with its buffer).
        EXPECT_LE(mem.peak_gathered_bytes, 4 * mem.largest_unit_bytes) << name;
        EXPECT_GT(mem.peak_gathered_bytes, 0);
        const double single = 4.0 * static_cast<double>(params) * 4;  // parameters, gradients, two moments
        const double mine = static_cast<double>(mem.shard_parameter_bytes + mem.shard_gradient_bytes +
                                                optimizer_bytes(*opt));
        EXPECT_LE(mine, (single / world + static_cast<double>(mem.largest_unit_bytes)) * 1.05)
            << name << " at " << world << " ranks";
      });
    }
}

// Records the device allocator's live bytes each time the data passes it, in forward
// and in backward: a layer without parameters placed between a model's layers.
class AllocatorProbe : public Module {
 public:
  AllocatorProbe(Device d, std::vector<int64_t>* forward, std::vector<int64_t>* backward)
      : device_(d), forward_(forward), backward_(backward) {}
  Tensor forward(const Tensor& x) override {
    forward_->push_back(memory_stats(device_).current_bytes);
    return x;
  }
  Tensor backward(const Tensor& g) override {
    backward_->push_back(memory_stats(device_).current_bytes);
    return g;
  }
  std::string type_name() const override { return "AllocatorProbe"; }
  int64_t forward_flops(const Shape& input, Shape* output) const override {
    *output = input;
    return 0;
  }
  std::unique_ptr<Module> clone_structure() const override {
    return std::make_unique<AllocatorProbe>(device_, forward_, backward_);
  }

 private:
  Device device_;
  std::vector<int64_t>*forward_, *backward_;
};

struct ProbedStep {
  std::vector<int64_t> forward, backward;  // allocator's live bytes after each layer
  int64_t before = 0;                      // before the forward
  int64_t unit_bytes = 0;                  // one layer's gathered parameters
  double activation_bytes = 0;             // FSDP's figure
};

// Six 256x256 linear layers (a unit of 257 KiB each, against 2 KiB of activations per
// layer at batch 2), a probe after each, one training step sharded over two ranks.
std::vector<ProbedStep> probed_step(const FsdpOptions& options) {
  constexpr int64_t kWidth = 256, kLayers = 6;
  std::vector<ProbedStep> out(2);
  test::run_ranks_ok(2, [&](int rank, comm::ProcessGroup& pg) {
    const Device dev = Device::cpu(rank);
    ProbedStep& mine = out[static_cast<size_t>(rank)];
    ModelSpec spec;
    spec.name = "probed-mlp";
    spec.input = Shape{kWidth};
    spec.outputs = kWidth;
    spec.loss = LossKind::mse;
    Model model(spec);
    Generator gen(3);
    for (int64_t l = 0; l < kLayers; ++l) {
      model.add("fc" + std::to_string(l), std::make_unique<Linear>(kWidth, kWidth, true, &gen));
      model.add("probe" + std::to_string(l), std::make_unique<AllocatorProbe>(dev, &mine.forward, &mine.backward));
    }
    model.to(dev);
    FullyShardedDataParallel fsdp(model, pg, options);
    mine.unit_bytes = (kWidth * kWidth + kWidth) * 4;
    Tensor x = Tensor::full({2, kWidth}, 0.5f, dev), target = Tensor::zeros({2, kWidth}, dev);
    mine.before = memory_stats(dev).current_bytes;
    LossResult l = compute_loss(LossKind::mse, fsdp.forward(x), target, true);
    fsdp.backward(std::move(l.grad));
    mine.activation_bytes = static_cast<double>(fsdp.memory().activation_bytes);
  });
  return out;
}

// Resharding frees memory, not only FSDP's own references: each linear layer keeps its
// weight for its backward, a view into the unit's gathered storage, so before that
// storage was released every gathered unit stayed allocated until its backward. Through
// the allocator: in forward a rank holds the unit prefetched next and nothing more
// (what it held after the first layer, give or take activations), where without
// resharding every unit stays; and what forward leaves for backward (FSDP's activation
// figure) is the same either way.
TEST(Fsdp, ReshardingFreesTheGatheredWeightsLayersSaved) {
  const auto resharded = probed_step({true, 1});
  const auto kept = probed_step({false, 1});
  const auto deeper = probed_step({true, 2});
  for (int rank = 0; rank < 2; ++rank) {
    const ProbedStep& on = resharded[static_cast<size_t>(rank)];
    const ProbedStep& off = kept[static_cast<size_t>(rank)];
    const ProbedStep& two = deeper[static_cast<size_t>(rank)];
    ASSERT_EQ(on.forward.size(), 6u);
    ASSERT_EQ(off.forward.size(), 6u);
    const int64_t unit = on.unit_bytes, slack = unit / 2;
    for (size_t k = 0; k < on.forward.size(); ++k) {
      // The prefetch window (one unit ahead; the last unit stays for its backward).
      EXPECT_LE(on.forward[k] - on.before, 1 * unit + slack) << "rank " << rank << " after layer " << k;
      EXPECT_LE(two.forward[k] - two.before, 2 * unit + slack) << "rank " << rank << " after layer " << k;
      EXPECT_LE(on.forward[k] - on.forward[0], slack) << "rank " << rank << " after layer " << k;
    }
    // Without resharding the probes see every unit pile up: they measure what they should.
    EXPECT_GE(off.forward.back() - off.forward.front(), 4 * unit) << "rank " << rank;
    EXPECT_NEAR(on.activation_bytes, off.activation_bytes, 0.05 * off.activation_bytes) << "rank " << rank;
    EXPECT_GT(on.activation_bytes, 0);
    // In backward (probe k passed after k layers' backward), one unit is gathered (the
    // next one's, prefetched), one reduce-scatter is in flight (the full gradient and
    // its chunk: 1.5 units), and each layer done has left its shard's gradient (half a
    // unit), and now and then the previous reduce-scatter not yet drained: 3.5 + k/2 units
    // at most, where a unit whose weights a layer kept would show every unit still to come
    // (6 at the first probe).
    ASSERT_EQ(on.backward.size(), 6u);
    for (size_t k = 0; k < on.backward.size(); ++k)
      EXPECT_LE(on.backward[k] - on.before, (7 + static_cast<int64_t>(k)) * unit / 2)
          << "rank " << rank << " backward probe " << k;
  }
}

// Evaluation through the model's own forward gathers each unit and frees it again, and
// computes what the unsharded model computes.
TEST(Fsdp, EvaluatingAShardedModelMatchesTheFullOne) {
  auto reference = model_on("gpt2-tiny", Device::cpu(0));
  reference->eval();
  auto data = data_for(*reference, 4);
  Batch b = make_batch(*data, {0, 1, 2, 3});
  const auto want = reference->forward(b.x).to_vector();
  test::run_ranks_ok(2, [&](int rank, comm::ProcessGroup& pg) {
    const Device dev = Device::cpu(rank);
    auto model = model_on("gpt2-tiny", dev);
    FullyShardedDataParallel fsdp(*model, pg);
    model->eval();
    const auto got = model->forward(b.x.to(dev)).to_vector();
    ASSERT_EQ(got.size(), want.size());
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, static_cast<double>(std::fabs(got[i] - want[i])));
    EXPECT_LT(worst, 1e-5);
    for (auto* p : model->parameters()) EXPECT_FALSE(p->data().defined());
  });
}

// Each parameter is sharded on its own along dim 0: rank r holds rows [r c, (r + 1) c)
// of it (c = ceil(rows / W); fewer, or none, at the end), as a tensor of those rows, with
// the values single-device training starts from. GPT-2's units are its blocks; the
// embeddings, the last LayerNorm and the tied head are the root's.
TEST(Fsdp, EachParameterIsShardedOnItsOwnAlongDimZero) {
  auto reference = model_on("gpt2-tiny", Device::cpu(0));
  const auto whole = reference->named_parameters();
  for (int world : {2, 3}) {
    test::run_ranks_ok(world, [&](int rank, comm::ProcessGroup& pg) {
      auto model = model_on("gpt2-tiny", Device::cpu(rank));
      FullyShardedDataParallel fsdp(*model, pg);
      EXPECT_EQ(fsdp.units(), 3) << "two blocks and the root";
      const auto shards = fsdp.shard_parameters();
      const auto local = fsdp.local_shards();
      ASSERT_EQ(local.size(), whole.size());
      size_t held = 0, padded = 0;
      for (size_t i = 0; i < whole.size(); ++i) {
        const Shape& full = whole[i].second->data().shape();
        const int64_t rows = full[0], chunk = (rows + world - 1) / world;
        const int64_t mine = std::clamp<int64_t>(rows - rank * chunk, 0, chunk);
        EXPECT_EQ(local[i].name, whole[i].first);
        EXPECT_EQ(local[i].shape[0], mine) << whole[i].first;
        padded += rows % world != 0;
        if (mine == 0) {
          EXPECT_EQ(local[i].shard, nullptr) << whole[i].first;
          continue;
        }
        ASSERT_LT(held, shards.size());
        EXPECT_EQ(local[i].shard, shards[held]);
        EXPECT_EQ(fsdp.shard_source(held), i);
        EXPECT_EQ(fsdp.shard_first_row(held), rank * chunk);
        Shape want = full;
        want[0] = mine;
        EXPECT_EQ(shards[held]->data().shape(), want) << whole[i].first;
        EXPECT_EQ(shards[held]->data().to_vector(),
                  whole[i].second->data().slice(rank * chunk, rank * chunk + mine).to_vector())
            << whole[i].first << " on rank " << rank << " of " << world;
        ++held;
      }
      EXPECT_EQ(held, shards.size());
      if (world == 3) {
        EXPECT_GT(padded, 0u) << "3 ranks pad some chunks";
      }
      // Gathered back, every parameter is whole again, the padding dropped.
      fsdp.gather_full_parameters();
      const auto back = model->named_parameters();
      for (size_t i = 0; i < whole.size(); ++i)
        EXPECT_EQ(back[i].second->data().to_vector(), whole[i].second->data().to_vector()) << whole[i].first;
    });
  }
}

// Built under init::DeferredInit (meta-device initialisation) the model holds no memory
// for the parameters it draws (all but the small ones built by value: LayerNorms, GPT-2's
// zero biases); FSDP draws each rank's rows, bit for bit those of the model built whole,
// and a rank's allocator never holds more than its shards beside what it had.
TEST(Fsdp, DeferredInitialisationDrawsOnlyEachRanksRows) {
  auto reference = model_on("gpt2-tiny", Device::cpu(0));
  const auto whole = reference->named_parameters();
  int64_t whole_bytes = 0;
  for (const auto& [name, p] : whole) whole_bytes += p->data().numel() * 4;
  for (int world : {2, 3}) {
    test::run_ranks_ok(world, [&](int rank, comm::ProcessGroup& pg) {
      const Device dev = Device::cpu(rank);
      Generator g(7);
      std::unique_ptr<Model> model;
      {
        init::DeferredInit deferred;
        model = build_model("gpt2-tiny", g);
      }
      model->to(dev);
      int64_t deferred_bytes = 0;
      for (const auto& [name, p] : model->named_parameters())
        if (p->data().deferred_values()) {
          deferred_bytes += p->data().numel() * 4;
          EXPECT_TRUE(p->data().storage_released()) << name << " holds memory";
        }
      EXPECT_GT(deferred_bytes, whole_bytes * 9 / 10);
      pg.barrier()->wait();  // every rank's model built (their transients gone) before the peak is read
      reset_peak_memory(dev);
      const int64_t before = memory_stats(dev).current_bytes;
      FullyShardedDataParallel fsdp(*model, pg);
      const int64_t added = memory_stats(dev).peak_bytes - before;
      EXPECT_LE(added, fsdp.memory().shard_parameter_bytes + (int64_t{64} << 10)) << "rank " << rank << " of " << world;
      EXPECT_LT(added, whole_bytes * 11 / 10 / world) << "rank " << rank << " of " << world;
      const auto shards = fsdp.shard_parameters();
      for (size_t k = 0; k < shards.size(); ++k) {
        const size_t i = fsdp.shard_source(k);
        const int64_t first = fsdp.shard_first_row(k), rows = shards[k]->data().shape()[0];
        EXPECT_EQ(shards[k]->data().to_vector(), whole[i].second->data().slice(first, first + rows).to_vector())
            << whole[i].first << " on rank " << rank << " of " << world;
      }
    });
  }
}

struct Run {
  std::string mode = "single";
  int world = 1;
  int64_t steps = 2;
  std::string save, resume;
  OptimizerKind optimizer = OptimizerKind::sgd;
  bool sharded = false;  // save a sharded checkpoint
  int accum = 1;         // batches per optimizer step
};

// `steps` optimizer steps (SGD with momentum, or AdamW) of gpt2-tiny on 8-sequence global
// batches, sharded over r.world ranks or on one device.
void train(const Run& r) {
  auto body = [&](int rank, comm::ProcessGroup* pg) {
    const Device dev = Device::cpu(rank);
    auto model = model_on("gpt2-tiny", dev);
    auto data = data_for(*model, 64);
    TrainOptions o;
    o.batch = 8 / r.world / r.accum;
    o.accum_steps = r.accum;
    o.steps = r.steps;
    o.warmup = 0;
    o.seed = 11;
    o.optim.kind = r.optimizer;
    o.optim.lr = r.optimizer == OptimizerKind::sgd ? 0.05f : 2e-3f;
    o.device = dev;
    o.save_path = r.save;
    o.save_sharded = r.sharded;
    o.resume_path = r.resume;
    if (pg) {
      o.mode = ParallelMode::fsdp;
      o.ddp.group = pg;
    }
    Trainer(*model, *data, o).run();
  };
  if (r.world == 1) {
    cpu::CpuDeviceScope scope(0);
    body(0, nullptr);
  } else {
    test::run_ranks_ok(r.world, [&](int rank, comm::ProcessGroup& pg) { body(rank, &pg); });
  }
}

// Sharded ranks write one full checkpoint (the usual names, full shapes, the momentum
// gathered) equal to one device's; it resumes at another world size and one device's
// checkpoint resumes sharded, continuing as one device continues. (SGD: AdamW's first
// steps move a parameter whose gradient is near zero by a whole learning rate either way,
// so two summation orders may part by that much; its state is checked below.)
TEST(Fsdp, FullCheckpointsLoadIntoAnyWorldSize) {
  cpu::set_threads_per_device(1);
  const auto dir = std::filesystem::temp_directory_path() / ("dpb_fsdp_ckpt_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto path = [&](const char* f) { return (dir / f).string(); };
  train({"single", 1, 2, path("single2.safetensors"), ""});
  train({"fsdp", 2, 2, path("fsdp2.safetensors"), ""});
  EXPECT_LT(checkpoint_difference(path("single2.safetensors"), path("fsdp2.safetensors")), 1e-4);
  // Two more steps: one device from its own, 4 ranks from the 2-rank checkpoint, 2 ranks
  // from the single-device one.
  train({"single", 1, 2, path("single4.safetensors"), path("single2.safetensors")});
  train({"fsdp", 4, 2, path("fsdp4.safetensors"), path("fsdp2.safetensors")});
  train({"fsdp", 2, 2, path("mixed4.safetensors"), path("single2.safetensors")});
  EXPECT_LT(checkpoint_difference(path("single4.safetensors"), path("fsdp4.safetensors")), 1e-4);
  EXPECT_LT(checkpoint_difference(path("single4.safetensors"), path("mixed4.safetensors")), 1e-4);
  // ... and they moved: the comparison is not between untouched copies.
  EXPECT_GT(checkpoint_difference(path("single2.safetensors"), path("single4.safetensors")), 1e-4);
  const auto sgd = safetensors::load(path("fsdp2.safetensors"));
  std::map<std::string, Tensor> state(sgd.tensors.begin(), sgd.tensors.end());
  EXPECT_EQ(state.at("optimizer.transformer.h.0.attn.c_attn.weight.momentum_buffer").shape(), (Shape{192, 64}));

  // AdamW: both moments gathered to the parameters' shapes and the step count kept; the
  // checkpoint resumes at another world size and counts on.
  train({"fsdp", 2, 2, path("adamw2.safetensors"), "", OptimizerKind::adamw});
  train({"fsdp", 4, 1, path("adamw3.safetensors"), path("adamw2.safetensors"), OptimizerKind::adamw});
  for (const auto& [file, steps] : {std::pair{"adamw2.safetensors", 2.0f}, {"adamw3.safetensors", 3.0f}}) {
    const auto f = safetensors::load(path(file));
    std::map<std::string, Tensor> t(f.tensors.begin(), f.tensors.end());
    const std::string p = "optimizer.transformer.h.1.mlp.c_fc.weight.";
    EXPECT_EQ(t.at(p + "exp_avg").shape(), (Shape{256, 64})) << file;
    EXPECT_EQ(t.at(p + "exp_avg_sq").shape(), (Shape{256, 64})) << file;
    EXPECT_EQ(t.at(p + "step").item(), steps) << file;
    EXPECT_GT(std::sqrt(ops::sum_squares(t.at(p + "exp_avg_sq"))), 0.0) << file;
  }
  std::filesystem::remove_all(dir);
}

// Each rank writes its own rows (no rank gathers the model): the files concatenated along
// dim 0 in rank order are the full checkpoint, and the directory resumes at the same world
// size as one device continues (AdamW: moments and step counts per shard). Another world
// size is refused, naming the one that wrote it, as is resuming it in another mode.
TEST(Fsdp, ShardedCheckpointsHoldEachRanksRowsAndResume) {
  cpu::set_threads_per_device(1);
  const auto dir = std::filesystem::temp_directory_path() / ("dpb_fsdp_sharded_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto path = [&](const char* f) { return (dir / f).string(); };
  train({"fsdp", 2, 2, path("sharded2"), "", OptimizerKind::adamw, true});
  train({"fsdp", 2, 2, path("full2.safetensors"), "", OptimizerKind::adamw});
  const auto full = safetensors::load(path("full2.safetensors"));
  std::vector<safetensors::File> parts;
  for (int r = 0; r < 2; ++r) {
    const std::string f = sharded_checkpoint_file(path("sharded2"), r, 2);
    ASSERT_TRUE(std::filesystem::exists(f)) << f;
    parts.push_back(safetensors::load(f));
    EXPECT_EQ(parts.back().metadata.at("world_size"), "2");
    EXPECT_EQ(parts.back().metadata.at("rank"), std::to_string(r));
    EXPECT_EQ(parts.back().metadata.at("global_step"), "2");
  }
  size_t compared = 0;
  for (const auto& [name, t] : full.tensors) {
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".step") == 0) continue;  // one count per shard
    std::vector<float> joined;
    for (const auto& part : parts) {
      const std::map<std::string, Tensor> m(part.tensors.begin(), part.tensors.end());
      ASSERT_TRUE(m.count(name)) << name << " missing from a rank's file";
      const auto v = m.at(name).to_vector();
      joined.insert(joined.end(), v.begin(), v.end());
    }
    EXPECT_EQ(joined, t.to_vector()) << name;
    ++compared;
  }
  EXPECT_GT(compared, 40u);
  // Two more steps from it, against four without a stop (and they moved).
  train({"fsdp", 2, 4, path("straight4.safetensors"), "", OptimizerKind::adamw});
  train({"fsdp", 2, 2, path("resumed4.safetensors"), path("sharded2"), OptimizerKind::adamw});
  EXPECT_LT(checkpoint_difference(path("straight4.safetensors"), path("resumed4.safetensors")), 1e-5);
  EXPECT_GT(checkpoint_difference(path("full2.safetensors"), path("resumed4.safetensors")), 1e-4);
  const auto resumed = safetensors::load(path("resumed4.safetensors"));
  const std::map<std::string, Tensor> t(resumed.tensors.begin(), resumed.tensors.end());
  EXPECT_EQ(t.at("optimizer.transformer.h.1.mlp.c_fc.weight.step").item(), 4.0f);

  const auto at_four = test::run_ranks(4, [&](int rank, comm::ProcessGroup& pg) {
    auto model = model_on("gpt2-tiny", Device::cpu(rank));
    auto data = data_for(*model, 64);
    TrainOptions o;
    o.batch = 2;
    o.optim.kind = OptimizerKind::adamw;
    o.device = Device::cpu(rank);
    o.mode = ParallelMode::fsdp;
    o.ddp.group = &pg;
    o.resume_path = path("sharded2");
    Trainer(*model, *data, o);
  });
  ASSERT_EQ(at_four.size(), 4u);
  for (const auto& e : at_four) EXPECT_NE(e.find("it was written by 2 rank(s)"), std::string::npos) << e;
  auto single = model_on("gpt2-tiny", Device::cpu(0));
  auto data = data_for(*single, 64);
  TrainOptions o;
  o.resume_path = path("sharded2");
  try {
    Trainer(*single, *data, o);
    ADD_FAILURE() << "a sharded checkpoint resumed one device";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a sharded one"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

// Two batches a step: the second adds to the shards' gradients the first left (they are
// dropped only once the optimizer has used them), as one device's whole batch.
TEST(Fsdp, AccumulatedBatchesTrainAsOneDevicesWholeBatch) {
  cpu::set_threads_per_device(1);
  const auto dir = std::filesystem::temp_directory_path() / ("dpb_fsdp_accum_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto path = [&](const char* f) { return (dir / f).string(); };
  train({"single", 1, 3, path("single.safetensors"), ""});
  train({"fsdp", 2, 3, path("fsdp.safetensors"), "", OptimizerKind::sgd, false, 2});
  EXPECT_LT(checkpoint_difference(path("single.safetensors"), path("fsdp.safetensors")), 1e-4);
  std::filesystem::remove_all(dir);
}

// Under a bf16 policy every all-gather sends half the bytes of an f32 one, and the
// model computes with its parameters rounded to bf16 (exactly what one device computes
// with the rounded parameters); the shards, and a full state dict gathered from them,
// keep every f32 bit.
TEST(Fsdp, Bf16PolicyGathersHalfTheBytesAndKeepsTheShardsF32) {
  auto reference = model_on("gpt2-tiny", Device::cpu(0));
  const auto whole = reference->named_parameters();
  std::vector<std::vector<float>> exact;
  for (const auto& [name, p] : whole) exact.push_back(p->data().to_vector());
  auto data = data_for(*reference, 4);
  Batch b = make_batch(*data, {0, 1, 2, 3});
  for (const auto& [name, p] : whole) p->data() = p->data().to_dtype(DType::bf16).to_dtype(DType::f32);
  reference->eval();
  const auto want = reference->forward(b.x).to_vector();
  std::vector<int64_t> f32_bytes;
  for (DType dtype : {DType::f32, DType::bf16})
    test::run_ranks_ok(2, [&](int rank, comm::ProcessGroup& pg) {
      const Device dev = Device::cpu(rank);
      auto model = model_on("gpt2-tiny", dev);
      FsdpOptions o;
      o.param_dtype = dtype;
      FullyShardedDataParallel fsdp(*model, pg, o);
      LossResult l = compute_loss(model->spec().loss, fsdp.forward(b.x.to(dev)), b.target.to(dev), true);
      fsdp.backward(l.grad);
      std::vector<int64_t> bytes;
      for (const auto& c : fsdp.collectives())
        if (c.kind == "all-gather") bytes.push_back(c.bytes);
      ASSERT_FALSE(bytes.empty());
      if (dtype == DType::f32) {
        if (rank == 0) f32_bytes = bytes;
        return;
      }
      ASSERT_EQ(bytes.size(), f32_bytes.size());
      for (size_t k = 0; k < bytes.size(); ++k) EXPECT_EQ(2 * bytes[k], f32_bytes[k]) << "all-gather " << k;
      model->eval();
      const auto got = model->forward(b.x.to(dev)).to_vector();
      ASSERT_EQ(got.size(), want.size());
      double worst = 0;
      for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, static_cast<double>(std::fabs(got[i] - want[i])));
      EXPECT_LT(worst, 1e-5) << "the forward computed with other than the bf16-rounded parameters";
      fsdp.gather_full_parameters();
      const auto named = model->named_parameters();
      size_t unrounded = 0;
      for (size_t i = 0; i < named.size(); ++i) {
        const auto v = named[i].second->data().to_vector();
        ASSERT_EQ(v.size(), exact[i].size());
        for (size_t k = 0; k < v.size(); ++k) {
          ASSERT_EQ(v[k], exact[i][k]) << named[i].first << "[" << k << "]: the full state dict is not f32";
          unrounded += v[k] != bf16_to_float(float_to_bf16(v[k]));
        }
      }
      EXPECT_GT(unrounded, 1000u) << "the check needs values bf16 cannot hold";
    });
}

TEST(Fsdp, DifferentModelsOnTwoRanksNameTheParameter) {
  const auto errors = test::run_ranks(2, [](int rank, comm::ProcessGroup& pg) {
    auto model = model_on(rank == 0 ? "mlp" : "lenet", Device::cpu(rank));
    FullyShardedDataParallel fsdp(*model, pg);
  });
  for (const auto& e : errors) {
    EXPECT_NE(e.find("FSDP: "), std::string::npos) << e;
    EXPECT_NE(e.find("every rank must build the same model"), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace dpb
