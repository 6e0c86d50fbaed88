// The step simulation of `dpbench --simulate`: the reducer's exact buckets, the link
// model and its fit, the presets, and how predictions move with bandwidth, bucket size
// and stages.
#include "benchmarks/simulate/simulator.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <fstream>
#include <map>

#include "engine/core/error.h"
#include "engine/parallel/fully_sharded.h"
#include "engine/parallel/reducer.h"
#include "engine/train/trainer.h"
#include "reports/collectives_report.h"
#include "reports/json_view.h"
#include "tests/support/models.h"
#include "tests/support/ranks.h"

namespace dpb::sim {
namespace {

Hardware test_hardware() { return {"test", 10e12, 500e9}; }

// `l` with no latency, unbounded bandwidth and no contention: every collective free.
LinkModel free_link(LinkModel l) {
  l.intra.alpha_s = l.inter.alpha_s = 0;
  l.intra.bus_bandwidth = l.inter.bus_bandwidth = 1e30;
  l.contention = l.kernel_contention = 0;
  return l;
}

StepProfile profile_of(const std::string& model, int64_t batch = 32, double step = 0.1) {
  ModelOptions imagenet;
  imagenet.classes = 1000;
  return analytic_profile(model, batch, step, test_hardware(), imagenet);
}

TEST(BucketPlan, IsTheReducersOwn) {
  // The same model's parameters through the engine's Reducer (one rank) and through the
  // simulator's plan: the same buckets with the same parameters, for two bucket sizes.
  Generator g(0);
  auto model = build_model("resnet18", g);
  const StepProfile p = analytic_profile("resnet18", 8, 0.05, test_hardware());
  for (double mb : {25.0, 2.0}) {
    std::vector<std::vector<std::string>> engine;
    test::run_ranks_ok(1, [&](int, comm::ProcessGroup& pg) {
      Reducer r(model->named_parameters(), pg, 1 << 20, static_cast<int64_t>(mb * (1 << 20)));
      engine = r.bucket_params();
    });
    const auto plan = bucket_plan(p, 1 << 20, mb * (1 << 20));
    ASSERT_EQ(plan.size(), engine.size()) << mb << " MiB";
    for (size_t b = 0; b < plan.size(); ++b) EXPECT_EQ(plan[b].params, engine[b]) << "bucket " << b;
  }
}

TEST(Profile, AnalyticSplitsTheStepAndKeepsTheModelsParameters) {
  const StepProfile p = profile_of("resnet50");
  EXPECT_NEAR(p.step_s(), 0.1, 1e-9);
  EXPECT_EQ(p.gradient_bytes(), 25557032 * 4);
  double forward = 0, backward = 0;
  for (const auto& l : p.layers) forward += l.forward_s, backward += l.backward_s;
  EXPECT_NEAR(backward, 2 * forward, 1e-12);
  EXPECT_EQ(p.layers.front().name, "conv1");
  EXPECT_EQ(p.layers[4].name, "layer1.0");
  EXPECT_EQ(p.layers.back().name, "fc");
  // Round trip through its JSON.
  const nlohmann::json j = p.to_json();
  const StepProfile q = StepProfile::from_json(reports::JsonView(j, "profile"));
  EXPECT_EQ(q.layers.size(), p.layers.size());
  EXPECT_EQ(q.gradient_bytes(), p.gradient_bytes());
  EXPECT_THROW(analytic_profile("resnet50", 32, 0, test_hardware()), Error);
}

TEST(Link, FitRecoversAlphaAndBusBandwidth) {
  const double alpha = 20e-6, busbw = 3e9;
  for (int n : {2, 4}) {
    std::vector<std::pair<double, double>> pts;
    for (double s = 1024; s <= 64 << 20; s *= 4) pts.emplace_back(s, 2.0 * (n - 1) * alpha + 2.0 * (n - 1) / n * s / busbw);
    const FittedAllReduce f = fit_allreduce(pts, n);
    EXPECT_NEAR(f.alpha_s, alpha, 1e-9);
    EXPECT_NEAR(f.bus_bandwidth / busbw, 1, 1e-6);
    EXPECT_LT(f.max_residual, 1e-6);
  }
  EXPECT_THROW(fit_allreduce({{1024, 1e-3}}, 2), Error);
}

// A real --bench=collectives report (Gloo, 2 ranks, tests/data/reports): its all-gather
// and reduce-scatter rows are fitted on their own, and each fit gives the measured times
// back within the fit's own residual; an all-reduce-only link takes half the all-reduce.
TEST(Link, FitsAllGatherAndReduceScatterOnTheirOwn) {
  const std::string report = std::string(DPB_SOURCE_DIR) + "/tests/data/reports/collectives-gloo-2ranks.json";
  const LinkModel l = fit_link({report}, load_preset("cpu-gloo-local"));
  ASSERT_TRUE(l.fitted_allgather.count(2));
  ASSERT_TRUE(l.fitted_reduce_scatter.count(2));
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(report));
  int checked = 0;
  for (const auto& row : j["results"]) {
    const std::string op = row["op"];
    if ((op != "allgather" && op != "reduce_scatter") || !row["time_us"].is_number()) continue;
    const double bytes = row["bytes"], measured = row["time_us"].get<double>() * 1e-6;
    const double modeled = op == "allgather" ? l.all_gather_s(bytes, 2) : l.reduce_scatter_s(bytes, 2);
    const double residual = (op == "allgather" ? l.fitted_allgather : l.fitted_reduce_scatter).at(2).max_residual;
    EXPECT_NEAR(modeled, measured, (residual + 1e-6) * measured) << op << " at " << bytes << " bytes";
    ++checked;
  }
  EXPECT_GT(checked, 4);
  LinkModel halves = l;
  halves.fitted_allgather.clear();
  halves.fitted_reduce_scatter.clear();
  EXPECT_DOUBLE_EQ(halves.all_gather_s(1 << 20, 2), halves.half_allreduce_s(1 << 20, 2));
  EXPECT_NE(l.all_gather_s(1 << 20, 2), halves.all_gather_s(1 << 20, 2));
}

// Between a report's sizes the link interpolates what they measured; beyond them it goes
// on at the last two sizes' cost per byte. On a real report (Gloo, 2 ranks) the line has
// residuals the interpolation does not: each size gives its own time back.
TEST(Link, InterpolatesBetweenMeasuredSizes) {
  FittedAllReduce f = fit_allreduce({{1e3, 1e-3}, {1e6, 2e-3}, {4e6, 8e-3}}, 2);
  f.measured = {{1e3, 1e-3}, {1e6, 2e-3}, {4e6, 8e-3}};
  EXPECT_DOUBLE_EQ(f.seconds(1e6, 2), 2e-3);
  EXPECT_NEAR(f.seconds(2.5e6, 2), 5e-3, 1e-12);                   // halfway between 1 and 4 MB
  EXPECT_NEAR(f.seconds(10e6, 2), 8e-3 + 6e6 * 2e-9, 1e-12);       // 6e-3 s over the last 3 MB
  EXPECT_LE(f.seconds(10, 2), 1e-3);                               // below the smallest: no dearer
  EXPECT_GE(f.seconds(10, 2), 2 * f.alpha_s - 1e-15);              // nor below the latency
  FittedAllReduce scaled = f;
  scaled.scale_time(3);
  EXPECT_NEAR(scaled.seconds(2.5e6, 2), 15e-3, 1e-12);
  f.measured.clear();
  EXPECT_DOUBLE_EQ(f.seconds(2.5e6, 2), 2 * f.alpha_s + 2.5e6 / f.bus_bandwidth);

  const std::string report = std::string(DPB_SOURCE_DIR) + "/tests/data/reports/collectives-gloo-2ranks.json";
  const LinkModel l = fit_link({report}, load_preset("cpu-gloo-local"));
  ASSERT_TRUE(l.fitted.count(2));
  EXPECT_GT(l.fitted.at(2).max_residual, 0.05);  // what the line alone would miss by
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(report));
  int checked = 0;
  for (const auto& row : j["results"]) {
    if (row["op"] != "allreduce" || !row["time_us"].is_number()) continue;
    EXPECT_NEAR(l.allreduce_s(row["bytes"], 2), row["time_us"].get<double>() * 1e-6, 1e-12) << row;
    ++checked;
  }
  EXPECT_GT(checked, 4);
}

