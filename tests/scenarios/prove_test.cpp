// dpdoctor --prove: the doctor's prescription for a slow input pipeline run and timed
// against the run as asked (benchmarks/dpbench/prove.h), end to end through dpdoctor and
// dpbench. Timed runs: in the serial scenario suite.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "reports/model.h"
#include "reports/render_html.h"
#include "reports/schemas.h"
#include "tests/support/process.h"
#include "tests/support/schemas.h"

namespace {

nlohmann::json finding(const nlohmann::json& doc, const std::string& id) {
  for (const auto& f : doc["findings"])
    if (f["id"] == id) return f;
  return nullptr;
}

TEST(ProveScenario, TheSlowLoadersFixHoldsAsPredicted) {
  const std::string base = dpb::test::temp_path("prove");
  // 20 ms of loading a batch in the training process, a few ms of compute.
  const std::string cmd = std::string(DPDOCTOR_BIN) + " --prove --json=" + base + ".json -- --mode=single " +
                          "--model=lenet --batch=64 --workers=0 --loader-delay-ms=20 --threads=1 --steps=12 " +
                          "--warmup=2 --json=" + base + ".report.json >" + base + ".out 2>" + base + ".err";
  const int status = std::system(cmd.c_str());
  const std::string out = dpb::test::slurp(base + ".out"), err = dpb::test::slurp(base + ".err");
  const std::string text = dpb::test::slurp(base + ".json");
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out << err;
  const auto doc = nlohmann::json::parse(text);
  // Both documents fit their schemas, and the HTML report shows the proof.
  dpb::test::expect_fits(dpb::reports::findings_schema(), doc, "dpdoctor --prove --json");
  const auto report = dpb::test::checked_report(base + ".report.json");
  ASSERT_TRUE(report.contains("diagnosis"));
  EXPECT_EQ(report["diagnosis"]["findings"], doc["findings"]);
  std::string html;
  {
    dpb::reports::RunReport r = dpb::reports::RunReport::read(base + ".report.json");
    html = dpb::reports::render_html(r);
  }
  EXPECT_NE(html.find("proved:</b> --workers="), std::string::npos);
  for (const char* ext : {".json", ".report.json", ".out", ".err"}) std::remove((base + ext).c_str());
  const auto f = finding(doc, "input-bound");
  ASSERT_FALSE(f.is_null()) << doc.dump(1);
  const auto& p = f["proof"];
  ASSERT_TRUE(p.is_object()) << f.dump(1);
  ASSERT_EQ(p["flags"].size(), 1u);
  EXPECT_EQ(p["flags"][0].get<std::string>().rfind("--workers=", 0), 0u) << p.dump();
  EXPECT_EQ(p["pairs"], 3);
  EXPECT_EQ(p["original_step_s"].size(), 3u);
  EXPECT_EQ(p["fixed_step_s"].size(), 3u);
  // The prediction is the finding's own, from the diagnosed run.
  EXPECT_EQ(p["predicted_gain_share"], f["predicted"]["gain_share"]);
  const double measured = p["measured_gain_share"].get<double>(), predicted = p["predicted_gain_share"].get<double>();
  EXPECT_GT(measured, 0.3) << p.dump(1);
  EXPECT_LE(std::abs(measured / predicted - 1), 0.25) << p.dump(1);
  EXPECT_EQ(p["verdict"], "held") << p.dump(1);
  // The text says it too.
  EXPECT_NE(out.find("proved: --workers="), std::string::npos) << out;
  // Findings whose fix is no flag say why they were not run.
  for (const auto& g : doc["findings"]) {
    if (g.contains("proof") && g["proof"]["verdict"] == "not run") {
      EXPECT_TRUE(g["proof"]["reason"].is_string()) << g;
    }
  }
}

TEST(ProveCli, RefusesWhatItCannotRunAgain) {
  const auto r = dpb::test::run_command(std::string(DPDOCTOR_BIN) + " --prove some-report.json");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--prove runs dpbench"), std::string::npos) << r.err;
  const auto s = dpb::test::run_command(std::string(DPBENCH_BIN) + " --mode=ddp --gpus=1,2 --doctor=prove");
  EXPECT_EQ(s.code, 2);
  EXPECT_NE(s.err.find("--doctor=prove proves one run's findings"), std::string::npos) << s.err;
  // A rank of another launcher's job cannot start the proving jobs.
  const std::string torchrun = "RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 ";
  const auto t = dpb::test::run_command(torchrun + "MASTER_PORT=29999 " + std::string(DPBENCH_BIN) +
                                        " --mode=ddp --model=mlp --doctor=prove");
  EXPECT_EQ(t.code, 2);
  EXPECT_NE(t.err.find("--doctor=prove runs the job again"), std::string::npos) << t.err;
  const auto b = dpb::test::run_command(std::string(DPBENCH_BIN) + " --doctor=maybe");
  EXPECT_NE(b.code, 0);
  EXPECT_NE(b.err.find("prove"), std::string::npos) << b.err;
}

}  // namespace
