// The trainer's one step body over each ParallelStrategy, on logical CPU devices, against
// single-device training (docs/ARCHITECTURE.md §3): dp over 2 and 3 devices, the pipeline's schedules
// over 2 stages, and DDP with 2 ranks and FSDP with 2 and 3 ranks (reshard after forward
// or not, prefetch or not) on the ranks' global batch give the parameters one device gives;
// tensor parallelism over 2 and 4 ranks (each the whole batch) and DDP over 2 tensor-parallel
// pairs (2D) too, where the model can be
// cut, its parameters gathered back whole at the end. Also: the strategy is the one asked for, the harness hook runs
// inside every batch's forward, and options that do not fit the mode are clear errors.
#include "engine/train/trainer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "engine/backend/cpu/cpu_context.h"
#include "engine/data/synthetic.h"
#include "engine/data/tokens.h"
#include "engine/nn/batchnorm2d.h"
#include "engine/nn/gelu.h"
#include "engine/nn/linear.h"
#include "engine/nn/relu.h"
#include "engine/parallel/tensor_parallel.h"
#include "tests/support/ranks.h"

namespace dpb {
namespace {

using Params = std::vector<std::vector<float>>;

struct TrainedModel {
  Params params;
  std::vector<double> losses;
  int hook_calls = 0;
};

// `steps` steps of `name` (BatchNorm frozen) on a synthetic set of 4 x `global` samples,
// no shuffling differences: every mode sees the same batches of `global` samples.
TrainedModel train(const std::string& name, int64_t batch, int64_t global, int64_t steps,
          const std::function<void(TrainOptions&)>& setup) {
  Generator g(5);
  auto model = build_model(name, g);
  freeze_batchnorm(*model, true);
  const auto& spec = model->spec();
  std::unique_ptr<Dataset> data;
  if (spec.input_dtype == DType::i32) data = std::make_unique<SyntheticTokens>(spec.input[0], spec.outputs, 4 * global, 5);
  else data = std::make_unique<SyntheticDataset>(spec.input, spec.loss, spec.outputs, 4 * global, 5);
  TrainOptions o;
  o.batch = batch;
  o.steps = steps;
  o.warmup = 0;
  o.seed = 5;
  o.optim.lr = 0.05f;
  TrainedModel r;
  o.hooks.in_forward = [&r](int64_t) { ++r.hook_calls; };
  setup(o);
  Trainer t(*model, *data, o);
  for (const auto& s : t.run().steps) r.losses.push_back(s.loss);
  for (auto* p : model->parameters()) r.params.push_back(p->data().to_vector());
  return r;
}

// Largest parameter difference relative to how far single-device training moved it.
double relative_difference(const Params& got, const Params& want, const Params& initial) {
  double d2 = 0, u2 = 0;
  for (size_t i = 0; i < want.size(); ++i)
    for (size_t k = 0; k < want[i].size(); ++k) {
      const double d = static_cast<double>(got[i][k]) - want[i][k], u = static_cast<double>(want[i][k]) - initial[i][k];
      d2 += d * d;
      u2 += u * u;
    }
  return std::sqrt(d2 / std::max(u2, 1e-30));
}

Params initial_params(const std::string& name) {
  Generator g(5);
  auto model = build_model(name, g);
  Params p;
  for (auto* q : model->parameters()) p.push_back(q->data().to_vector());
  return p;
}

class Strategies : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { cpu::set_threads_per_device(1); }
};

TEST_P(Strategies, EveryModeTrainsLikeOneDevice) {
  const std::string name = GetParam();
  cpu::CpuDeviceScope scope(0);
  const int64_t batch = 12, steps = 3;
  const TrainedModel single = train(name, batch, batch, steps, [](TrainOptions&) {});
  EXPECT_EQ(single.hook_calls, steps);
  const Params initial = initial_params(name);
  for (int n : {2, 3}) {
    const TrainedModel dp = train(name, batch, batch, steps, [&](TrainOptions& o) {
      o.mode = ParallelMode::dp;
      for (int d = 0; d < n; ++d) o.devices.push_back(Device::cpu(d));
    });
    EXPECT_LT(relative_difference(dp.params, single.params, initial), 1e-4) << name << " dp over " << n;
    EXPECT_EQ(dp.hook_calls, steps);
  }
  for (auto schedule : {PipelineSchedule::naive, PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b}) {
    const TrainedModel mp = train(name, batch, batch, steps, [&](TrainOptions& o) {
      o.mode = ParallelMode::pipeline;
      o.devices = {Device::cpu(0), Device::cpu(1)};
      o.pipeline.schedule = schedule;
      o.pipeline.micro_batches = schedule == PipelineSchedule::naive ? 1 : 3;
    });
    EXPECT_LT(relative_difference(mp.params, single.params, initial), 1e-4)
        << name << " " << pipeline_schedule_name(schedule);
  }
  // DDP: two ranks of half the batch each, on the same global batches.
  std::vector<TrainedModel> ranks(2);
  test::run_ranks_ok(2, [&](int r, comm::ProcessGroup& pg) {
    ranks[static_cast<size_t>(r)] = train(name, batch / 2, batch, steps, [&](TrainOptions& o) {
      o.mode = ParallelMode::ddp;
      o.device = Device::cpu(r);
      o.ddp.group = &pg;
    });
  });
  for (int r = 0; r < 2; ++r)
    EXPECT_LT(relative_difference(ranks[static_cast<size_t>(r)].params, single.params, initial), 1e-4)
        << name << " ddp rank " << r;
  // FSDP: 2 ranks (6 samples each) and 3 (4 each; parameters that do not divide by 3 are
  // padded), the model's full parameters gathered back at the end.
  for (const auto& [world, reshard, prefetch] : {std::tuple{2, true, 1}, {3, true, 0}, {2, false, 2}, {1, true, 1}}) {
    std::vector<TrainedModel> sharded(static_cast<size_t>(world));
    test::run_ranks_ok(world, [&](int r, comm::ProcessGroup& pg) {
      sharded[static_cast<size_t>(r)] = train(name, batch / world, batch, steps, [&](TrainOptions& o) {
        o.mode = ParallelMode::fsdp;
        o.device = Device::cpu(r);
        o.ddp.group = &pg;
        o.fsdp.reshard_after_forward = reshard;
        o.fsdp.prefetch = prefetch;
      });
    });
    for (int r = 0; r < world; ++r) {
      EXPECT_LT(relative_difference(sharded[static_cast<size_t>(r)].params, single.params, initial), 1e-4)
          << name << " fsdp rank " << r << " of " << world << (reshard ? "" : ", no reshard") << ", prefetch "
          << prefetch;
      EXPECT_EQ(sharded[static_cast<size_t>(r)].hook_calls, steps);
    }
  }
  // Tensor parallelism: every rank trains on the whole batch with its part of each layer.
  Generator g(5);
  auto probe = build_model(name, g);
  for (int world : {2, 4}) {
    if (!TensorParallel::cannot_split(*probe, world).empty()) continue;
    std::vector<TrainedModel> cut(static_cast<size_t>(world));
    test::run_ranks_ok(world, [&](int r, comm::ProcessGroup& pg) {
      cut[static_cast<size_t>(r)] = train(name, batch, batch, steps, [&](TrainOptions& o) {
        o.mode = ParallelMode::tp;
        o.device = Device::cpu(r);
        o.ddp.group = &pg;
      });
    });
    for (int r = 0; r < world; ++r) {
      EXPECT_LT(relative_difference(cut[static_cast<size_t>(r)].params, single.params, initial), 1e-4)
          << name << " tp rank " << r << " of " << world;
      ASSERT_EQ(cut[static_cast<size_t>(r)].losses.size(), single.losses.size());
      EXPECT_EQ(cut[static_cast<size_t>(r)].hook_calls, steps);
      for (size_t s = 0; s < single.losses.size(); ++s)
        EXPECT_NEAR(cut[static_cast<size_t>(r)].losses[s], single.losses[s], 1e-5 * std::abs(single.losses[s]))
            << name << " tp step " << s;
    }
  }
  if (name == "lenet") {
    EXPECT_NE(TensorParallel::cannot_split(*probe, 2).find("declares no tensor-parallel plan"), std::string::npos);
  }
  // 2D: 2 data-parallel groups of 2 tensor-parallel ranks; each data rank half the batch.
  if (TensorParallel::cannot_split(*probe, 2).empty()) {
    std::vector<TrainedModel> mesh(4);
    test::run_mesh_ok(4, 2, [&](int r, comm::ProcessGroup& data, comm::ProcessGroup& tensor) {
      mesh[static_cast<size_t>(r)] = train(name, batch / 2, batch, steps, [&](TrainOptions& o) {
        o.mode = ParallelMode::ddp;
        o.device = Device::cpu(r);
        o.ddp.group = &data;
        o.tp_group = &tensor;
      });
    });
    for (int r = 0; r < 4; ++r)
      EXPECT_LT(relative_difference(mesh[static_cast<size_t>(r)].params, single.params, initial), 1e-4)
          << name << " ddp x tp rank " << r;
  }
}

// Gradient clipping acts on the whole step's gradient: under DDP the reduced one, in the
// pipeline the one spread over the stages' devices, so every mode clips as one device.
TEST(Strategies, ClippingTheGlobalNormMatchesOneDevice) {
  cpu::set_threads_per_device(1);
  cpu::CpuDeviceScope scope(0);
  const std::string name = "gpt2-tiny";
  const int64_t batch = 8, steps = 3;
  auto clip = [](TrainOptions& o) {
    o.clip_grad_norm = 0.05;  // well below gpt2-tiny's gradient norm: every step clips
    o.optim.kind = OptimizerKind::adamw;
    o.optim.lr = 1e-3f;
  };
  const TrainedModel single = train(name, batch, batch, steps, clip);
  const Params initial = initial_params(name);
  const TrainedModel mp = train(name, batch, batch, steps, [&](TrainOptions& o) {
    clip(o);
    o.mode = ParallelMode::pipeline;
    o.devices = {Device::cpu(0), Device::cpu(1)};
    o.pipeline.schedule = PipelineSchedule::gpipe;
    o.pipeline.micro_batches = 2;
  });
  EXPECT_LT(relative_difference(mp.params, single.params, initial), 1e-3) << "pipeline";
  std::vector<TrainedModel> ranks(2);
  test::run_ranks_ok(2, [&](int r, comm::ProcessGroup& pg) {
    ranks[static_cast<size_t>(r)] = train(name, batch / 2, batch, steps, [&](TrainOptions& o) {
      clip(o);
      o.mode = ParallelMode::ddp;
      o.device = Device::cpu(r);
      o.ddp.group = &pg;
    });
  });
  for (int r = 0; r < 2; ++r)
    EXPECT_LT(relative_difference(ranks[static_cast<size_t>(r)].params, single.params, initial), 1e-3) << "ddp rank " << r;
  // FSDP clips by the norm of every rank's shards together.
  test::run_ranks_ok(2, [&](int r, comm::ProcessGroup& pg) {
    ranks[static_cast<size_t>(r)] = train(name, batch / 2, batch, steps, [&](TrainOptions& o) {
      clip(o);
      o.mode = ParallelMode::fsdp;
      o.device = Device::cpu(r);
      o.ddp.group = &pg;
    });
  });
  for (int r = 0; r < 2; ++r)
    EXPECT_LT(relative_difference(ranks[static_cast<size_t>(r)].params, single.params, initial), 1e-3) << "fsdp rank " << r;
  // Tensor parallelism by the norm of every rank's parts and the replicated parameters once.
  test::run_ranks_ok(2, [&](int r, comm::ProcessGroup& pg) {
    ranks[static_cast<size_t>(r)] = train(name, batch, batch, steps, [&](TrainOptions& o) {
      clip(o);
      o.mode = ParallelMode::tp;
      o.device = Device::cpu(r);
      o.ddp.group = &pg;
    });
  });
  for (int r = 0; r < 2; ++r)
    EXPECT_LT(relative_difference(ranks[static_cast<size_t>(r)].params, single.params, initial), 1e-3) << "tp rank " << r;
  // Without clipping the run differs: the limit was in force.
  const TrainedModel unclipped = train(name, batch, batch, steps, [](TrainOptions& o) {
    o.optim.kind = OptimizerKind::adamw;
    o.optim.lr = 1e-3f;
  });
  EXPECT_GT(relative_difference(unclipped.params, single.params, initial), 1e-2);
}

// A model the registry does not know, defined here with its own plans: what adding a
// model to every mode takes is this one place. Megatron's pair, a column-parallel linear
// then a row-parallel one, and a replicated head; FSDP's units are its two cut layers,
// the head in the root.
std::unique_ptr<Model> tp_test_net(Generator& gen, const ModelOptions&) {
  ModelSpec spec;
  spec.name = "tp-test-net";
  spec.input = Shape{12};
  spec.outputs = 6;
  spec.loss = LossKind::mse;
  spec.fsdp_units = {"pair", "mix"};
  spec.tp_plan = {{"pair", TpStyle::colwise}, {"mix", TpStyle::rowwise}};
  auto m = std::make_unique<Model>(spec);
  m->add("pair", std::make_unique<Linear>(12, 24, true, &gen));
  m->add("act", std::make_unique<GELU>());
  m->add("mix", std::make_unique<Linear>(24, 12, true, &gen));
  m->add("relu", std::make_unique<ReLU>(true));
  m->add("head", std::make_unique<Linear>(12, 6, true, &gen));
  return m;
}
const bool kTestNetRegistered = (register_model("tp-test-net", tp_test_net), true);

TEST(Strategies, AModelDefinedOutsideTheRegistryIsCutByItsOwnPlan) {
  ASSERT_TRUE(kTestNetRegistered);
  Generator g(5);
  auto net = build_model("tp-test-net", g);
  EXPECT_EQ(TensorParallel::cannot_split(*net, 2), "");
  EXPECT_EQ(TensorParallel::cannot_split(*net, 4), "");
  EXPECT_NE(TensorParallel::cannot_split(*net, 5).find("layer 'pair' has 24 outputs"), std::string::npos);
  EXPECT_THROW(register_model("tp-test-net", tp_test_net), Error);
  // Each rank keeps its half of pair's rows and of mix's columns.
  test::run_ranks_ok(2, [&](int rank, comm::ProcessGroup& pg) {
    Generator gr(5);
    auto model = build_model("tp-test-net", gr);
    const std::vector<float> whole = model->named_parameters().front().second->data().to_vector();
    TensorParallel tp(*model, pg);
    const auto params = model->named_parameters();
    ASSERT_EQ(params.front().first, "pair.weight");
    EXPECT_EQ(params.front().second->data().shape(), (Shape{12, 12}));
    EXPECT_EQ(params[2].second->data().shape(), (Shape{12, 12}));  // mix.weight: its 12 of 24 columns
    EXPECT_EQ(params[4].second->data().shape(), (Shape{6, 12}));   // head.weight: replicated
    const std::vector<float> part = params.front().second->data().to_vector();
    // Row 5 of this rank's part is row 12 x rank + 5 of the whole.
    for (int c = 0; c < 12; ++c) ASSERT_EQ(part[5 * 12 + c], whole[(12 * rank + 5) * 12 + c]);
  });
}

// gpt2-tiny: i32 tokens through every mode, and in the pipeline a tied output head on
// another stage than the token embedding it shares its weight with; tp-test-net, the
// model defined above, through every mode too.
INSTANTIATE_TEST_SUITE_P(Models, Strategies, ::testing::Values("mlp", "lenet", "gpt2-tiny", "tp-test-net"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

// The mode registry builds each mode's strategy: every entry has a factory, and what it
// builds is that mode's, on the devices or the process group the mode runs on.
TEST(Strategies, EachRegisteredModeBuildsItsOwnStrategy) {
  cpu::set_threads_per_device(1);
  cpu::CpuDeviceScope scope(0);
  for (const ModeInfo& m : parallel_modes()) {
    ASSERT_NE(m.make_strategy, nullptr) << m.name;
    const auto build = [&](int rank, comm::ProcessGroup* pg) {
      Generator g(1);
      auto model = build_model("mlp", g);
      SyntheticDataset data(model->spec().input, model->spec().loss, model->spec().outputs, 64, 1);
      TrainOptions o;
      o.batch = 8;
      o.mode = m.mode;
      o.device = Device::cpu(rank);
      if (m.multi_device_process) o.devices = {Device::cpu(0), Device::cpu(1)};
      o.ddp.group = pg;
      Trainer t(*model, data, o);
      EXPECT_EQ(t.strategy().mode(), m.mode) << m.name;
      EXPECT_EQ(t.strategy().devices().size(), m.multi_device_process ? 2u : 1u) << m.name;
      EXPECT_EQ(t.pipeline() != nullptr, m.pipelines) << m.name;
    };
    if (m.distributed) {
      test::run_ranks_ok(2, [&](int r, comm::ProcessGroup& pg) { build(r, &pg); });
    } else {
      build(0, nullptr);
    }
  }
}

TEST(Strategies, TheModeIsChosenExplicitlyAndOptionsMustFitIt) {
  cpu::set_threads_per_device(1);
  cpu::CpuDeviceScope scope(0);
  Generator g(1);
  auto model = build_model("mlp", g);
  SyntheticDataset data(model->spec().input, model->spec().loss, model->spec().outputs, 64, 1);
  TrainOptions o;
  o.batch = 8;
  o.mode = ParallelMode::dp;
  o.devices = {Device::cpu(0), Device::cpu(1)};
  Trainer dp(*model, data, o);
  EXPECT_EQ(dp.strategy().mode(), ParallelMode::dp);
  EXPECT_NE(dp.data_parallel(), nullptr);
  EXPECT_EQ(dp.pipeline(), nullptr);
  o.accum_steps = 2;
  try {
    Trainer bad(*model, data, o);
    FAIL() << "DataParallel accepted gradient accumulation";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--accum-steps"), std::string::npos) << e.what();
  }
  TrainOptions ddp;
  ddp.mode = ParallelMode::ddp;  // without a process group
  EXPECT_THROW(Trainer(*model, data, ddp), Error);
  TrainOptions mp;
  mp.mode = ParallelMode::pipeline;
  mp.devices = {Device::cpu(0)};
  EXPECT_THROW(Trainer(*model, data, mp), Error);
}

TEST(Strategies, LinearScalingUsesTheGlobalBatchOfEveryRank) {
  // --mode=ddp --gpus=2 --batch=128 --lr=0.1 --lr-scale=linear --base-batch=128: 0.2.
  cpu::set_threads_per_device(1);
  std::vector<float> lr(2, 0);
  test::run_ranks_ok(2, [&](int r, comm::ProcessGroup& pg) {
    Generator g(1);
    auto model = build_model("simple", g);
    SyntheticDataset data(model->spec().input, model->spec().loss, model->spec().outputs, 512, 1);
    TrainOptions o;
    o.batch = 128;
    o.optim.lr = 0.1f;
    o.lr_scale = LrScaling::linear;
    o.base_batch = 128;
    o.mode = ParallelMode::ddp;
    o.device = Device::cpu(r);
    o.ddp.group = &pg;
    Trainer t(*model, data, o);
    EXPECT_EQ(t.global_batch(), 256);
    lr[static_cast<size_t>(r)] = t.base_lr();
  });
  EXPECT_FLOAT_EQ(lr[0], 0.2f);
  EXPECT_FLOAT_EQ(lr[1], 0.2f);
}

}  // namespace
}  // namespace dpb