// A size measured alone (one launch, `-b S -e S`: the size a job's bucket has) is a repeat
// of the sweep from the same nodes: the link gives that size's own time back, where it
// interpolated before. Real reports from two network namespaces at 100 Mbit/s; one file of
// one size alone is not enough to fit on.
TEST(Link, ASizeMeasuredAloneJoinsTheSweepItRepeats) {
  const std::string dir = std::string(DPB_SOURCE_DIR) + "/tests/data/reports/";
  const std::string sweep = dir + "collectives-gloo-2nodes-100mbit.json";
  const std::string alone = dir + "collectives-gloo-2nodes-100mbit-26494976.json";
  const double bytes = 26494976;
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(alone));
  ASSERT_EQ(j["results"].size(), 1u);
  const double measured = j["results"][0]["time_us"].get<double>() * 1e-6;
  const LinkModel interpolated = fit_link({sweep}, load_preset("cpu-gloo-local"));
  const LinkModel both = fit_link({sweep, alone}, load_preset("cpu-gloo-local"));
  EXPECT_NEAR(both.allreduce_s(bytes, 2), measured, 1e-12);
  EXPECT_GT(std::abs(interpolated.allreduce_s(bytes, 2) - measured), 1e-4);  // beyond the sweep's 16 MiB
  EXPECT_DOUBLE_EQ(both.allreduce_s(4 << 20, 2), interpolated.allreduce_s(4 << 20, 2));  // the sweep's own
  try {
    fit_link({alone}, load_preset("cpu-gloo-local"));
    FAIL() << "one size alone was fitted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fewer than 2 correct all-reduce sizes"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("26494976.json"), std::string::npos) << e.what();
  }
}

// An all-reduce started with nothing queued before it costs what --isolated measured: a
// bucket launched on an idle link (the step's first) takes it, one queued behind another
// the back-to-back time.
TEST(Link, ABucketOnAnIdleLinkTakesTheIsolatedTime) {
  reports::CollectivesReport c;
  c.config.world_size = 2;
  c.config.ops = {"allreduce"};
  c.config.isolated = 5;
  c.config.isolated_pause_us = 2000;
  for (int64_t b = 1 << 10; b <= 64 << 20; b *= 4) {
    const double us = 100 + static_cast<double>(b) * 4e-3;  // 250 MB/s back to back
    c.results.push_back({"allreduce", b, b / 4, "float32", us, 0.0, 0.0, 0, {}, 50 + static_cast<double>(b) * 1e-3});
  }
  const std::string path = ::testing::TempDir() + "isolated-link.json";
  std::ofstream(path) << c.to_json().dump();
  LinkModel l = fit_link({path}, load_preset("cpu-gloo-local"));
  std::remove(path.c_str());
  ASSERT_TRUE(l.fitted_isolated.count(2));
  EXPECT_DOUBLE_EQ(l.isolated_pause_s, 2e-3);
  EXPECT_NEAR(l.allreduce_on_idle_link_s(1 << 20, 2), (50 + 1048.576) * 1e-6, 1e-12);
  EXPECT_NEAR(l.allreduce_s(1 << 20, 2), (100 + 4194.304) * 1e-6, 1e-12);  // back to back
  EXPECT_TRUE(l.to_json().contains("fitted_allreduce_isolated"));

  // One bucket a step, launched after the backward on a link idle since the last step:
  // the isolated time is what is exposed.
  const StepProfile p = profile_of("gpt2-tiny", 4, 0.014);
  SimOptions one;
  one.first_bucket_bytes = one.bucket_bytes = 1e12;
  const SimPoint alone = simulate_point(p, l, 2, one);
  const double bytes = static_cast<double>(p.gradient_bytes());
  EXPECT_NEAR(alone.comm_s, l.allreduce_on_idle_link_s(bytes, 2), 1e-12);
  // Without the isolated fit, the back-to-back time: longer here.
  LinkModel queued = l;
  queued.fitted_isolated.clear();
  const SimPoint b2b = simulate_point(p, queued, 2, one);
  EXPECT_NEAR(b2b.comm_s, queued.allreduce_s(bytes, 2), 1e-12);
  EXPECT_GT(b2b.step_s, alone.step_s);
  // Many small buckets: the first starts on an idle link, those queued behind it do not.
  SimOptions many;
  many.first_bucket_bytes = many.bucket_bytes = 16 << 10;
  const SimPoint split = simulate_point(p, l, 2, many);
  const SimPoint split_b2b = simulate_point(p, queued, 2, many);
  EXPECT_LT(split.comm_s, split_b2b.comm_s);
  double isolated_sum = 0;
  for (const auto& b : bucket_plan(p, many.first_bucket_bytes, many.bucket_bytes))
    isolated_sum += l.allreduce_on_idle_link_s(static_cast<double>(b.bytes), 2);
  EXPECT_GT(split.comm_s, isolated_sum);
}

