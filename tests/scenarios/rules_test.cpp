// Rules on crafted reports: the conditions around each threshold, and the cases where
// one problem must not be blamed on another.
#include <gtest/gtest.h>

#include <fstream>

#include "diagnostics/dpdoctor/doctor.h"
#include "reports/schema_check.h"

namespace dpb::doctor {
namespace {

// A minimal healthy dp report on two devices.
nlohmann::json base_report() {
  return {{"schema", "dpbench.report/1"},
          {"config",
           {{"mode", "dp"},
            {"model", "mlp"},
            {"devices", "cpu"},
            {"gpus_requested", 2},
            {"visible_devices", 64},
            {"batch_per_device", 32},
            {"global_batch", 64},
            {"base_batch", 256},
            {"batchnorm", false},
            {"sync_bn", false},
            {"lr_scale", "none"},
            {"lr_effective", 0.01},
            {"optimizer", {{"lr", 0.01}}}}},
          {"runs",
           {{{"world_size", 2},
             {"batch_per_device", 32},
             {"global_batch", 64},
             {"steps", 10},
             {"step_time_s", {{"median", 0.01}}},
             {"throughput_samples_per_s", 6400.0},
             {"data_wait_share", 0.05},
             {"devices",
              {{{"id", "cpu:0"}, {"busy_fraction", 0.8}, {"samples", 320}},
               {{"id", "cpu:1"}, {"busy_fraction", 0.75}, {"samples", 320}}}},
             {"dp",
              {{"forward", "scatter"},
               {"input", "tensor"},
               {"scatter_calls", 10},
               {"last_chunks", {32, 32}},
               {"primary_only_s", 0.001},
               {"primary_replica_s", 0.007}}}}}},
          {"findings", nlohmann::json::array()}};
}

// Every diagnosis the tests make is also checked against dpdoctor.findings/1.
std::vector<std::string> ids(const nlohmann::json& report) {
  static const nlohmann::json schema = [] {
    std::ifstream in(DPB_FINDINGS_SCHEMA);
    return nlohmann::json::parse(in);
  }();
  const auto d = diagnose(report);
  for (const auto& v : reports::schema_violations(schema, diagnosis_json(d))) ADD_FAILURE() << "schema: " << v;
  std::vector<std::string> out;
  for (const auto& f : d.findings) out.push_back(f.id);
  return out;
}

TEST(DoctorRules, HealthyReportIsHealthyAndSaysWhy) {
  const auto d = diagnose(base_report());
  EXPECT_TRUE(d.healthy);
  EXPECT_TRUE(d.findings.empty());
  EXPECT_EQ(diagnosis_json(d)["verdict"], "healthy");
  std::ostringstream text;
  print_diagnosis(d, text);
  EXPECT_NE(text.str().find("healthy: dp mlp on 2 device(s)"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("cpu:1 75% busy"), std::string::npos) << text.str();
}

TEST(DoctorRules, UnevenScatterNeedsAnUnevenSplit) {
  auto r = base_report();
  r["runs"][0]["dp"]["last_chunks"] = {30, 26};  // 26 >= 0.8 x 30: even enough
  EXPECT_TRUE(ids(r).empty());
  r["runs"][0]["dp"]["last_chunks"] = {30, 20};
  EXPECT_EQ(ids(r), std::vector<std::string>{"uneven-scatter"});
}

TEST(DoctorRules, BypassNeedsIdleReplicasNotJustZeroScatterCalls) {
  auto r = base_report();
  r["runs"][0]["dp"]["scatter_calls"] = 0;  // the replicated-input path: replicas did work
  r["runs"][0]["devices"][1]["samples"] = 640;
  r["runs"][0]["devices"][0]["samples"] = 640;
  EXPECT_EQ(ids(r), std::vector<std::string>{"non-tensor-input-replicated"});
  r["runs"][0]["devices"][1]["samples"] = 0;
  r["runs"][0]["devices"][0]["samples"] = 640;
  r["runs"][0]["devices"][1]["busy_fraction"] = 0.0;
  EXPECT_EQ(ids(r), std::vector<std::string>{"forward-bypasses-scatter"});
}

TEST(DoctorRules, InputBoundThreshold) {
  auto r = base_report();
  r["runs"][0]["data_wait_share"] = 0.25;
  EXPECT_TRUE(ids(r).empty());
  r["runs"][0]["data_wait_share"] = 0.45;
  EXPECT_EQ(ids(r), std::vector<std::string>{"input-bound"});
}

nlohmann::json ddp_report(double compute0, double compute1, double exposed) {
  auto r = base_report();
  r["config"]["mode"] = "ddp";
  auto& run = r["runs"][0];
  run.erase("dp");
  run["ranks"] = {{{"rank", 0}, {"host", "n1"}, {"device", "cpu:0 (cores 0)"}, {"hardware", {"core 0"}},
                   {"compute_s", compute0}, {"comm_s", 0.002}, {"step_time_median_s", 0.01}},
                  {{"rank", 1}, {"host", "n1"}, {"device", "cpu:1 (cores 1)"}, {"hardware", {"core 1"}},
                   {"compute_s", compute1}, {"comm_s", 0.002}, {"step_time_median_s", 0.01}}};
  run["overlap"] = {{"ratio", 0.5}, {"exposed_comm_s", 0.001}, {"exposed_share", exposed}};
  run["data"] = {{"compared_steps", 8}, {"identical_steps", 0}};
  return r;
}

TEST(DoctorRules, AStragglerIsNotBlamedOnTheNetwork) {
  EXPECT_TRUE(ids(ddp_report(0.006, 0.0065, 0.1)).empty());
  EXPECT_EQ(ids(ddp_report(0.006, 0.0065, 0.5)), std::vector<std::string>{"communication-bound"});
  // Rank 1 computes 3x longer: the exposed wait is the straggler's doing.
  EXPECT_EQ(ids(ddp_report(0.003, 0.009, 0.6)), std::vector<std::string>{"straggler-rank"});
}

TEST(DoctorRules, SharedDevicesAndSharedData) {
  auto r = ddp_report(0.006, 0.006, 0.1);
  r["runs"][0]["ranks"][1]["hardware"] = {"core 0"};
  EXPECT_EQ(ids(r), std::vector<std::string>{"ranks-share-device"});
  r["runs"][0]["ranks"][1]["host"] = "n2";  // the same GPU index or core on another node is another device
  EXPECT_TRUE(ids(r).empty());
  r["runs"][0]["ranks"][1]["host"] = "n1";
  r["runs"][0]["ranks"][1]["hardware"] = {"core 1", "core 2"};  // overlapping core sets share a core
  r["runs"][0]["ranks"][0]["hardware"] = {"core 0", "core 1"};
  EXPECT_EQ(ids(r), std::vector<std::string>{"ranks-share-device"});
  r = ddp_report(0.006, 0.006, 0.1);
  r["runs"][0]["data"]["identical_steps"] = 8;
  EXPECT_EQ(ids(r), std::vector<std::string>{"missing-distributed-sampler"});
  r["runs"][0]["data"]["identical_steps"] = 3;  // a coincidence or two is not a missing sampler
  EXPECT_TRUE(ids(r).empty());
}

TEST(DoctorRules, LearningRateAdvisoryOnlyWhenNotScaled) {
  auto r = ddp_report(0.006, 0.006, 0.1);
  r["runs"][0]["global_batch"] = 1024;
  auto d = diagnose(r);
  ASSERT_EQ(d.findings.size(), 1u);
  EXPECT_EQ(d.findings[0].id, "lr-not-scaled");
  EXPECT_EQ(d.findings[0].severity, Severity::info);
  EXPECT_TRUE(d.healthy);  // advisory
  r["config"]["lr_effective"] = 0.04;
  EXPECT_TRUE(ids(r).empty());
}

TEST(DoctorRules, SmallBatchBatchNormCountsWhatOneBatchNormSees) {
  auto r = ddp_report(0.006, 0.006, 0.1);
  r["config"]["batchnorm"] = true;
  r["runs"][0]["batch_per_device"] = 4;
  EXPECT_EQ(ids(r), std::vector<std::string>{"small-batch-batchnorm"});
  r["config"]["sync_bn"] = true;  // 2 ranks x 4 = 8: still small
  EXPECT_EQ(ids(r), std::vector<std::string>{"small-batch-batchnorm"});
  r["runs"][0]["batch_per_device"] = 8;  // 16 across ranks
  EXPECT_TRUE(ids(r).empty());
}

nlohmann::json mp_report(std::vector<double> idle, std::string split_by, std::vector<int64_t> micro) {
  auto r = base_report();
  r["config"]["mode"] = "mp";
  auto& run = r["runs"][0];
  run.erase("dp");
  run["stages"] = nlohmann::json::array();
  for (size_t s = 0; s < idle.size(); ++s)
    run["stages"].push_back({{"stage", s}, {"units", {"fc" + std::to_string(s)}}, {"idle_share", idle[s]}});
  nlohmann::json costs = split_by == "measured time"
                             ? nlohmann::json{{{"unit", "fc0"}, {"seconds", 0.009}}, {{"unit", "fc1"}, {"seconds", 0.001}}}
                             : nlohmann::json(nullptr);
  // Two stages, back to back (naive) or overlapping (pipelined).
  nlohmann::json events = micro.size() == 1
                              ? nlohmann::json{{{"stage", 0}, {"begin_s", 0.0}, {"end_s", 0.004}},
                                               {{"stage", 1}, {"begin_s", 0.004}, {"end_s", 0.008}}}
                              : nlohmann::json{{{"stage", 0}, {"begin_s", 0.0}, {"end_s", 0.006}},
                                               {{"stage", 1}, {"begin_s", 0.002}, {"end_s", 0.008}}};
  run["pipeline"] = {{"schedule", micro.size() == 1 ? "naive" : "gpipe"},
                     {"micro_batches", micro.size()},
                     {"micro_batch_sizes", micro},
                     {"split_by", split_by},
                     {"unit_costs", costs},
                     {"bubble", {{"measured", 0.3}, {"theory", 0.2}}},
                     {"last_step_events", events}};
  return r;
}

TEST(DoctorRules, PipelineRules) {
  EXPECT_TRUE(ids(mp_report({0.2, 0.25}, "measured time", {16, 16, 16, 16})).empty());
  EXPECT_EQ(ids(mp_report({0.5, 0.5}, "measured time", {64})), std::vector<std::string>{"naive-model-parallel"});
  EXPECT_EQ(ids(mp_report({0.1, 0.7}, "--split", {16, 16, 16, 16})), std::vector<std::string>{"unbalanced-pipeline"});
  // The measured split is already the best: an inherent imbalance is information.
  const auto d = diagnose(mp_report({0.1, 0.7}, "measured time", {16, 16, 16, 16}));
  ASSERT_EQ(d.findings.size(), 1u);
  EXPECT_EQ(d.findings[0].severity, Severity::info);
  EXPECT_NE(d.findings[0].explanation.find("fc0"), std::string::npos);
}

TEST(DoctorRules, FewerDevicesThanRequested) {
  auto r = base_report();
  r["config"]["gpus_requested"] = 4;
  r["config"]["visible_devices"] = 2;
  EXPECT_EQ(ids(r), std::vector<std::string>{"fewer-devices-than-requested"});
}

TEST(DoctorRules, NotAReportIsAnError) { EXPECT_THROW(diagnose(nlohmann::json{{"schema", "other"}}), std::exception); }

}  // namespace
}  // namespace dpb::doctor
