// Model/pipeline parallelism against single-device training (docs/ARCHITECTURE.md §3): the model cut
// into stages on logical CPU devices, each schedule (naive, gpipe, 1f1b) with its
// micro-batches, K steps from the same weights on the same batches must give the same
// parameters. Also: units and splits, the schedules' order and in-flight micro-batches,
// device boundaries for evaluation, BatchNorm's per-micro-batch statistics (a difference
// by design), and a failing stage that stops the others instead of hanging them.
#include "engine/parallel/pipeline.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <tuple>

#include "engine/backend/cpu/cpu_context.h"
#include "engine/data/synthetic.h"
#include "engine/nn/batchnorm2d.h"
#include "engine/optim/optimizer.h"

namespace dpb {
namespace {

using Params = std::vector<std::vector<float>>;

Params params_of(Model& m) {
  Params p;
  for (auto* q : m.parameters()) p.push_back(q->data().to_vector());
  return p;
}

std::unique_ptr<Model> make(const std::string& name, bool freeze_bn) {
  Generator g(33);
  auto m = build_model(name, g);
  if (freeze_bn) freeze_batchnorm(*m);
  return m;
}

struct Trained {
  Params initial, final;
};

// `steps` SGD (momentum) steps on consecutive batches of `batch` samples: on one device
// (devices empty) or pipelined over `devices`.
Trained train(const std::string& name, bool freeze_bn, int steps, int64_t batch, const std::vector<Device>& devices,
          PipelineSchedule schedule = PipelineSchedule::gpipe, int micro = 1, std::vector<int> split = {}) {
  cpu::set_threads_per_device(1);
  cpu::CpuDeviceScope scope(0);
  auto m = make(name, freeze_bn);
  Trained r;
  r.initial = params_of(*m);
  SyntheticDataset ds(m->spec().input, m->spec().loss, m->spec().outputs, 256, 5);
  std::unique_ptr<PipelineParallel> pp;
  if (!devices.empty()) {
    if (split.empty()) {
      const auto units = pipeline_units(*m);
      std::vector<double> even(units.size(), 1.0);
      split = balanced_split(even, static_cast<int>(devices.size()));
    }
    PipelineOptions o;
    o.devices = devices;
    o.split = split;
    o.schedule = schedule;
    o.micro_batches = micro;
    pp = std::make_unique<PipelineParallel>(*m, o);
  }
  OptimizerOptions oo;
  oo.lr = 0.05f;
  oo.momentum = 0.9f;
  auto opt = make_optimizer(oo, m->parameters());
  for (int s = 0; s < steps; ++s) {
    std::vector<int64_t> idx;
    for (int64_t i = 0; i < batch; ++i) idx.push_back(s * batch + i);
    Batch b = make_batch(ds, idx);
    if (pp) {
      pp->train_step(b.x, b.target);
    } else {
      LossResult l = compute_loss(m->spec().loss, m->forward(b.x), b.target, true);
      m->backward(l.grad);
    }
    opt->step();
    opt->zero_grad();
  }
  for (auto* q : m->parameters()) q->data() = q->data().to(Device::cpu(0));
  r.final = params_of(*m);
  return r;
}

// The largest over parameters of ||a - b|| / ||b - initial||: the difference relative
// to how far training moved the parameter.
double worst_relative(const Trained& got, const Trained& want) {
  double worst = 0;
  for (size_t i = 0; i < want.final.size(); ++i) {
    double d2 = 0, u2 = 0;
    for (size_t k = 0; k < want.final[i].size(); ++k) {
      const double d = static_cast<double>(got.final[i][k]) - want.final[i][k];
      const double u = static_cast<double>(want.final[i][k]) - want.initial[i][k];
      d2 += d * d;
      u2 += u * u;
    }
    worst = std::max(worst, std::sqrt(d2 / std::max(u2, 1e-30)));
  }
  return worst;
}

std::vector<Device> cpus(int n) {
  std::vector<Device> d;
  for (int i = 0; i < n; ++i) d.push_back(Device::cpu(i));
  return d;
}

TEST(PipelineUnits, NestedSequentialsAreExpandedSoCutsFallBetweenBlocks) {
  auto m = make("resnet18", false);
  const auto units = pipeline_units(*m);
  std::vector<std::string> names;
  for (const auto& u : units) names.push_back(u.name);
  const std::vector<std::string> want{"conv1",    "bn1",      "relu",     "layer1.0", "layer1.1",
                                      "layer2.0", "layer2.1", "layer3.0", "layer3.1", "layer4.0",
                                      "layer4.1", "avgpool",  "fc"};
  EXPECT_EQ(names, want);
  auto mlp = make("mlp", false);
  EXPECT_EQ(pipeline_units(*mlp).size(), 6u);
}

TEST(PipelineSplit, BalancedSplitMinimisesTheSlowestStage) {
  EXPECT_EQ(balanced_split({1, 1, 1, 1}, 2), (std::vector<int>{2}));
  EXPECT_EQ(balanced_split({5, 1, 1, 1, 1, 1}, 2), (std::vector<int>{1}));
  EXPECT_EQ(balanced_split({1, 1, 1, 1, 1, 1}, 3), (std::vector<int>{2, 4}));
  EXPECT_TRUE(balanced_split({3}, 1).empty());
  // Against every possible cut on random costs.
  Generator g(4);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<double> c(7);
    for (auto& v : c) v = 0.1 + g.uniform();
    auto stage_max = [&](int a, int b) {
      double s0 = 0, s1 = 0, s2 = 0;
      for (int i = 0; i < 7; ++i) (i < a ? s0 : i < b ? s1 : s2) += c[static_cast<size_t>(i)];
      return std::max({s0, s1, s2});
    };
    double best = 1e9;
    for (int a = 1; a < 7; ++a)
      for (int b = a + 1; b < 7; ++b) best = std::min(best, stage_max(a, b));
    const auto s = balanced_split(c, 3);
    ASSERT_EQ(s.size(), 2u);
    EXPECT_NEAR(stage_max(s[0], s[1]), best, 1e-12);
  }
  EXPECT_THROW(balanced_split({1, 1}, 3), Error);
}

TEST(PipelineSplit, ParsesIndicesAndNamesAndListsTheUnitsOnMistakes) {
  auto m = make("resnet18", false);
  const auto units = pipeline_units(*m);
  using Starts = std::vector<std::string>;
  EXPECT_EQ(resolve_split({"6"}, units, 2), (std::vector<int>{6}));
  EXPECT_EQ(resolve_split({"layer2.0", "layer4.0"}, units, 3), (std::vector<int>{5, 9}));
  for (const Starts& bad : {Starts{"0", "6"}, Starts{"13", "6"}, Starts{"layer9", "6"}, Starts{"6", "5"},
                            Starts{"6", "6"}, Starts{"6"}, Starts{}, Starts{"6", ""}}) {
    try {
      resolve_split(bad, units, 3);
      ADD_FAILURE() << "--split with " << bad.size() << " entries accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("5 layer2.0"), std::string::npos) << e.what();
    }
  }
}

TEST(PipelineParallelErrors, BadConfigurationsAreClearErrors) {
  cpu::CpuDeviceScope scope(0);
  auto m = make("mlp", false);
  auto expect_error = [&](PipelineOptions o, const std::string& words) {
    try {
      PipelineParallel pp(*m, o);
      ADD_FAILURE() << "accepted: " << words;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  PipelineOptions o;
  o.devices = cpus(1);
  expect_error(o, "at least 2 devices");
  o.devices = {Device::cpu(0), Device::cpu(0)};
  o.split = {3};
  expect_error(o, "listed twice");
  o.devices = cpus(2);
  o.schedule = PipelineSchedule::naive;
  o.micro_batches = 4;
  expect_error(o, "--schedule=gpipe");
  o.schedule = PipelineSchedule::gpipe;
  o.split = {};
  expect_error(o, "stage starts");
  auto simple = make("simple", false);
  o.split = {1};
  try {
    PipelineParallel pp(*simple, o);
    ADD_FAILURE() << "a one-layer model cut in two";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("too few"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_pipeline_schedule("interleaved"), Error);
}

// The core invariant: every schedule, several stage counts and micro-batch counts
// (including a batch that does not divide), the same parameters as one device.
struct EqCase {
  std::string model;
  int stages;
  PipelineSchedule schedule;
  int micro;
  int64_t batch;
  double tol;
};

void PrintTo(const EqCase& c, std::ostream* os) {
  *os << c.model << " on " << c.stages << " stages, " << pipeline_schedule_name(c.schedule) << ", " << c.micro
      << " micro-batches, batch " << c.batch;
}

class PipelineEquivalence : public ::testing::TestWithParam<EqCase> {};

TEST_P(PipelineEquivalence, MatchesSingleDeviceTraining) {
  const EqCase c = GetParam();
  const bool bn = c.model == "resnet18";
  const Trained one = train(c.model, bn, 3, c.batch, {});
  const Trained pp = train(c.model, bn, 3, c.batch, cpus(c.stages), c.schedule, c.micro);
  EXPECT_LT(worst_relative(pp, one), c.tol);
}

std::string case_name(const ::testing::TestParamInfo<EqCase>& info) {
  const auto& c = info.param;
  std::string s = pipeline_schedule_name(c.schedule);
  if (s == "1f1b") s = "onefoneb";
  return c.model + "_" + std::to_string(c.stages) + "stages_" + s + "_m" + std::to_string(c.micro) + "_b" +
         std::to_string(c.batch);
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, PipelineEquivalence,
    ::testing::Values(EqCase{"mlp", 2, PipelineSchedule::naive, 1, 16, 1e-4},
                      EqCase{"mlp", 2, PipelineSchedule::gpipe, 4, 16, 1e-4},
                      EqCase{"mlp", 3, PipelineSchedule::one_f_one_b, 4, 18, 1e-4},
                      EqCase{"mlp", 3, PipelineSchedule::gpipe, 3, 7, 1e-4},  // 7 = 3 + 3 + 1
                      EqCase{"lenet", 2, PipelineSchedule::naive, 1, 12, 1e-4},
                      EqCase{"lenet", 3, PipelineSchedule::gpipe, 4, 12, 1e-4},
                      EqCase{"lenet", 4, PipelineSchedule::one_f_one_b, 6, 12, 1e-4},
                      EqCase{"lenet", 2, PipelineSchedule::one_f_one_b, 5, 3, 1e-4},  // B < M: 3 micro-batches
                      // eval-mode (frozen) BatchNorm: the BatchNorm-consistent setting. A
                      // weight gradient summed over micro-batches rounds unlike one summed
                      // over the batch, and three steps with momentum carry it: measured up
                      // to 1.0e-3 of a convolution's move, and 1.4e-3 of BatchNorm weights'
                      // that sit near 1.0 and move 1e-4 (their floats' last bit is 1.2e-7).
                      EqCase{"resnet18", 2, PipelineSchedule::naive, 1, 4, 2e-3},
                      EqCase{"resnet18", 2, PipelineSchedule::gpipe, 2, 4, 2e-3},
                      EqCase{"resnet18", 3, PipelineSchedule::one_f_one_b, 2, 4, 2e-3}),
    case_name);

TEST(PipelineBatchNorm, TrainModeStatisticsArePerMicroBatchByDesign) {
  // naive runs the whole batch: BatchNorm sees the same statistics as one device.
  const Trained one = train("resnet18", false, 1, 4, {});
  const Trained naive = train("resnet18", false, 1, 4, cpus(2), PipelineSchedule::naive, 1);
  EXPECT_LT(worst_relative(naive, one), 2e-2);
  // Micro-batches normalise with their own statistics (as GPipe and PyTorch's Pipe do),
  // so the update differs from one device's: by design, and by far.
  const Trained gpipe = train("resnet18", false, 1, 4, cpus(2), PipelineSchedule::gpipe, 2);
  EXPECT_GT(worst_relative(gpipe, one), 0.1);
}

// Each stage runs its program in order; under 1f1b at most p - s micro-batches are in
// flight on stage s, under gpipe all M.
TEST(PipelineSchedules, OrderAndMicroBatchesInFlight) {
  cpu::set_threads_per_device(1);
  cpu::CpuDeviceScope scope(0);
  const int p = 3, M = 5;
  for (auto sched : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b}) {
    auto m = make("mlp", false);
    PipelineOptions o;
    o.devices = cpus(p);
    o.split = {2, 4};
    o.schedule = sched;
    o.micro_batches = M;
    PipelineParallel pp(*m, o);
    SyntheticDataset ds(m->spec().input, m->spec().loss, m->spec().outputs, 64, 5);
    std::vector<int64_t> idx(10);
    for (int64_t i = 0; i < 10; ++i) idx[static_cast<size_t>(i)] = i;
    Batch b = make_batch(ds, idx);
    pp.train_step(b.x, b.target);
    const auto& r = pp.last_step();
    ASSERT_EQ(r.events.size(), static_cast<size_t>(2 * p * M));
    std::map<int, std::string> order;
    std::map<int, int> in_flight, most;
    for (const auto& e : r.events) {
      order[e.stage] += e.kind + std::to_string(e.micro) + " ";
      in_flight[e.stage] += e.kind == 'F' ? 1 : -1;
      most[e.stage] = std::max(most[e.stage], in_flight[e.stage]);
      EXPECT_LE(e.begin_ns, e.end_ns);
    }
    if (sched == PipelineSchedule::gpipe) {
      for (int s = 0; s < p; ++s) {
        EXPECT_EQ(order[s], "F0 F1 F2 F3 F4 B4 B3 B2 B1 B0 ");
        EXPECT_EQ(most[s], M);
      }
    } else {
      EXPECT_EQ(order[0], "F0 F1 F2 B0 F3 B1 F4 B2 B3 B4 ");
      EXPECT_EQ(order[1], "F0 F1 B0 F2 B1 F3 B2 F4 B3 B4 ");
      EXPECT_EQ(order[2], "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 ");
      for (int s = 0; s < p; ++s) EXPECT_EQ(most[s], p - s);
    }
    // A stage's forward of a micro-batch starts after the previous stage's ended, and a
    // backward after the next stage's backward of it.
    std::map<std::tuple<int, int, char>, PipelineEvent> at;
    for (const auto& e : r.events) at[std::make_tuple(e.stage, e.micro, e.kind)] = e;
    auto ev = [&](int s, int mb, char k) { return at[std::make_tuple(s, mb, k)]; };
    for (int s = 0; s < p; ++s)
      for (int mb = 0; mb < M; ++mb) {
        if (s > 0) {
          EXPECT_GE(ev(s, mb, 'F').begin_ns, ev(s - 1, mb, 'F').end_ns);
        }
        if (s + 1 < p) {
          EXPECT_GE(ev(s, mb, 'B').begin_ns, ev(s + 1, mb, 'B').end_ns);
        }
      }
    EXPECT_DOUBLE_EQ(r.theory, 2.0 / 7.0);
    ASSERT_EQ(r.stage_idle.size(), static_cast<size_t>(p));
    for (double idle : r.stage_idle) {
      EXPECT_GE(idle, 0.0);
      EXPECT_LT(idle, 1.0);
    }
  }
}

TEST(PipelineSchedules, NaiveKeepsOneStageBusyAtATime) {
  cpu::set_threads_per_device(1);
  cpu::CpuDeviceScope scope(0);
  auto m = make("lenet", false);
  PipelineOptions o;
  o.devices = cpus(2);
  o.split = {6};
  o.schedule = PipelineSchedule::naive;
  PipelineParallel pp(*m, o);
  SyntheticDataset ds(m->spec().input, m->spec().loss, m->spec().outputs, 64, 5);
  Batch b = make_batch(ds, {0, 1, 2, 3, 4, 5, 6, 7});
  pp.train_step(b.x, b.target);
  auto events = pp.last_step().events;
  ASSERT_EQ(events.size(), 4u);
  std::sort(events.begin(), events.end(), [](auto& a, auto& c) { return a.begin_ns < c.begin_ns; });
  for (size_t i = 1; i < events.size(); ++i) EXPECT_GE(events[i].begin_ns, events[i - 1].end_ns);
  // With p = 2 and one micro-batch, theory says each stage idles half of the step.
  EXPECT_DOUBLE_EQ(pp.last_step().theory, 0.5);
  EXPECT_GT(pp.last_step().bubble, 0.3);
}

TEST(PipelineParallelEval, ModelForwardRunsAcrossTheStages) {
  cpu::set_threads_per_device(1);
  cpu::CpuDeviceScope scope(0);
  auto reference = make("lenet", false);
  auto m = make("lenet", false);
  PipelineOptions o;
  o.devices = cpus(3);
  o.split = {3, 7};
  PipelineParallel pp(*m, o);
  SyntheticDataset ds(m->spec().input, m->spec().loss, m->spec().outputs, 64, 5);
  Batch b = make_batch(ds, {0, 1, 2, 3, 4});
  Tensor want = reference->forward(b.x);
  Tensor got = m->forward(b.x);
  EXPECT_EQ(got.device(), Device::cpu(2));
  const auto w = want.to_vector(), g = got.to(Device::cpu(0)).to_vector();
  for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(g[i], w[i], 1e-5);
  // And back: the input gradient of the first stage's output reaches cpu:0.
  LossResult l = compute_loss(m->spec().loss, got, b.target.to(got.device()), true);
  m->backward(l.grad);
  for (auto* q : m->parameters()) EXPECT_FALSE(q->grad_is_zero());
}

TEST(PipelineParallelErrors, AFailingStageStopsTheOthers) {
  cpu::set_threads_per_device(1);
  cpu::CpuDeviceScope scope(0);
  auto m = make("mlp", false);
  PipelineOptions o;
  o.devices = cpus(3);
  o.split = {2, 4};
  o.micro_batches = 2;
  PipelineParallel pp(*m, o);
  SyntheticDataset ds(m->spec().input, m->spec().loss, m->spec().outputs, 64, 5);
  Batch b = make_batch(ds, {0, 1, 2, 3});
  Tensor bad = Tensor::full(b.target.shape(), 99.0f);  // class 99 of 10: the loss on the last stage throws
  try {
    pp.train_step(b.x, bad);
    ADD_FAILURE() << "an out-of-range label was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pipeline stage 2"), std::string::npos) << e.what();
  }
  // The pipeline still works afterwards.
  EXPECT_NO_THROW(pp.train_step(b.x, b.target));
}

}  // namespace
}  // namespace dpb