LinkModel queued_of(LinkModel l) {
  l.fitted_allgather_isolated.clear();
  l.fitted_reduce_scatter_isolated.clear();
  return l;
}

// FSDP's all-gathers and reduce-scatters take their isolated times where they start on an
// idle link (a unit's, between compute), from the rows' isolated_us of those collectives.
TEST(Link, FsdpCollectivesOnAnIdleLinkTakeTheirIsolatedTimes) {
  reports::CollectivesReport c;
  c.config.world_size = 2;
  c.config.ops = {"allreduce", "allgather", "reduce_scatter"};
  c.config.isolated = 5;
  c.config.isolated_pause_us = 500;
  for (const char* op : {"allreduce", "allgather", "reduce_scatter"})
    for (int64_t b = 1 << 10; b <= 64 << 20; b *= 4)
      c.results.push_back({op, b, b / 4, "float32", 1000 + static_cast<double>(b) * 4e-3, 0.0, 0.0, 0, {},
                           50 + static_cast<double>(b) * 1e-3});
  const std::string path = ::testing::TempDir() + "isolated-fsdp-link.json";
  std::ofstream(path) << c.to_json().dump();
  const LinkModel l = fit_link({path}, load_preset("cpu-gloo-local"));
  std::remove(path.c_str());
  ASSERT_TRUE(l.fitted_allgather_isolated.count(2));
  ASSERT_TRUE(l.fitted_reduce_scatter_isolated.count(2));
  // As measured: the row's time alone, not half an all-reduce's.
  EXPECT_NEAR(l.on_idle_link_s(LinkModel::Collective::allgather, 1 << 20, 2, -1), (50 + 1048.576) * 1e-6, 1e-12);
  EXPECT_EQ(queued_of(l).on_idle_link_s(LinkModel::Collective::allgather, 1 << 20, 2, -1), -1);  // not measured
  const StepProfile p = profile_of("gpt2-tiny", 4, 0.014);
  SimOptions o;
  o.mode = ParallelMode::fsdp;
  const LinkModel queued = queued_of(l);
  const SimPoint spaced = simulate_point(p, l, 2, o), b2b = simulate_point(p, queued, 2, o);
  EXPECT_LT(spaced.comm_s, b2b.comm_s);
  EXPECT_LT(spaced.step_s, b2b.step_s);
  // The same collectives in the same order either way.
  ASSERT_EQ(spaced.collectives.size(), b2b.collectives.size());
  for (size_t k = 0; k < spaced.collectives.size(); ++k)
    EXPECT_EQ(spaced.collectives[k].bytes, b2b.collectives[k].bytes);
}

TEST(Link, StolenComputeIsAPerMessageAndAPerByteCost) {
  std::vector<std::array<double, 4>> rows;
  for (double b = 1024; b <= 64 << 20; b *= 4) rows.push_back({b, 1e-3 + b * 1e-8, 2e-4 + b * 3e-9, 5 * (1e-3 + b * 1e-8)});
  const StolenCompute f = fit_stolen(rows);
  EXPECT_NEAR(f.per_message_s, 2e-4, 1e-12);
  EXPECT_NEAR(f.per_byte_s, 3e-9, 1e-15);
  EXPECT_EQ(f.points, static_cast<int>(rows.size()));
  // Neither part negative: compute that grows with no size is a per-message cost, and
  // compute that goes to none at small sizes a per-byte one.
  const StolenCompute flat = fit_stolen({{{1e3, 1e-3, 5e-4, 5e-3}, {1e6, 1e-2, 4e-4, 5e-2}}});
  EXPECT_EQ(flat.per_byte_s, 0);
  EXPECT_GT(flat.per_message_s, 4e-4);
  const StolenCompute through0 = fit_stolen({{{1e3, 1e-3, -1e-4, 5e-3}, {1e6, 1e-2, 1e-3, 5e-2}}});
  EXPECT_EQ(through0.per_message_s, 0);
  EXPECT_GT(through0.per_byte_s, 0);
}

// The weighted error of a stolen-compute fit over a report's rows: what each row's
// slowdown would be off by, as precise as the seconds it was measured over.
double stolen_error(const StolenCompute& f, const std::vector<std::array<double, 4>>& rows) {
  double e = 0;
  for (const auto& [b, t, y, window] : rows) e += window * std::pow((f.at(b) - y) / t, 2);
  return e;
}

