#include "engine/train/trainer.h"

#include <gtest/gtest.h>

#include "engine/backend/cpu/cpu_context.h"
#include "engine/data/synthetic.h"

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
  SyntheticDataset data(spec.input, spec.loss, spec.outputs, 4 * batch, seed);
  TrainOptions o;
  o.batch = batch;
  o.steps = steps;
  o.warmup = 0;
  o.seed = seed;
  o.optim.name = optimizer;
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
                                           std::make_tuple("lenet", 16, 60, 0.05f, 0.75),
                                           std::make_tuple("resnet18", 4, 16, 0.005f, 0.8),
                                           std::make_tuple("widemlp", 2, 8, 0.1f, 0.8)),
                         [](const auto& info) { return std::get<0>(info.param); });

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
  try {
    Trainer t(*model, colour, TrainOptions{});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expects (1, 28, 28)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dpb
