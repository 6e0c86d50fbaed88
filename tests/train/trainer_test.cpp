#include "engine/train/trainer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "engine/backend/cpu/cpu_context.h"
#include "engine/data/synthetic.h"
#include "engine/data/tokens.h"
#include "engine/train/checkpoint.h"
#include "engine/train/safetensors.h"

#include <filesystem>
#include <unistd.h>

namespace dpb {
namespace {

struct TrainedRun {
  std::vector<double> losses;
  std::vector<std::vector<float>> params;
};

TrainedRun train(const std::string& name, int64_t batch, int64_t steps, float lr, uint64_t seed = 0,
          const std::string& optimizer = "sgd") {
  cpu::CpuDeviceScope scope(0);
  Generator g(seed);
  auto model = build_model(name, g);
  const auto& spec = model->spec();
  // A few batches' worth of samples, revisited each epoch: learnable within a few steps.
  std::unique_ptr<Dataset> owned;
  if (spec.input_dtype == DType::i32) owned = std::make_unique<SyntheticTokens>(spec.input[0], spec.outputs, 4 * batch, seed);
  else owned = std::make_unique<SyntheticDataset>(spec.input, spec.loss, spec.outputs, 4 * batch, seed);
  const Dataset& data = *owned;
  TrainOptions o;
  o.batch = batch;
  o.steps = steps;
  o.warmup = 0;
  o.seed = seed;
  o.optim.kind = parse_optimizer(optimizer);
  o.optim.lr = lr;
  Trainer t(*model, data, o);
  TrainedRun r;
  for (const auto& s : t.run().steps) r.losses.push_back(s.loss);
  for (auto* p : model->parameters()) r.params.push_back(p->data().to_vector());
  return r;
}

double mean(const std::vector<double>& v, size_t from, size_t to) {
  double s = 0;
  for (size_t i = from; i < to; ++i) s += v[i];
  return s / static_cast<double>(to - from);
}

void expect_loss_falls(const TrainedRun& r, double factor) {
  const size_t n = r.losses.size(), k = std::max<size_t>(1, n / 4);
  const double first = mean(r.losses, 0, k), last = mean(r.losses, n - k, n);
  EXPECT_LT(last, factor * first) << "loss went from " << first << " to " << last;
}

class LossFalls : public ::testing::TestWithParam<std::tuple<std::string, int64_t, int64_t, float, double>> {};

TEST_P(LossFalls, OnLearnableSyntheticTask) {
  const auto& [name, batch, steps, lr, factor] = GetParam();
  cpu::set_threads_per_device(2);
  expect_loss_falls(train(name, batch, steps, lr), factor);
}

INSTANTIATE_TEST_SUITE_P(Models, LossFalls,
                         ::testing::Values(std::make_tuple("simple", 16, 40, 0.05f, 0.5),
                                           std::make_tuple("mlp", 16, 30, 0.01f, 0.5),
                                           std::make_tuple("lenet", 16, 60, 0.02f, 0.75),
                                           std::make_tuple("resnet18", 4, 16, 0.005f, 0.8),
                                           std::make_tuple("widemlp", 2, 8, 0.1f, 0.8),
                                           std::make_tuple("gpt2-tiny", 8, 40, 0.1f, 0.8)),
                         [](const auto& info) {
                           std::string n = std::get<0>(info.param);
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

TEST(Trainer, SameSeedAndThreadsGiveBitwiseIdenticalParameters) {
  cpu::set_threads_per_device(2);
  for (const std::string name : {"mlp", "lenet", "resnet18"}) {
    const int64_t batch = name == "resnet18" ? 2 : 8;
    const TrainedRun a = train(name, batch, 3, 0.01f, 5, "adam");
    const TrainedRun b = train(name, batch, 3, 0.01f, 5, "adam");
    ASSERT_EQ(a.params.size(), b.params.size());
    for (size_t i = 0; i < a.params.size(); ++i) EXPECT_EQ(a.params[i], b.params[i]) << name << " parameter " << i;
    EXPECT_EQ(a.losses, b.losses) << name;
    const TrainedRun c = train(name, batch, 3, 0.01f, 6, "adam");
    EXPECT_NE(a.params[0], c.params[0]) << name << ": another seed must give other weights";
  }
}

TEST(Trainer, BadInputsAreClearErrors) {
  Generator g(0);
  auto model = build_model("lenet", g);
  SyntheticDataset data(model->spec().input, LossKind::cross_entropy, 10, 64, 0);
  TrainOptions o;
  o.batch = 0;
  try {
    Trainer t(*model, data, o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("batch size must be at least 1, got 0"), std::string::npos);
  }
  SyntheticDataset colour(Shape{3, 32, 32}, LossKind::cross_entropy, 10, 64, 0);
  const TrainOptions defaults;
  try {
    Trainer t(*model, colour, defaults);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expects (1, 28, 28)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dpb

namespace dpb {
namespace {

std::vector<std::vector<float>> params_of(Model& m) {
  std::vector<std::vector<float>> v;
  for (auto* p : m.parameters()) v.push_back(p->data().to_vector());
  for (auto& [n, b] : m.named_buffers()) v.push_back(b->to_vector());
  return v;
}

// N steps straight equal N/2 steps, a checkpoint, a resume and N/2 more, bitwise.
TEST(Trainer, ResumeContinuesExactlyWhereItStopped) {
  cpu::set_threads_per_device(2);
  cpu::CpuDeviceScope scope(0);
  const std::string ckpt = std::filesystem::temp_directory_path() / ("dpb_resume_" + std::to_string(::getpid()) + ".safetensors");
  for (const std::string optimizer : {"sgd", "adam"}) {
    for (const std::string name : {"lenet", "resnet18"}) {
      const int64_t batch = name == "resnet18" ? 2 : 8, n = 8;
      auto run = [&](int64_t steps, const std::string& save, const std::string& resume) {
        Generator g(3);
        auto model = build_model(name, g);
        // 20 samples: the run crosses an epoch boundary (and the checkpoint sits mid-epoch).
        SyntheticDataset data(model->spec().input, model->spec().loss, model->spec().outputs, 5 * batch / 2, 3);
        TrainOptions o;
        o.batch = batch;
        o.steps = steps;
        o.warmup = 0;
        o.seed = 3;
        o.optim.kind = parse_optimizer(optimizer);
        o.optim.lr = 0.01f;
        o.save_path = save;
        o.resume_path = resume;
        Trainer t(*model, data, o);
        auto r = t.run();
        return std::make_pair(params_of(*model), r.end);
      };
      const auto straight = run(n, "", "");
      const auto first = run(n / 2, ckpt, "");
      EXPECT_EQ(first.second.global_step, n / 2);
      const auto resumed = run(n / 2, "", ckpt);
      EXPECT_EQ(resumed.second.global_step, n);
      EXPECT_EQ(resumed.second.epoch, straight.second.epoch);
      ASSERT_EQ(straight.first.size(), resumed.first.size());
      for (size_t i = 0; i < straight.first.size(); ++i)
        EXPECT_EQ(straight.first[i], resumed.first[i]) << name << "/" << optimizer << " tensor " << i;
    }
  }
  std::remove(ckpt.c_str());
}

TEST(Trainer, CheckpointMismatchNamesTheTensor) {
  cpu::CpuDeviceScope scope(0);
  const std::string ckpt = std::filesystem::temp_directory_path() / ("dpb_mismatch_" + std::to_string(::getpid()) + ".safetensors");
  Generator g(0);
  auto lenet = build_model("lenet", g);
  OptimizerOptions oo;
  auto opt = make_optimizer(oo, lenet->parameters());
  save_checkpoint(ckpt, *lenet, *opt, {});
  ModelOptions colour;
  colour.image = Shape{3, 32, 32};
  auto other = build_model("lenet", g, colour);
  auto opt2 = make_optimizer(oo, other->parameters());
  try {
    load_checkpoint(ckpt, *other, *opt2);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'conv1.weight' has shape (6, 1, 5, 5), the model expects (6, 3, 5, 5)"),
              std::string::npos)
        << e.what();
  }
  auto mlp = build_model("mlp", g);
  auto opt3 = make_optimizer(oo, mlp->parameters());
  EXPECT_THROW(load_checkpoint(ckpt, *mlp, *opt3), Error);
  std::remove(ckpt.c_str());
}

// A checkpoint whose numbers make no sense is refused, naming the file and the field, and
// the model is left as it was. Before, a NaN weight trained on as NaN and exited 0, an I32
// optimizer state or Adam's step of 1e30, NaN or -3 (a float-to-int64 cast) was taken,
// global_step=-5 was accepted and a non-numeric epoch failed with the one word "stoll".
TEST(Trainer, CheckpointsThatHoldNonsenseAreRefusedAndChangeNothing) {
  cpu::CpuDeviceScope scope(0);
  const std::string good = std::filesystem::temp_directory_path() / ("dpb_ck_good_" + std::to_string(::getpid()) +
                                                                      ".safetensors");
  const std::string bad = good + ".bad.safetensors";
  Generator g(0);
  auto lenet = build_model("lenet", g);
  OptimizerOptions oo;
  oo.kind = OptimizerKind::adam;
  auto opt = make_optimizer(oo, lenet->parameters());
  const Shape w = lenet->named_parameters().front().second->data().shape();
  const std::string first = lenet->named_parameters().front().first;
  const std::vector<OptimizerState> states{{0, "exp_avg", Tensor::zeros(w)},
                                           {0, "exp_avg_sq", Tensor::zeros(w)},
                                           {0, "step", Tensor::from_vector(Shape{}, {3.0f})}};
  save_checkpoint(good, *lenet, "adam", states, {});
  const std::vector<float> before = lenet->named_parameters().front().second->data().to_vector();
  // Loads `good` changed by `edit`; the error it gives ("" when it loads).
  auto load_edited = [&](const std::function<void(safetensors::File&)>& edit) -> std::string {
    safetensors::File f = safetensors::load(good);
    edit(f);
    safetensors::save(bad, f.tensors, f.metadata);
    auto model = build_model("lenet", g);
    for (const auto& [name, p] : model->named_parameters()) p->data().copy_from(Tensor::zeros(p->data().shape()));
    auto o = make_optimizer(oo, model->parameters());
    try {
      load_checkpoint(bad, *model, *o);
      return "";
    } catch (const Error& e) {
      for (float v : model->named_parameters().front().second->data().to_vector())
        EXPECT_EQ(v, 0.0f) << "a refused checkpoint changed the model";
      return e.what();
    }
  };
  auto tensor = [](safetensors::File& f, const std::string& name) -> Tensor& {
    for (auto& [n, t] : f.tensors)
      if (n == name) return t;
    throw Error("no tensor " + name);
  };
  EXPECT_EQ(load_edited([](safetensors::File&) {}), "");  // the unedited file loads
  auto expect = [&](const std::string& what, const std::string& err, const std::string& needle) {
    EXPECT_NE(err.find(needle), std::string::npos) << what << ": " << err;
    EXPECT_NE(err.find(bad), std::string::npos) << what << ": the file is named: " << err;
  };
  expect("NaN weight", load_edited([&](safetensors::File& f) {
           std::vector<float> v = tensor(f, first).to_vector();
           v[7] = std::nanf("");
           tensor(f, first) = Tensor::from_vector(w, v);
         }),
         "tensor '" + first + "' holds nan at element 7");
  expect("I32 state", load_edited([&](safetensors::File& f) {
           tensor(f, "optimizer." + first + ".exp_avg") = Tensor::empty(w, Device::cpu(), DType::i32);
         }),
         "not floating point");
  for (const float step : {1e30f, std::nanf(""), -3.0f, 2.5f})
    expect("step " + std::to_string(step), load_edited([&](safetensors::File& f) {
             tensor(f, "optimizer." + first + ".step") = Tensor::from_vector(Shape{}, {step});
           }),
           "optimizer." + first + ".step");
  expect("global_step -5", load_edited([](safetensors::File& f) { f.metadata["global_step"] = "-5"; }),
         "metadata 'global_step' is '-5', not a whole number");
  expect("epoch abc", load_edited([](safetensors::File& f) { f.metadata["epoch"] = "abc"; }),
         "metadata 'epoch' is 'abc'");
  EXPECT_EQ(lenet->named_parameters().front().second->data().to_vector(), before);
  std::remove(good.c_str());
  std::remove(bad.c_str());
}

TEST(Trainer, EpochsEvaluateOnTheTestSplit) {
  cpu::CpuDeviceScope scope(0);
  Generator g(0);
  auto model = build_model("mlp", g);
  SyntheticDataset train(model->spec().input, LossKind::cross_entropy, 10, 64, 1);
  SyntheticDataset test(model->spec().input, LossKind::cross_entropy, 10, 32, 2);
  TrainOptions o;
  o.batch = 16;
  o.epochs = 2;
  o.warmup = 0;
  o.optim.lr = 0.01f;
  Trainer t(*model, train, o, &test);
  EXPECT_EQ(t.planned_steps(), 8);
  auto r = t.run();
  ASSERT_EQ(r.epochs.size(), 2u);
  ASSERT_TRUE(r.test.has_value());
  EXPECT_EQ(r.test->samples, 32);
  EXPECT_GE(r.test->accuracy, 0.0);
  EXPECT_LE(r.test->accuracy, 1.0);
  EXPECT_EQ(r.end.epoch, 2);
  EXPECT_EQ(r.end.batch, 0);
}

// A language model's validation loss during training: the test split every K steps, on
// real text (byte-level tokens); each evaluation counts every token of the split.
TEST(Trainer, EvalEveryKStepsGivesTheValidationLossOnText) {
  const std::string text = "/usr/share/common-licenses/GPL-3";
  if (!std::filesystem::exists(text)) GTEST_SKIP() << text << " is not on this system";
  cpu::CpuDeviceScope scope(0);
  Generator g(0);
  ModelOptions mo;
  mo.seq = 32;
  auto model = build_model("gpt2-tiny", g, mo);
  TextTokens train(text, true, 32, 512), test(text, false, 32, 512);
  TrainOptions o;
  o.batch = 8;
  o.steps = 12;
  o.warmup = 0;
  o.eval_every = 5;
  o.optim.kind = OptimizerKind::adamw;
  o.optim.lr = 3e-3f;
  Trainer t(*model, train, o, &test);
  auto r = t.run();
  ASSERT_EQ(r.evals.size(), 2u);
  EXPECT_EQ(r.evals[0].step, 5);
  EXPECT_EQ(r.evals[1].step, 10);
  for (const auto& e : r.evals) {
    EXPECT_EQ(e.test.samples, test.size());
    EXPECT_GT(e.test.loss, 0.0);
    EXPECT_LE(e.test.accuracy, 1.0);
  }
  EXPECT_LT(r.evals[1].test.loss, std::log(512.0)) << "below the uniform guess after 10 steps";
  o.eval_every = -1;
  EXPECT_THROW(Trainer(*model, train, o, &test), Error);
}

TEST(Trainer, LinearScalingRuleScalesAndWarmsUp) {
  Generator g(0);
  auto model = build_model("simple", g);
  SyntheticDataset data(model->spec().input, LossKind::mse, 1, 64, 1);
  TrainOptions o;
  o.batch = 64;
  o.accum_steps = 8;  // 512 samples per optimizer step
  o.steps = 10;
  o.warmup = 0;
  o.optim.lr = 0.1f;
  o.lr_scale = LrScaling::linear;
  o.base_batch = 256;
  Trainer t(*model, data, o);
  EXPECT_FLOAT_EQ(t.base_lr(), 0.2f);
  auto r = t.run();
  EXPECT_FLOAT_EQ(r.steps[0].lr, 0.2f);  // 10% of 10 steps: one warm-up step
  o.steps = 100;
  Trainer t2(*model, data, o);
  auto r2 = t2.run();
  EXPECT_LT(r2.steps[0].lr, r2.steps[20].lr);
  EXPECT_FLOAT_EQ(r2.steps[20].lr, 0.2f);
}

}  // namespace
}  // namespace dpb