// A real --bench=collectives --load report (Gloo, 2 ranks on a 2-vCPU VM): the compute an
// all-reduce takes from the thread beside it is fitted as a cost per message plus one per
// byte, on each row's load slowdown times its duration. No other such line fits the rows
// better; a small collective beside compute slows it by almost nothing however long it
// waits, and the largest by about what its row measured.
TEST(Link, ContentionUnderLoadIsPerMessageAndPerByte) {
  const std::string dir = std::string(DPB_SOURCE_DIR) + "/tests/data/reports/";
  const std::string loaded = dir + "collectives-gloo-2ranks-load.json";
  const LinkModel l = fit_link({dir + "collectives-gloo-2ranks.json", loaded}, load_preset("cpu-gloo-local"));
  ASSERT_EQ(l.contention_scope, LinkModel::ContentionScope::transfers);
  ASSERT_TRUE(l.stolen);
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(loaded));
  std::vector<std::array<double, 4>> rows;
  const double iters = j["config"]["iters"];
  double largest = 0, largest_slowdown = 0, largest_s = 0;
  for (const auto& row : j["results"]) {
    const double b = row["bytes"], t = row["time_us"].get<double>() * 1e-6, slowdown = row["load_slowdown"];
    rows.push_back({b, t, slowdown * t, t * iters});
    if (b > largest) largest = b, largest_slowdown = slowdown, largest_s = t;
  }
  EXPECT_EQ(l.stolen->points, static_cast<int>(rows.size()));
  const double best = stolen_error(*l.stolen, rows);
  for (double k : {0.9, 1.1}) {
    StolenCompute m = *l.stolen, b = *l.stolen;
    m.per_message_s = m.per_message_s > 0 ? m.per_message_s * k : (k - 1) * 1e-6 + 1e-6;
    b.per_byte_s *= k;
    EXPECT_GE(stolen_error(m, rows), best) << k;
    EXPECT_GE(stolen_error(b, rows), best) << k;
  }
  EXPECT_GT(largest_slowdown, 0.3);  // what the report shows at 64 MiB
  const double at_largest = l.contention_while(largest, largest_s);
  EXPECT_GT(at_largest, largest_slowdown / 2);
  EXPECT_LT(at_largest, largest_slowdown * 2);
  // A 200 KiB all-gather (one of gpt2-tiny's FSDP units) waiting 4 ms beside compute.
  EXPECT_LT(l.contention_while(200 << 10, 4e-3), 0.05);
  // --contention (or a preset) gives one figure for every size.
  LinkModel flat = l;
  flat.stolen.reset();
  EXPECT_DOUBLE_EQ(flat.contention_while(200 << 10, 4e-3), l.contention);
  // FSDP on gpt2-tiny, every unit a few hundred KiB: the measured cost takes almost
  // nothing from compute, the flat one the whole step's share while gathers are in flight.
  SimOptions o;
  o.mode = ParallelMode::fsdp;
  const StepProfile p = profile_of("gpt2-tiny", 4, 0.014);
  const SimPoint measured = simulate_point(p, l, 2, o), uniform = simulate_point(p, flat, 2, o);
  EXPECT_LT(measured.step_s, uniform.step_s);
  EXPECT_LT(measured.step_s, p.compute_s() * 1.05 + p.optimizer_s / 2 + p.other_s + measured.exposed_comm_s);
}

// Real --load reports across two nodes at 1 Gbit/s (2-vCPU VM; one run of 1 KiB-64 MiB,
// 5 iterations a size, and two of 1 KiB-1 MiB, 20 a size): the small sizes' slowdowns
// scatter around zero (-0.18 to +0.59), each timed over tens of ms; the 16 and 64 MiB
// rows, over 0.8 and 2.9 s, measured the compute an all-reduce takes at 1.9 ns a byte.
// The line gives the large sizes what their rows measured: weighted by 1 / time^2 alone it
// gave 64 MiB 71 ms where the row measured 129 ms, and a 26.5 MB DDP bucket 29 ms.
TEST(Link, StolenComputeFollowsTheRowsMeasuredLongest) {
  const std::string dir = std::string(DPB_SOURCE_DIR) + "/tests/data/reports/collectives-gloo-2nodes-1gbit";
  const LinkModel l = fit_link({dir + ".json", dir + "-load.json", dir + "-load-small.json", dir + "-load-small-2.json"},
                               load_preset("cpu-gloo-local"));
  ASSERT_TRUE(l.stolen);
  EXPECT_EQ(l.stolen->points, 9);  // the three reports are one measurement: a row a size
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(dir + "-load.json"));
  for (const auto& row : j["results"]) {
    const double b = row["bytes"];
    if (row["op"] != "allreduce" || b < (16 << 20)) continue;
    const double measured = row["load_slowdown"].get<double>() * row["time_us"].get<double>() * 1e-6;
    EXPECT_NEAR(l.stolen->at(b), measured, 0.2 * measured) << b;
  }
  // Small collectives still cost about a wake-up each, not the noise of one size's row.
  EXPECT_LT(l.stolen->at(16 << 10), 1e-3);
}

// FSDP's collectives under load by their own rows (a real --load report with all three,
// Gloo, 2 ranks on a 2-vCPU VM): on a busy core a 64 MiB all-gather took 205 ms where the
// all-reduce of the same size took 22 ms, so stretching the all-gather's idle time as the
// all-reduce's is under load charged FSDP far too little. Each has its own loaded times
// and its own compute taken; FSDP's prediction uses them.
TEST(Link, FsdpCollectivesUnderLoadHaveTheirOwnCost) {
  const std::string dir = std::string(DPB_SOURCE_DIR) + "/tests/data/reports/";
  const std::string loaded = dir + "collectives-gloo-2ranks-load-fsdp.json";
  const LinkModel l = fit_link({dir + "collectives-gloo-2ranks.json", loaded}, load_preset("cpu-gloo-local"));
  ASSERT_EQ(l.fitted_allgather_under_load.count(2), 1u);
  ASSERT_EQ(l.fitted_reduce_scatter_under_load.count(2), 1u);
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(loaded));
  std::map<std::string, std::vector<std::array<double, 4>>> rows;
  const double iters = j["config"]["iters"];
  double gather_64m = 0;
  for (const auto& row : j["results"]) {
    const double b = row["bytes"], t = row["time_us"].get<double>() * 1e-6;
    rows[row["op"]].push_back({b, t, row["load_slowdown"].get<double>() * t, t * iters});
    if (row["op"] == "allgather" && b == 64 << 20) gather_64m = t;
  }
  ASSERT_TRUE(l.stolen && l.stolen_allgather && l.stolen_reduce_scatter);
  for (const auto& [op, fit] : {std::pair{"allreduce", *l.stolen}, std::pair{"allgather", *l.stolen_allgather},
                                std::pair{"reduce_scatter", *l.stolen_reduce_scatter}}) {
    const StolenCompute own = fit_stolen(rows[op]);
    EXPECT_DOUBLE_EQ(fit.per_message_s, own.per_message_s) << op;
    EXPECT_DOUBLE_EQ(fit.per_byte_s, own.per_byte_s) << op;
  }
  // Each collective's own figure where measured; the all-reduce's otherwise.
  using C = LinkModel::Collective;
  EXPECT_DOUBLE_EQ(l.contention_while(1 << 20, 1e-2, C::allgather), l.stolen_allgather->at(1 << 20) / 1e-2);
  LinkModel without = l;
  without.stolen_allgather = without.stolen_reduce_scatter = std::nullopt;
  without.fitted_allgather_under_load.clear();
  without.fitted_reduce_scatter_under_load.clear();
  EXPECT_DOUBLE_EQ(without.contention_while(1 << 20, 1e-2, C::allgather), without.contention_while(1 << 20, 1e-2));
  // The loaded all-gather at 64 MiB is what its row measured, far above its idle time
  // stretched as the all-reduce's.
  const double fitted = l.all_gather_under_load_s(64 << 20, 2), stretched = without.all_gather_under_load_s(64 << 20, 2);
  EXPECT_NEAR(fitted, gather_64m, 1e-9);
  EXPECT_GT(fitted, 2 * stretched);
  // Here the all-gathers, though slowed themselves, took less compute than the
  // all-reduces (their rows' slowdowns sum to about nothing). FSDP on ResNet-18 (45 MB of
  // parameters a step, gathered twice and scattered once) is predicted from its own
  // collectives' costs: the same link with all-gathers ten times as costly as the
  // all-reduces predicts a longer step; with none, a shorter one.
  EXPECT_LT(l.stolen_allgather->at(64 << 20), l.stolen->at(64 << 20));
  SimOptions o;
  o.mode = ParallelMode::fsdp;
  const StepProfile p = profile_of("resnet18", 16, 0.5);
  LinkModel costly = l, free = l;
  costly.stolen_allgather = StolenCompute{10 * l.stolen->per_message_s, 10 * l.stolen->per_byte_s, 0};
  free.stolen_allgather = free.stolen_reduce_scatter = StolenCompute{};
  const double step = simulate_point(p, l, 2, o).step_s;
  EXPECT_GT(simulate_point(p, costly, 2, o).step_s, step + 0.05);
  EXPECT_LE(simulate_point(p, free, 2, o).step_s, step);
}

