// dpdoctor's scenario suite: dpbench flags that reproduce each problem, and healthy runs
// in every mode, all diagnosed from what they measured. Every problem scenario must get
// its rule (and only the findings listed as its company); no healthy run may get an
// error or a warning; and two undisturbed runs of a scenario give the same errors and
// warnings, on this noisy 2-core machine. Together: the confusion matrix of rules
// against scenarios.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "reports/model.h"
#include "reports/render_html.h"
#include "reports/schemas.h"
#include "tests/support/process.h"
#include "tests/support/schemas.h"

namespace {

struct Scenario {
  std::string name;
  std::string flags;
  std::string rule;                 // must fire ("" for a healthy run)
  std::set<std::string> company;    // may fire alongside (other consequences of the same setup)
};

std::ostream& operator<<(std::ostream& os, const Scenario& s) { return os << s.name << ": " << s.flags; }

const std::string kCommon = " --threads=1 --steps=8 --warmup=2";

std::vector<Scenario> scenarios() {
  return {
      // DataParallel
      {"batch_smaller_than_devices", "--mode=dp --gpus=4 --model=mlp --batch=2", "batch-smaller-than-devices",
       {"primary-device-hotspot"}},
      {"batch_not_divisible", "--mode=dp --gpus=4 --model=mlp --batch=10", "uneven-scatter", {"primary-device-hotspot"}},
      {"forward_bypasses_scatter", "--mode=dp --gpus=2 --model=lenet --batch=64 --dp-forward=bypass",
       "forward-bypasses-scatter", {}},
      {"list_input_replicated", "--mode=dp --gpus=2 --model=lenet --batch=64 --dp-input=list",
       "non-tensor-input-replicated", {"input-bound"}},
      {"more_devices_than_exist", "--mode=dp --gpus=4 --visible-devices=2 --model=lenet --batch=128 --workers=1",
       "fewer-devices-than-requested", {}},
      {"primary_hotspot", "--mode=dp --gpus=2 --model=widemlp --batch=8 --steps=4", "primary-device-hotspot", {}},
      // DistributedDataParallel
      {"ranks_on_one_device", "--mode=ddp --gpus=2 --model=lenet --batch=256 --base-batch=512 --device-map=same",
       "ranks-share-device", {"exposed-communication", "straggler-rank"}},
      {"no_distributed_sampler", "--mode=ddp --gpus=2 --model=lenet --batch=1024 --base-batch=2048 --sampler=none",
       "missing-distributed-sampler", {}},
      // One sample per rank: with the buckets reduced in place in shared memory, the MLP's
      // 2.7 MB all-reduce is still about a third of the step it cannot hide behind. The
      // waiting rank sleeps at once: with the default 20 ms of polling, one rank's forward
      // and backward took 0.38-0.45 ms a step against the other's 0.26-0.31 in about half
      // the runs here (each alone 0.26), a straggler the doctor names, which then takes
      // part of the exposed communication as its own.
      {"tiny_buckets_small_batch",
       "--mode=ddp --gpus=2 --model=mlp --batch=1 --bucket-mb=0.01 --steps=30 --warmup=5 --collective-spin-ms=0",
       "exposed-communication", {}},
      {"straggler", "--mode=ddp --gpus=2 --model=lenet --batch=64 --straggler=1:30", "straggler-rank", {}},
      // A small model's all-reduce over loopback TCP, its waiting rank asleep: exposed after
      // backward, it is a third to a half of the step at 8 samples per rank (at 16, a tenth
      // to a third: too close to the rule's fifth on a busy machine).
      {"small_model_slow_transport", "--mode=ddp --gpus=2 --model=lenet --batch=8 --steps=60 --warmup=5 "
                                     "--host-allreduce=tcp --collective-spin-ms=0",
       "exposed-communication", {}},
      // A rank about 40% slower (80 ms on ~200 ms of compute a step), as the healthy run
      // below: missed by a twice-as-slow threshold. (20% is within this machine's noise: two
      // ranks computing at once slow each other by up to a quarter, step by step; the rule's
      // 15% threshold is tested on stable device times in timeline_rules_test.)
      {"straggler_40_percent", "--mode=ddp --gpus=2 --model=lenet --batch=1024 --base-batch=2048 --straggler=1:80",
       "straggler-rank", {}},
      // 1024 per rank, as healthy_ddp: enough compute per step that the all-reduce stays a
      // few percent of it even when the machine is busy; 8x the base batch of 256.
      {"lr_not_scaled", "--mode=ddp --gpus=2 --model=lenet --batch=1024 --lr-scale=none", "lr-not-scaled", {}},
      {"batchnorm_batch_2", "--mode=ddp --gpus=2 --model=resnet18 --batch=2 --steps=4", "small-batch-batchnorm",
       {"exposed-communication"}},
      // input pipeline
      {"slow_loader", "--mode=single --model=lenet --batch=64 --workers=0 --loader-delay-ms=20", "input-bound", {}},
      // model parallel
      {"naive_model_parallel", "--mode=mp --gpus=2 --model=mlp --batch=64 --schedule=naive --workers=1",
       "naive-model-parallel", {}},
      {"unbalanced_split", "--mode=mp --gpus=2 --model=mlp --batch=64 --split=5 --schedule=1f1b --micro-batches=4 "
                           "--workers=1",
       "unbalanced-pipeline", {}},
      // Two micro-batches through two stages: a third of every step fills and drains the
      // pipeline ((p-1)/(m+p-1)); the stages idle 32-43% here. The MLP cuts after fc1 into
      // stages of the same work: fc1 (784 x 512) skips its input gradient, two products a
      // pass; fc2 (512 x 512) has three, and fc3 is 10 wide. widemlp's two equal linears
      // do not balance so (fc2 took 59% of the step on an AVX-512 Xeon, 1.4x the first
      // stage), nor did ResNet-18 (its cut by measured time left the stages 1.13-1.37x
      // apart on a 2-vCPU EPYC), both at and past unbalanced-pipeline's 1.3x.
      {"pipeline_bubble", "--mode=mp --gpus=2 --model=mlp --batch=2048 --schedule=gpipe --micro-batches=2 "
                          "--workers=1 --steps=4 --warmup=1",
       "pipeline-bubble", {}},
      // fully sharded data parallel: prefetch off, every all-gather waited for in full; four
      // ranks on two cores (the ranks share cores: said as the error it is) gathering more
      // than each keeps sharded
      {"fsdp_prefetch_off", "--mode=fsdp --gpus=2 --model=mlp --batch=64 --fsdp-prefetch=0 --steps=30 --warmup=5",
       "exposed-allgather", {}},
      {"fsdp_unit_too_large", "--mode=fsdp --gpus=4 --model=gpt2-tiny --data=synthetic --seq=64 --batch=1 --steps=4",
       "fsdp-unit-too-large", {"ranks-share-device", "exposed-allgather"}},
      // Tensor parallelism's all-reduces over Gloo's loopback TCP instead of shared memory.
      {"tp_slow_link",
       "--mode=tp --gpus=2 --model=gpt2-tiny --data=synthetic --batch=8 --host-allreduce=tcp --steps=20 --warmup=3",
       "tp-across-slow-link", {}},
      // healthy, every mode
      {"healthy_single", "--mode=single --model=mlp --batch=128 --workers=1", "", {}},
      // Enough compute per replica that DataParallel's serial work on the primary stays small.
      {"healthy_dp", "--mode=dp --gpus=2 --model=resnet18 --batch=32 --workers=1 --steps=4 --warmup=1", "", {}},
      {"healthy_ddp", "--mode=ddp --gpus=2 --model=lenet --batch=1024 --base-batch=2048", "", {}},
      // The main job's sweep point (scripts/run.sh): with the all-reduce through shared
      // memory and a polling wait, a small model's DDP keeps its devices busy.
      {"small_model_ddp", "--mode=ddp --gpus=2 --model=lenet --batch=64 --steps=60 --warmup=5", "", {}},
      {"healthy_ddp_syncbn", "--mode=ddp --gpus=2 --model=resnet18 --batch=8 --sync-bn --steps=3", "", {}},
      // Stages of equal work (the MLP cut after fc1, as in pipeline_bubble) and enough
      // micro-batches that every stage idles well under a quarter of the step: 10-19% here
      // (the 8% bubble of theory and the handoffs). ResNet-18 at 12 micro-batches of 16,
      // cut by measured time, left its second stage idle 30% on a 2-vCPU EPYC, 1.37x the
      // first: its layers measured alone mispredict them run side by side there.
      {"healthy_mp", "--mode=mp --gpus=2 --model=mlp --batch=3072 --schedule=1f1b --micro-batches=12 --workers=1 "
                     "--steps=4 --warmup=1",
       "", {}},
      {"healthy_fsdp", "--mode=fsdp --gpus=2 --model=gpt2-tiny --data=synthetic --batch=4 --steps=20 --warmup=3", "",
       {}},
      // Wide layers: each rank's half of 100 M multiply-adds a sample against 20 KB of
      // activations to all-reduce.
      // Twelve steps: over two measured steps rank 0 spent 44-65% of its window waiting in
      // its first all-reduces for rank 1 to start, which the budget rightly counts as lost.
      {"healthy_tp", "--mode=tp --gpus=2 --model=widemlp --batch=4 --steps=12 --warmup=3", "", {}},
  };
}

using dpb::test::slurp;

struct Verdict {
  int code = -1;
  nlohmann::json doc;
  std::string err;
};

// dpdoctor -- FLAGS: the probe path users take.
Verdict diagnose(const std::string& flags, int attempt) {
  const std::string base = std::filesystem::temp_directory_path() /
                           ("dpb_scn_" + std::to_string(::getpid()) + "_" + std::to_string(attempt));
  // The common settings, unless the scenario sets its own.
  std::string common;
  for (const char* opt : {"--threads=1", "--steps=8", "--warmup=2"}) {
    const std::string name = std::string(opt).substr(0, std::string(opt).find('='));
    if (flags.find(name) == std::string::npos) common += std::string(" ") + opt;
  }
  const std::string cmd = std::string(DPDOCTOR_BIN) + " --json=" + base + ".json -- " + flags + common + " >" + base +
                          ".out 2>" + base + ".err";
  const int status = std::system(cmd.c_str());
  Verdict v;
  v.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  v.err = slurp(base + ".err");
  const std::string text = slurp(base + ".json");
  if (!text.empty()) v.doc = nlohmann::json::parse(text);
  for (const char* ext : {".json", ".out", ".err"}) std::remove((base + ext).c_str());
  return v;
}

std::set<std::string> serious(const nlohmann::json& doc) {
  std::set<std::string> ids;
  for (const auto& f : doc["findings"])
    if (f["severity"] != "info") ids.insert(f["id"].get<std::string>());
  return ids;
}

class DoctorScenario : public ::testing::TestWithParam<Scenario> {};

// Findings that rest on timing alone. The scenarios run one at a time (RUN_SERIAL), but on
// this shared 2-core VM a run now and then really has a slow core for its whole length (a
// straggler the doctor rightly names) or a stall that leaves a stage idle or a rank
// waiting in its all-reduces (a healthy tensor-parallel run once waited 39% of its step
// for 80 kB); such a run is measured again, after a pause that grows with each attempt
// (one slow spell once covered five back-to-back runs of 0.3 s each; on a CI runner one
// core ran 22% slower through five runs in 19 s), rather than counted, while any other
// unexpected finding fails at once.
// unbalanced-pipeline too: where the split is by measured time, both the cut and the
// stages' busy shares rest on timing (ResNet-18's two stages, cut so, came out 1.13-1.37x
// apart on one machine from run to run). primary-device-hotspot too: its warning where the
// replicas idle a quarter of the window and DataParallel's serial work is half of that
// rests on the devices' busy shares (LeNet b128 on 2 of 4 requested devices, beside
// another test: the replica 71% busy, the host's serial work 11% and the primary's 3% of a
// 5.2 ms step, just past both thresholds; alone the replica idles under a quarter).
const std::set<std::string> kTiming{"straggler-rank",      "exposed-communication",  "exposed-allgather",
                                    "unexplained-idle",    "pipeline-bubble",        "tp-across-slow-link",
                                    "unbalanced-pipeline", "primary-device-hotspot"};

TEST_P(DoctorScenario, GetsItsRuleAndNoFalseAlarms) {
  const Scenario& s = GetParam();
  std::vector<std::set<std::string>> clean;  // the serious findings of each undisturbed run
  constexpr int kAttempts = 8;  // disturbed runs wait 2, 4, ... 14 s before the next: 56 s at most
  for (int attempt = 0; attempt < kAttempts && clean.size() < 2; ++attempt) {
    if (attempt > static_cast<int>(clean.size())) std::this_thread::sleep_for(std::chrono::seconds(2 * attempt));
    const Verdict v = diagnose(s.flags, attempt);
    ASSERT_FALSE(v.doc.is_null()) << "no findings written: " << v.err;
    ASSERT_EQ(v.doc["schema"], "dpdoctor.findings/1");
    dpb::test::expect_fits(dpb::reports::findings_schema(), v.doc, "dpdoctor --json");
    std::set<std::string> all;
    for (const auto& f : v.doc["findings"]) {
      all.insert(f["id"].get<std::string>());
      // Every finding carries its evidence, why and fix.
      EXPECT_FALSE(f["evidence"].empty()) << f;
      EXPECT_FALSE(f["explanation"].get<std::string>().empty()) << f;
      EXPECT_FALSE(f["fix"].get<std::string>().empty()) << f;
    }
    const auto bad = serious(v.doc);
    bool has_error = false;
    for (const auto& f : v.doc["findings"]) has_error = has_error || f["severity"] == "error";
    EXPECT_EQ(v.code, has_error ? 1 : 0) << v.err;
    bool disturbed = false;
    for (const auto& id : bad) {
      if (id == s.rule || s.company.count(id)) continue;
      ASSERT_TRUE(kTiming.count(id)) << "unexpected " << id << ": " << v.doc.dump(2);
      disturbed = true;
    }
    // A timing rule counts where it fires as a warning: said only as advice (its share of
    // the step fell below the warning's threshold on a busy machine), the run is disturbed.
    const bool fired = kTiming.count(s.rule) ? bad.count(s.rule) > 0 : all.count(s.rule) > 0;
    if (!s.rule.empty() && !fired) {
      ASSERT_TRUE(kTiming.count(s.rule)) << s.rule << " did not fire: " << v.doc.dump(2);
      disturbed = true;  // a timing rule may miss in a disturbed run too
    }
    if (disturbed) {
      std::cerr << "scenario " << s.name << ": run " << attempt << " disturbed, measuring again: " << v.doc.dump() << "\n";
      continue;
    }
    if (s.rule.empty()) {
      EXPECT_EQ(v.doc["verdict"], "healthy") << v.doc.dump(2);
    }
    // A companion that rests on timing (exposed communication beside a tiny batch) may come
    // and go between runs; the rest must be the same.
    auto compared = bad;
    for (const auto& id : s.company)
      if (kTiming.count(id)) compared.erase(id);
    clean.push_back(compared);
  }
  ASSERT_EQ(clean.size(), 2u) << "fewer than two undisturbed runs in " << kAttempts;
  EXPECT_EQ(clean[0], clean[1]) << "findings changed between two runs of the same scenario";
}

INSTANTIATE_TEST_SUITE_P(Scenarios, DoctorScenario, ::testing::ValuesIn(scenarios()),
                         [](const auto& info) { return info.param.name; });

// The other entry points: a report file, and dpbench --doctor.
TEST(Dpdoctor, DiagnosesAReportAndDpbenchAppendsFindings) {
  const std::string json = std::filesystem::temp_directory_path() / ("dpb_doc_" + std::to_string(::getpid()) + ".json");
  const std::string run = std::string(DPBENCH_BIN) + " --mode=dp --gpus=2 --model=lenet --batch=64 --dp-forward=bypass" +
                          kCommon + " --progress=none --doctor --json=" + json + " >/dev/null 2>&1";
  ASSERT_EQ(std::system(run.c_str()), 0);
  const auto rep = nlohmann::json::parse(slurp(json));
  dpb::test::expect_fits(dpb::reports::report_schema(), rep, "the report");
  ASSERT_FALSE(rep["findings"].empty());
  EXPECT_EQ(rep["findings"][0]["id"], "forward-bypasses-scatter");
  // The whole diagnosis travels with the report, and its page shows it.
  ASSERT_TRUE(rep.contains("diagnosis"));
  EXPECT_EQ(rep["diagnosis"]["primary"], "forward-bypasses-scatter");
  const std::string page = dpb::reports::render_html(dpb::reports::RunReport::read(json));
  EXPECT_NE(page.find("dpdoctor: 1 error(s)"), std::string::npos);
  EXPECT_NE(page.find("mainly <code>forward-bypasses-scatter</code>"), std::string::npos);
  EXPECT_NE(page.find("<th>unexplained</th>"), std::string::npos);
  const std::string out = json + ".txt";
  const int status = std::system((std::string(DPDOCTOR_BIN) + " " + json + " >" + out).c_str());
  EXPECT_EQ(WEXITSTATUS(status), 1);
  const std::string text = slurp(out);
  EXPECT_NE(text.find("error[forward-bypasses-scatter]"), std::string::npos) << text;
  EXPECT_NE(text.find("fix:"), std::string::npos) << text;
  // A headline and a fix per finding; the evidence and why with --verbose.
  EXPECT_EQ(text.find("evidence:"), std::string::npos) << text;
  std::system((std::string(DPDOCTOR_BIN) + " --verbose " + json + " >" + out).c_str());
  const std::string verbose = slurp(out);
  EXPECT_NE(verbose.find("evidence:"), std::string::npos) << verbose;
  EXPECT_NE(verbose.find("why:"), std::string::npos) << verbose;
  // Not a report: a clear error, exit 2.
  std::ofstream(out) << "{\"hello\": 1}";
  EXPECT_EQ(WEXITSTATUS(std::system((std::string(DPDOCTOR_BIN) + " " + out + " >/dev/null 2>&1").c_str())), 2);
  std::remove(json.c_str());
  std::remove(out.c_str());
}

// dpdoctor --torch-trace: a PyTorch profiler trace of a model cut over two GPUs that
// take turns; the findings as JSON, the exit code; a trace that is not one is exit 2.
TEST(Dpdoctor, DiagnosesAPyTorchProfilerTrace) {
  const std::string base = std::filesystem::temp_directory_path() / ("dpb_kineto_cli_" + std::to_string(::getpid()));
  nlohmann::json events = nlohmann::json::array();
  for (int s = 0; s < 4; ++s) {
    const double o = 1e4 * s;
    events.push_back({{"ph", "X"}, {"cat", "user_annotation"}, {"name", "ProfilerStep#" + std::to_string(s)},
                      {"pid", 7}, {"tid", 7}, {"ts", o}, {"dur", 1e4}});
    for (int d = 0; d < 2; ++d)
      events.push_back({{"ph", "X"}, {"cat", "kernel"}, {"name", "sm90_xmma_gemm"}, {"pid", d}, {"tid", 7},
                        {"ts", o + 100 + 4900 * d}, {"dur", 4800}, {"args", {{"device", d}, {"stream", 7}}}});
  }
  std::ofstream(base + ".trace.json") << nlohmann::json{{"schemaVersion", 1}, {"traceEvents", events}}.dump();
  const int status = std::system((std::string(DPDOCTOR_BIN) + " --torch-trace " + base + ".trace.json --json >" +
                                  base + ".out 2>" + base + ".err")
                                     .c_str());
  EXPECT_EQ(WEXITSTATUS(status), 0) << slurp(base + ".err");  // a warning: not a failure
  const auto doc = nlohmann::json::parse(slurp(base + ".out"));
  dpb::test::expect_fits(dpb::reports::findings_schema(), doc, "dpdoctor --json");
  ASSERT_EQ(doc["findings"].size(), 1u) << doc.dump(2);
  EXPECT_EQ(doc["findings"][0]["id"], "naive-model-parallel");
  EXPECT_EQ(doc["summary"]["source"], "PyTorch profiler trace");
  std::ofstream(base + ".trace.json") << "[1, 2";
  EXPECT_EQ(WEXITSTATUS(std::system((std::string(DPDOCTOR_BIN) + " --torch-trace " + base + ".trace.json 2>" + base +
                                     ".err >/dev/null")
                                        .c_str())),
            2);
  EXPECT_NE(slurp(base + ".err").find("truncated"), std::string::npos);
  for (const char* ext : {".trace.json", ".out", ".err"}) std::remove((base + ext).c_str());
}

}  // namespace
