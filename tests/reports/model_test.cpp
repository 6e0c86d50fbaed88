// The typed report model: every document survives its own JSON, and a document that
// does not fit is one clear error naming the field, what was expected and what was
// found (untrusted text escaped), never a crash or a silent default.
#include "reports/model.h"

#include <gtest/gtest.h>

#include "engine/core/error.h"
#include "reports/collectives_report.h"
#include "reports/json_view.h"
#include "reports/schemas.h"
#include "tests/support/schemas.h"

namespace dpb::reports {
namespace {

RunReport ddp_report() {
  RunReport r;
  r.tool = this_tool();
  r.command = {"dpbench", "--mode=ddp"};
  r.env = collect_environment();
  r.config.mode = ParallelMode::ddp;
  r.config.model = "lenet";
  r.config.dataset = "synthetic";
  r.config.device_list = {"cpu@rank0", "cpu@rank1"};
  r.config.batch_per_device = 8;
  r.config.global_batch = 16;
  r.config.world_size = 2;
  r.config.gpus = {2};
  r.config.backend = "gloo";
  r.config.bucket_mb = 25;
  r.config.lr_effective = 0.01;
  RunMetrics run;
  run.world_size = 2;
  run.batch_per_device = 8;
  run.global_batch = 16;
  run.steps = 5;
  run.throughput_samples_per_s = 1000;
  run.step_time_s.median = 0.016;
  run.step_time_s.count = 4;
  run.data_wait_share = 0.1;
  run.devices = {{"cpu@rank0", 40, 0.9, 1000, 4096.0, 3.0e9, 1.5e6}, {"cpu@rank1", 40, std::nullopt, 1000, {}, {}, {}}};
  RankStats rank;
  rank.host = "h";
  rank.device = "cpu:0 (cores 0)";
  rank.hardware = {"core 0"};
  rank.compute_s = 0.01;
  run.ranks = std::vector<RankStats>{rank};
  run.buckets = std::vector<BucketStats>{{0, 1024, 3, 0.1, 0.2, std::nullopt, std::nullopt, 1.5}};
  run.overlap = OverlapStats{0.5, 0.001, 0.06, OverlapAB{0.016, 0.014, 0.001, 0.001, 0.0625}};
  run.data = SameData{4, 0};
  trace::Breakdown b;
  b.rank = 0;
  b.device = "cpu:0";
  b.window_s = 0.08;
  b.idle_share = 0.1;
  b.compute_share = 0.8;
  run.breakdown = std::vector<trace::Breakdown>{b};
  run.loss_per_step = {2.3, std::nullopt, 2.1};
  run.tokens_per_sample = 64;
  run.throughput_tokens_per_s = 64000;
  run.flops_per_token = 1e6;
  run.attention = AttentionStats{12, 4, std::string("bf16 only")};
  run.timeline = TimelineExcerpt{trace::TimelineSource::cuda_events, 0.02, 4,
                                 {{0, "main", "forward", "compute", 0.0, 0.01}},
                                 "CUPTI could not subscribe: another profiler holds it; CUDA timing events instead",
                                 3, 2e-6};
  r.runs.push_back(run);
  Finding f;
  f.id = "input-bound";
  f.severity = Severity::warning;
  f.title = "t";
  f.evidence = {{"data_wait_share", 0.4}};
  r.findings.push_back(f);
  return r;
}

TEST(ReportModel, EveryFieldSurvivesItsOwnJson) {
  const RunReport r = ddp_report();
  const auto j = r.to_json();
  test::expect_fits(report_schema(), j, "the report");
  const RunReport back = RunReport::from_json(j, "report");
  EXPECT_EQ(back.to_json(), j);
  EXPECT_EQ(back.runs[0].ranks->at(0).hardware, std::vector<std::string>{"core 0"});
  EXPECT_FALSE(back.runs[0].devices[1].busy_fraction.has_value());  // null stays unmeasured
  EXPECT_FALSE(back.runs[0].loss_per_step[1].has_value());
  EXPECT_EQ(back.runs[0].timeline->source, trace::TimelineSource::cuda_events);
  EXPECT_EQ(back.runs[0].timeline->note, r.runs[0].timeline->note);
  EXPECT_EQ(back.runs[0].timeline->dropped_records, 3);
  EXPECT_DOUBLE_EQ(back.runs[0].timeline->clock_residual_s.value_or(0), 2e-6);
  EXPECT_EQ(back.runs[0].attention->fused_calls, 12);
  EXPECT_EQ(back.runs[0].attention->unfused_why, "bf16 only");
}

// The error `mutate` causes, or "" when the report reads.
std::string error_of(const std::function<void(nlohmann::json&)>& mutate) {
  auto j = ddp_report().to_json();
  mutate(j);
  try {
    RunReport::from_json(j, "report 'x.json'");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ReportModel, AValueThatDoesNotFitNamesTheField) {
  std::string e = error_of([](auto& j) { j["runs"][0]["ranks"][0]["rank"] = -1e308; });
  EXPECT_NE(e.find("report 'x.json'"), std::string::npos) << e;
  EXPECT_NE(e.find("runs/0/ranks/0/rank"), std::string::npos) << e;  // the schema's pointer
  e = error_of([](auto& j) { j["runs"][0]["ranks"][0]["rank"] = 1 << 30; });
  EXPECT_NE(e.find("runs[0].ranks[0].rank: expected an integer in [0, "), std::string::npos) << e;
  e = error_of([](auto& j) { j["runs"][0]["buckets"][0]["bytes"] = "many"; });
  EXPECT_NE(e.find("runs[0].buckets[0].bytes: expected an integer"), std::string::npos) << e;
  EXPECT_NE(e.find("\"many\""), std::string::npos) << e;
  e = error_of([](auto& j) { j["runs"][0].erase("step_time_s"); });
  EXPECT_NE(e.find("step_time_s"), std::string::npos) << e;
  e = error_of([](auto& j) { j["config"]["mode"] = "zero3"; });
  EXPECT_NE(e.find("mode"), std::string::npos) << e;
  e = error_of([](auto& j) { j["runs"][0]["timeline"]["source"] = "guess"; });
  EXPECT_NE(e.find("runs/0/timeline/source"), std::string::npos) << e;
  EXPECT_NE(e.find("cuda-events"), std::string::npos) << e;
  e = error_of([](auto& j) { j["runs"] = nlohmann::json::array(); });
  EXPECT_NE(e.find("runs"), std::string::npos) << e;
  EXPECT_EQ(error_of([](auto&) {}), "");
}

TEST(ReportModel, UntrustedTextIsEscapedInMessages) {
  const std::string e = error_of([](auto& j) { j["config"]["mode"] = std::string("\x1b[31mred\x1b[0m"); });
  EXPECT_EQ(e.find('\x1b'), std::string::npos) << e;
  EXPECT_NE(e.find("\\x1b[31mred"), std::string::npos) << e;
}

TEST(ReportModel, NotJsonTooLargeOrTooDeepAreErrors) {
  EXPECT_THROW(parse_untrusted("{\"schema\": ", "report", 1 << 20), Error);
  EXPECT_THROW(parse_untrusted(std::string(100, ' '), "report", 10), Error);
  EXPECT_THROW(parse_untrusted(std::string(1000, '[') + std::string(1000, ']'), "report", 1 << 20), Error);
  EXPECT_NO_THROW(parse_untrusted("[[[1]]]", "report", 1 << 20));
  EXPECT_THROW(RunReport::read("/nonexistent/r.json"), Error);
  try {
    RunReport::from_json(nlohmann::json{{"schema", "other"}}, "report 'y.json'");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not a dpbench report"), std::string::npos) << e.what();
  }
}

TEST(ReportModel, CollectivesReportsRoundTripAndAreChecked) {
  CollectivesReport c;
  c.tool = this_tool();
  c.env = collect_environment();
  c.config.world_size = 2;
  c.config.ops = {"allreduce"};
  c.results = {{"allreduce", 1024, 256, "float32", 50.0, 0.02, 0.02, 0, 0.25, 31.0}};
  c.config.load = "compute";
  c.config.isolated = 5;
  c.config.isolated_pause_us = 2000;
  const auto j = c.to_json();
  test::expect_fits(collectives_schema(), j, "the collectives report");
  EXPECT_EQ(CollectivesReport::from_json(j, "c").to_json(), j);
  auto bad = j;
  bad["results"][0]["op"] = "alltoall";
  EXPECT_THROW(CollectivesReport::from_json(bad, "c"), Error);
  bad = j;
  bad["results"][0]["bytes"] = 0;
  EXPECT_THROW(CollectivesReport::from_json(bad, "c"), Error);
}

}  // namespace
}  // namespace dpb::reports