TEST(Link, RingOrTreeByWhicheverIsFaster) {
  LinkModel l = load_preset("dgx1-v100");
  Algorithm a;
  // Within a node there is only the ring.
  l.allreduce_s(64 << 20, 8, &a);
  EXPECT_EQ(a, Algorithm::ring);
  // Across 128 nodes a small message pays 2(n-1) ring steps; the tree pays log2(nodes).
  const double tree = l.allreduce_s(4096, 1024, &a);
  EXPECT_EQ(a, Algorithm::tree);
  EXPECT_LT(tree, 2.0 * 1023 * l.inter.alpha_s);
  l.allreduce_s(1 << 30, 16, &a);
  EXPECT_EQ(a, Algorithm::ring) << "large messages take the ring (full bandwidth)";
}

TEST(Presets, EveryOneLoadsAndCitesItsSources) {
  for (const auto& name : {"dgx1-v100", "dgx-h100", "pcie-a100-25gbe", "cpu-gloo-local"}) {
    const LinkModel l = load_preset(name);
    EXPECT_EQ(l.name, name);
    EXPECT_FALSE(l.citations.empty()) << name;
    EXPECT_GT(l.intra.bus_bandwidth, 0) << name;
    EXPECT_GT(l.hardware.peak_flops, 0) << name;
  }
  try {
    load_preset("dgx2");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("valid: cpu-gloo-local, dgx-h100, dgx1-v100, pcie-a100-25gbe"),
              std::string::npos)
        << e.what();
  }
  const std::string bad = testing::TempDir() + "/bad_preset.json";
  std::ofstream(bad) << R"({"name": "x", "sources": ["y"], "gpus_per_node": 0})";
  EXPECT_THROW(load_preset(bad), Error);
}

TEST(Simulate, OneRankIsTheProfilesStep) {
  const StepProfile p = profile_of("resnet50");
  const SimPoint one = simulate_point(p, load_preset("dgx1-v100"), 1, {});
  EXPECT_NEAR(one.step_s, p.step_s(), 1e-12);
  EXPECT_EQ(one.comm_s, 0);
}

TEST(Simulate, FasterLinksNeverSlowAStep) {
  const StepProfile p = profile_of("resnet50");
  for (int n : {2, 16, 256}) {
    double previous = INFINITY;
    for (double scale : {0.01, 0.1, 0.5, 1.0, 2.0, 10.0}) {
      LinkModel l = load_preset("dgx1-v100");
      l.intra.bus_bandwidth *= scale;
      l.inter.bus_bandwidth *= scale;
      const double step = simulate_point(p, l, n, {}).step_s;
      EXPECT_LE(step, previous * (1 + 1e-12)) << n << " ranks, bandwidth x" << scale;
      previous = step;
    }
  }
}

TEST(Simulate, EfficiencyFallsWithTinyBucketsAndSlowNetworks) {
  const StepProfile p = profile_of("resnet50");
  // A network where each collective's latency counts (200 us a step): smaller buckets,
  // more collectives, until each parameter is its own bucket.
  LinkModel latent = load_preset("dgx1-v100");
  latent.intra.alpha_s = latent.inter.alpha_s = 200e-6;
  double previous = 2;
  for (double mb : {25.0, 4.0, 1.0, 0.05}) {
    SimOptions o;
    o.bucket_bytes = mb * (1 << 20);
    o.first_bucket_bytes = std::min(o.first_bucket_bytes, o.bucket_bytes);
    const double e = simulate(p, latent, {64}, o).points[0].efficiency;
    EXPECT_LT(e, previous) << mb << " MiB buckets";
    previous = e;
  }
  const LinkModel l = load_preset("dgx1-v100");
  previous = 2;
  for (double gbps : {45.0, 5.0, 1.0, 0.1}) {
    LinkModel slow = l;
    slow.inter.bus_bandwidth = gbps * 1e9;
    const double e = simulate(p, slow, {64}, {}).points[0].efficiency;
    EXPECT_LT(e, previous) << gbps << " GB/s between nodes";
    previous = e;
  }
  // Within one node the inter-node link does not matter.
  LinkModel slow = l;
  slow.inter.bus_bandwidth = 1e6;
  EXPECT_DOUBLE_EQ(simulate_point(p, slow, 8, {}).step_s, simulate_point(p, l, 8, {}).step_s);
}

TEST(Simulate, ASlowLinkExposesTheLastBucket) {
  const StepProfile p = profile_of("resnet50");
  LinkModel l = load_preset("pcie-a100-25gbe");
  l.inter.bus_bandwidth = 1e9;  // 8 Gb/s between nodes
  const SimPoint r = simulate_point(p, l, 16, {});
  EXPECT_GT(r.exposed_comm_s, 0.1 * r.step_s);
  EXPECT_LT(r.overlap, 1);
  EXPECT_NE(r.critical_path.find("ends the step"), std::string::npos) << r.critical_path;
  EXPECT_NEAR(r.step_s, r.compute_s + r.exposed_comm_s + p.optimizer_s + p.other_s, 1e-12);
}

// FSDP: one rank is the one-device step; with a free link the step is compute plus the
// optimizer on 1/N of the parameters; prefetch hides all-gathers, keeping units to the
// backward saves the second ones, and a slow link leaves the compute waiting for them.
TEST(Simulate, FsdpGathersUnitsAndStepsOnShards) {
  const StepProfile p = profile_of("gpt2-tiny", 4);
  SimOptions o;
  o.mode = ParallelMode::fsdp;
  const LinkModel base = load_preset("dgx-h100");
  EXPECT_NEAR(simulate_point(p, base, 1, o).step_s, p.step_s(), 1e-12);
  const LinkModel free = free_link(base);
  const SimPoint ideal = simulate_point(p, free, 4, o);
  EXPECT_GT(ideal.copy_s, 0);  // the analytic profile copies at half the memory bandwidth
  EXPECT_NEAR(ideal.step_s, p.compute_s() + ideal.copy_s + p.optimizer_s / 4 + p.other_s, 1e-9);
  EXPECT_NEAR(ideal.exposed_comm_s, 0, 1e-12);
  // A link where every all-gather costs about a layer's compute.
  LinkModel slow = base;
  slow.intra.alpha_s = p.compute_s() / static_cast<double>(p.layers.size());
  slow.contention = slow.kernel_contention = 0;
  SimOptions off = o, ahead = o, kept = o;
  off.fsdp_prefetch = 0;
  ahead.fsdp_prefetch = 2;
  kept.fsdp_reshard = false;
  const SimPoint r0 = simulate_point(p, slow, 4, off), r1 = simulate_point(p, slow, 4, o),
                 r2 = simulate_point(p, slow, 4, ahead), rk = simulate_point(p, slow, 4, kept);
  EXPECT_GT(r0.exposed_comm_s, r1.exposed_comm_s);
  EXPECT_GE(r1.exposed_comm_s, r2.exposed_comm_s - 1e-12);
  EXPECT_LT(rk.comm_s, r1.comm_s);  // no second all-gathers
  EXPECT_GT(r0.step_s, ideal.step_s);
  EXPECT_NEAR(r0.step_s, ideal.step_s + r0.exposed_comm_s, 1e-9);
  // The last unit's reduce-scatter can only start after its backward: it ends the step.
  EXPECT_NE(r0.critical_path.find("the reduce-scatter of the root unit ends the step"), std::string::npos)
      << r0.critical_path;
  // Efficiency falls as the link slows.
  double previous = 2;
  for (double scale : {1.0, 0.1, 0.01}) {
    LinkModel l = base;
    l.intra.bus_bandwidth *= scale;
    const double e = simulate(p, l, {8}, o).points[0].efficiency;
    EXPECT_LT(e, previous) << "bandwidth x" << scale;
    previous = e;
  }
}

// FSDP's copies on the training stream, at the profile's copy rate: each unit's gathered
// rows out into its parameters in the forward and again in the backward (but the last
// unit's, which stays gathered), and its gradients into the reduce-scatter's buffer; the
// root's once each way. A profile without a copy rate charges none, and says so (null).
TEST(Simulate, FsdpPaysItsCopiesAtTheProfilesRate) {
  StepProfile p = profile_of("gpt2-tiny", 4);
  double root = 0, units = 0, last = 0;
  for (const auto& l : p.layers) {
    double b = 0;
    for (const auto& q : l.params) (q.fsdp_unit == kFsdpRootUnit ? root : b) += static_cast<double>(q.bytes);
    if (b > 0) units += b, last = b;
  }
  ASSERT_GT(root, 0);
  ASSERT_GT(last, 0);
  SimOptions o;
  o.mode = ParallelMode::fsdp;
  const LinkModel free = free_link(load_preset("dgx-h100"));
  p.copy_bytes_per_s = 1e9;
  const SimPoint copied = simulate_point(p, free, 2, o);
  EXPECT_NEAR(copied.copy_s, (3 * units - last + 2 * root) / 1e9, 1e-12);
  EXPECT_NEAR(copied.step_s, p.compute_s() + copied.copy_s + p.optimizer_s / 2 + p.other_s, 1e-9);
  EXPECT_NEAR(copied.compute_s, p.compute_s() + copied.copy_s, 1e-12);
  EXPECT_EQ(simulate_point(p, free, 1, o).copy_s, 0);  // one rank: its shards are its parameters
  p.copy_bytes_per_s.reset();
  const SimPoint unknown = simulate_point(p, free, 2, o);
  EXPECT_EQ(unknown.copy_s, 0);
  EXPECT_NEAR(unknown.step_s, p.compute_s() + p.optimizer_s / 2 + p.other_s, 1e-9);
  const nlohmann::json j = simulate(p, free, {1, 2}, o).to_json();
  EXPECT_TRUE(j["points"][1]["copy_s"].is_null()) << j["points"][1].dump();
  // The profile carries its rate through its JSON, and an older one without it reads back
  // without one.
  p.copy_bytes_per_s = 2.5e9;
  nlohmann::json pj = p.to_json();
  EXPECT_EQ(StepProfile::from_json(reports::JsonView(pj, "profile")).copy_bytes_per_s, 2.5e9);
  pj.erase("copy_bytes_per_s");
  EXPECT_FALSE(StepProfile::from_json(reports::JsonView(pj, "profile")).copy_bytes_per_s);
}

// The simulated FSDP step issues the engine's collectives in the engine's order, over the
// units the model's wrap policy makes: GPT-2's blocks, with the root (the tied token
// embedding, the position table and the last norm) gathered once and reduce-scattered
// last; the MLP's every layer with parameters. Each moves the unit's bytes: an
// all-gather's input is one rank's chunk, a reduce-scatter's every rank's (padding aside).
TEST(Simulate, FsdpIssuesTheEnginesCollectivesInItsOrder) {
  for (const std::string name : {"gpt2-tiny", "mlp"}) {
    std::vector<CollectiveRecord> engine;
    test::run_ranks_ok(2, [&](int rank, comm::ProcessGroup& pg) {
      const Device dev = Device::cpu(rank);
      auto model = test::model_on(name, dev);
      FullyShardedDataParallel fsdp(*model, pg);
      auto data = test::data_for(*model, 4);
      Batch b = make_batch(*data, {2 * rank, 2 * rank + 1});
      LossResult l = compute_loss(model->spec().loss, fsdp.forward(b.x.to(dev)), b.target.to(dev), true);
      fsdp.backward(l.grad);
      if (rank == 0) engine = fsdp.collectives();
    });
    auto model = test::model_on(name, Device::cpu());
    StepProfile p = layer_skeleton(*model, 2);
    for (auto& l : p.layers) l.forward_s = 1e-3, l.backward_s = 2e-3;
    SimOptions o;
    o.mode = ParallelMode::fsdp;
    const SimPoint sim = simulate_point(p, load_preset("cpu-gloo-local"), 2, o);
    ASSERT_EQ(sim.collectives.size(), engine.size()) << name;
    for (size_t k = 0; k < engine.size(); ++k) {
      EXPECT_EQ(sim.collectives[k].kind, engine[k].kind) << name << ", collective " << k;
      EXPECT_EQ(sim.collectives[k].unit, engine[k].unit) << name << ", collective " << k;
      const double sent = static_cast<double>(engine[k].bytes) * (engine[k].kind == "all-gather" ? 2 : 1);
      EXPECT_NEAR(sim.collectives[k].bytes / sent, 1, 0.01) << name << ", " << engine[k].unit;
    }
    if (name == "gpt2-tiny") {
      EXPECT_EQ(engine.front().unit, kFsdpRootUnit);
      EXPECT_EQ(engine.back().unit, kFsdpRootUnit);
    }
  }
}

// Tensor parallelism: one rank is the one-device step; with a free link each cut layer
// takes 1/N of its time (the embedding, position table and final norm whole) and the
// optimizer steps 1/N of the cut parameters; a GPT-2 step makes 10 blocking all-reduces
// (2 layers) and one all-gather, each exposed; the MLP one all-reduce each way but the
// first layer's (it needs no input gradient).
TEST(Simulate, TensorParallelDividesCutLayersAndWaitsForEachAllReduce) {
  SimOptions o;
  o.mode = ParallelMode::tp;
  const LinkModel base = load_preset("dgx-h100");
  const LinkModel free = free_link(base);
  const StepProfile p = profile_of("gpt2-tiny", 4);
  EXPECT_NEAR(simulate_point(p, base, 1, o).step_s, p.step_s(), 1e-12);
  double whole = 0, cut = 0;
  for (const auto& l : p.layers)
    (l.name.rfind("transformer.h.", 0) == 0 || l.name == "lm_head" ? cut : whole) += l.forward_s + l.backward_s;
  const SimPoint ideal = simulate_point(p, free, 4, o);
  EXPECT_NEAR(ideal.compute_s, whole + cut / 4, 1e-12);
  EXPECT_LT(ideal.step_s, p.step_s());
  EXPECT_NEAR(ideal.exposed_comm_s, 0, 1e-12);
  // Every collective a fixed cost: 10 all-reduces of 2 (n-1) steps and one all-gather of n-1.
  LinkModel fixed = free;
  fixed.intra.alpha_s = 1e-3;
  const SimPoint r = simulate_point(p, fixed, 4, o);
  EXPECT_NEAR(r.comm_s, 10 * 2 * 3 * 1e-3 + 3 * 1e-3, 1e-9);
  EXPECT_NEAR(r.exposed_comm_s, r.comm_s, 1e-12);  // nothing overlaps them
  EXPECT_EQ(r.overlap, 0);
  EXPECT_NEAR(r.step_s, ideal.step_s + r.comm_s, 1e-9);
  // The batch is every rank's: throughput is batch over the step.
  EXPECT_NEAR(r.throughput, p.batch / r.step_s, 1e-9);
  const StepProfile m = profile_of("mlp", 64);
  EXPECT_NEAR(simulate_point(m, fixed, 2, o).comm_s, 1 * 2 * 1 * 1e-3, 1e-9);
}

TEST(Simulate, JitterWaitsForTheSlowestRank) {
  EXPECT_NEAR(expected_max_normal(2), 0.5642, 0.01);
  EXPECT_NEAR(expected_max_normal(10), 1.5388, 0.01);
  EXPECT_NEAR(expected_max_normal(1000), 3.2414, 0.02);
  const StepProfile p = profile_of("resnet50");
  const LinkModel l = load_preset("dgx1-v100");
  SimOptions o;
  o.jitter = 0.05;
  EXPECT_GT(simulate_point(p, l, 64, o).step_s, simulate_point(p, l, 64, {}).step_s);
}

// The slowest of N ranks, each drawing its step from the profiled run's steps: the median
// of the slowest is their 0.5^(1/N) quantile. One stall in a hundred steps does not move
// it (it moves the standard deviation tenfold); a spread out run does.
TEST(RankLag, IsTheQuantileTheSlowestOfNRanksReachesMedianly) {
  std::vector<double> steps(100, 0.010);
  steps[37] = 0.100;  // one stall
  const auto stalled = reports::rank_lags(steps);
  ASSERT_EQ(stalled.size(), 6u);  // 2 to 64: 128 ranks' quantile lies past 100 steps
  EXPECT_EQ(stalled.front().ranks, 2);
  EXPECT_EQ(stalled.back().ranks, 64);
  for (const auto& l : stalled) EXPECT_DOUBLE_EQ(l.relative, 0.0) << l.ranks;
  std::vector<double> spread;
  for (int i = 1; i <= 101; ++i) spread.push_back(0.010 * (1 + 0.001 * i));  // 1.001 .. 1.101
  const auto lags = reports::rank_lags(spread);
  // Median 1.051; at 2 ranks the 70.71st percentile: element 70.71 of 0..100, 1.07171.
  EXPECT_NEAR(lags[0].relative, 1.0717107 / 1.051 - 1, 1e-6);
  for (size_t i = 1; i < lags.size(); ++i) EXPECT_GT(lags[i].relative, lags[i - 1].relative);
  EXPECT_TRUE(reports::rank_lags({0.01, 0.02, 0.03}).empty());  // too few steps to say
}

TEST(RankLag, StretchesComputeSoTheStepGrowsByTheLag) {
  StepProfile p = profile_of("mlp", 64, 0.010);
  SimOptions o;
  o.rank_lag = {{2, 0.05}, {4, 0.08}};
  const double share = p.step_s() / p.compute_s();
  EXPECT_DOUBLE_EQ(rank_stretch(p, o, 1), 1.0);
  EXPECT_NEAR(rank_stretch(p, o, 2), 1 + 0.05 * share, 1e-12);
  EXPECT_NEAR(rank_stretch(p, o, 4), 1 + 0.08 * share, 1e-12);
  // Between measured counts, linear in log N.
  EXPECT_NEAR(rank_stretch(p, o, 3), 1 + (0.05 + std::log(1.5) / std::log(2.0) * 0.03) * share, 1e-12);
  // Past the last, as a normal distribution's median maximum grows.
  EXPECT_NEAR(median_max_normal(2), 0.5449, 1e-3);  // Phi^-1(0.7071)
  EXPECT_NEAR(median_max_normal(64), 2.2985, 1e-3);  // Phi^-1(0.98923)
  EXPECT_NEAR(rank_stretch(p, o, 64), 1 + 0.08 * median_max_normal(64) / median_max_normal(4) * share, 1e-12);
  // The measured lag replaces jitter; none at all is no wait.
  o.jitter = 0.5;
  EXPECT_NEAR(rank_stretch(p, o, 2), 1 + 0.05 * share, 1e-12);
  const LinkModel l = load_preset("cpu-gloo-local");
  SimOptions none, lagged;
  lagged.rank_lag = {{2, 0.05}};
  EXPECT_GT(simulate_point(p, l, 2, lagged).step_s, simulate_point(p, l, 2, none).step_s);
  EXPECT_DOUBLE_EQ(simulate_point(p, l, 1, lagged).step_s, simulate_point(p, l, 1, none).step_s);
}

// Ranks sharing a machine slow each other's compute: at 2 ranks or more the step's compute
// stretches by the measured crowding; one rank is the profile's step.
TEST(Simulate, CrowdingStretchesComputeFromTwoRanks) {
  const StepProfile p = profile_of("resnet50");
  const LinkModel l = load_preset("dgx1-v100");
  SimOptions crowded;
  crowded.crowding = 0.2;
  EXPECT_DOUBLE_EQ(simulate_point(p, l, 1, crowded).step_s, simulate_point(p, l, 1, {}).step_s);
  const SimPoint two = simulate_point(p, l, 2, crowded), plain = simulate_point(p, l, 2, {});
  EXPECT_GT(two.compute_s, plain.compute_s * 1.15);
  EXPECT_LT(simulate(p, l, {2}, crowded).points[0].efficiency, simulate(p, l, {2}, {}).points[0].efficiency);
}

// DDP on one rank (PyTorch's 1-GPU DDP row): the reducer's cost per gradient, nothing moved.
TEST(Simulate, OneRankDdpPaysTheReducerOnly) {
  const StepProfile p = profile_of("resnet50");
  LinkModel l = load_preset("dgx1-v100");
  l.reducer_per_gradient_s = 10e-6;
  SimOptions o;
  o.reducer_on_one_rank = true;
  size_t gradients = 0;
  for (const auto& layer : p.layers) gradients += layer.params.size();
  const SimPoint one = simulate_point(p, l, 1, o);
  EXPECT_NEAR(one.step_s, p.step_s() + 10e-6 * static_cast<double>(gradients), 1e-9);
  EXPECT_EQ(one.comm_s, 0);
  EXPECT_NEAR(simulate_point(p, l, 1, {}).step_s, p.step_s(), 1e-12);  // without: the plain step
}

TEST(Simulate, ContentionIsFittedBackFromAStep) {
  const StepProfile p = profile_of("resnet50");
  LinkModel l = load_preset("dgx1-v100");
  l.contention = 0.3;
  const double step = simulate_point(p, l, 4, {}).step_s;
  EXPECT_NEAR(fit_contention(p, l, 4, step, {}), 0.3, 1e-6);
  EXPECT_THROW(fit_contention(p, l, 4, p.step_s() * 0.5, {}), Error);
}

TEST(Simulate, PipelineBubbleAndDataParallelCosts) {
  // Equal layers: (p - 1) / (m + p - 1) of the slots are bubble.
  StepProfile p;
  p.model = "equal";
  p.batch = 8;
  for (int i = 0; i < 8; ++i) {
    LayerCost c;
    c.name = "l";
    c.name += std::to_string(i);
    c.forward_s = 0.001;
    c.backward_s = 0.002;
    c.output_bytes = 1024;
    c.params.push_back({c.name + ".weight", 4096, ""});
    p.layers.push_back(c);
  }
  const LinkModel l = load_preset("dgx1-v100");
  SimOptions o;
  o.mode = ParallelMode::pipeline;
  o.micro_batches = 4;
  const SimPoint mp = simulate_point(p, l, 4, o);
  EXPECT_NEAR(mp.bubble, 3.0 / 7.0, 1e-12);
  EXPECT_NEAR(mp.compute_s, 7 * (0.024 / 4) / 4, 1e-9);
  o.mode = ParallelMode::dp;
  const SimPoint dp = simulate_point(p, l, 4, o);
  o.mode = ParallelMode::ddp;
  const SimPoint ddp = simulate_point(p, l, 4, o);
  EXPECT_GT(dp.exposed_comm_s, 0);
  EXPECT_GE(dp.step_s, p.step_s());
  EXPECT_GT(ddp.step_s, 0);
}

}  // namespace
}  // namespace dpb::sim

namespace dpb::sim {
namespace {

TEST(Link, FitsNcclTestsJsonOutput) {
  // all_reduce_perf -J (nccl-tests' JSON, version 2), constructed from alpha 10 us and
  // busbw 100 GB/s over 8 GPUs in one process.
  const LinkModel l = fit_link({std::string(DPB_SOURCE_DIR) + "/tests/fuzz/corpus/collectives/nccl_tests_allreduce_8gpus.json"},
                               load_preset("dgx-h100"));
  ASSERT_EQ(l.fitted.count(8), 1u);
  EXPECT_NEAR(l.fitted.at(8).alpha_s, 10e-6, 1e-8);
  EXPECT_NEAR(l.fitted.at(8).bus_bandwidth / 100e9, 1, 1e-3);
  EXPECT_NE(l.source.find("fitted from"), std::string::npos);
  const std::string bad = testing::TempDir() + "/not_allreduce.json";
  std::ofstream(bad) << R"({"args": ["./all_gather_perf"], "config": {"nthreads": 1, "ngpus": 2}, "results": []})";
  try {
    fit_link({bad}, load_preset("dgx-h100"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("all_reduce_perf"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dpb::sim
