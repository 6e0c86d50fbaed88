// dpreport on reports dpbench really wrote: show, compare as a CI gate (a made-up
// regression fails it, noise within the threshold does not), the github-action-benchmark
// export, and the HTML page rendered by headless Chromium with every chart laid out.
// Also dpbench's --gpus sweep (scaling efficiency) and --trace (Chrome/Perfetto JSON).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <tuple>

#include "engine/core/clock.h"
#include "tests/support/process.h"
#include "tests/support/schemas.h"

namespace {

namespace test = dpb::test;
using test::slurp;
using Result = test::Proc;

std::string tmp(const std::string& name) { return test::temp_path("rep_" + name); }
Result sh(const std::string& cmd) { return test::run_command(cmd); }

const std::string& dpbench() {
  static const std::string b = DPBENCH_BIN;
  return b;
}
const std::string& dpreport() {
  static const std::string b = DPREPORT_BIN;
  return b;
}

void write(const std::string& path, const nlohmann::json& j) { std::ofstream(path) << j.dump(); }

// One small dp sweep shared by the tests (a real report, written once).
// Removed when the test program ends.
const std::string& sweep_report() {
  struct Shared {
    std::string path = tmp("sweep.json");
    Shared() {
      const Result r = sh(dpbench() + " --mode=dp --gpus=1,2 --model=mlp --batch=16 --steps=6 --warmup=1 "
                                      "--threads=1 --progress=none --json=" + path);
      EXPECT_EQ(r.code, 0) << r.out << r.err;
    }
    ~Shared() { std::remove(path.c_str()); }
  };
  static const Shared shared;
  return shared.path;
}

TEST(DpbenchSweep, ReportsScalingEfficiencyForEachDeviceCount) {
  const auto rep = test::checked_report(sweep_report());
  ASSERT_EQ(rep["sweep"].size(), 2u);
  EXPECT_EQ(rep["sweep"][0]["world_size"], 1);
  EXPECT_DOUBLE_EQ(rep["sweep"][0]["scaling_efficiency"].get<double>(), 1.0);
  // Weak scaling: the dp batch doubles with the devices.
  EXPECT_EQ(rep["sweep"][0]["global_batch"], 16);
  EXPECT_EQ(rep["sweep"][1]["global_batch"], 32);
  const double thr1 = rep["sweep"][0]["throughput_samples_per_s"].get<double>();
  const double thr2 = rep["sweep"][1]["throughput_samples_per_s"].get<double>();
  EXPECT_NEAR(rep["sweep"][1]["scaling_efficiency"].get<double>(), thr2 / (2 * thr1), 1e-9);
  ASSERT_EQ(rep["runs"].size(), 2u);
  EXPECT_EQ(rep["runs"][1]["devices"].size(), 2u);
  EXPECT_FALSE(rep["runs"][1]["step_times_s"].empty());
  EXPECT_FALSE(rep["runs"][1]["timeline"]["intervals"].empty());
}

TEST(DpbenchSweep, BadListsFailBeforeAnyWork) {
  for (const std::string bad : {"0,2", "2,1", "1,,2", "x"}) {
    const Result r = sh(dpbench() + " --mode=dp --model=mlp --gpus=" + bad);
    EXPECT_NE(r.code, 0) << bad;
    EXPECT_NE(r.err.find("--gpus"), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("samples/s"), std::string::npos) << "work started for --gpus=" << bad;
  }
}

// Each run of a sweep is the sweep's own command line with the run named in the
// environment: the child takes that point's typed options (mp's one-device point is
// single-device training, with the pipeline's flags left behind; dp and mp's batch is N x
// --batch), and a value that names no run of the sweep is an error naming it.
TEST(DpbenchSweep, EachRunTakesItsPointsOptionsFromTheSweepsCommandLine) {
  const std::string dir = tmp("sweep_runs");
  std::filesystem::create_directories(dir);
  const std::string cmd = " --mode=mp --gpus=1,2 --split=fc2 --schedule=gpipe --model=mlp --batch=16 --steps=2 "
                          "--warmup=1 --threads=1 --progress=none --doctor";
  for (const auto& [n, mode, batch] : {std::tuple{1, "single", 16}, {2, "mp", 32}}) {
    const Result r = sh("DPB_SWEEP_RUN=" + std::to_string(n) + ":0:" + dir + " " + dpbench() + cmd);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out.find("dpdoctor"), std::string::npos) << "a run of a sweep gave a verdict of its own";
    const auto rep = test::checked_report(dir + "/gpus" + std::to_string(n) + "-r0.json");
    EXPECT_EQ(rep["config"]["mode"], mode);
    EXPECT_EQ(rep["runs"][0]["world_size"], n);
    EXPECT_EQ(rep["runs"][0]["global_batch"], batch) << rep["runs"][0].dump();
  }
  for (const std::string& bad : {"3:0:" + dir, "2:1:" + dir, "2:" + dir, "x:0:" + dir, std::string("2:0:")}) {
    const Result r = sh("DPB_SWEEP_RUN=" + bad + " " + dpbench() + cmd);
    EXPECT_NE(r.code, 0) << bad;
    EXPECT_NE(r.err.find("DPB_SWEEP_RUN"), std::string::npos) << bad << ": " << r.err;
  }
  const Result single = sh("DPB_SWEEP_RUN=1:0:" + dir + " " + dpbench() + " --mode=single --model=mlp --steps=1");
  EXPECT_NE(single.code, 0);
  EXPECT_NE(single.err.find("no sweep"), std::string::npos) << single.err;
  std::filesystem::remove_all(dir);
}

TEST(DpbenchTrace, WritesChromeTraceWithAProcessPerDevice) {
  const std::string trace = tmp("trace.json");
  const int64_t before = dpb::now_ns();
  const Result r = sh(dpbench() + " --mode=dp --gpus=2 --model=mlp --batch=16 --steps=4 --warmup=1 --threads=1 "
                                  "--progress=none --trace=" + trace);
  const int64_t after = dpb::now_ns();
  ASSERT_EQ(r.code, 0) << r.err;
  const auto t = nlohmann::json::parse(slurp(trace));
  // ts 0 on this host's steady clock: between the moments the run started and ended.
  const int64_t origin = t["otherData"]["clock_origin_ns"].get<int64_t>();
  EXPECT_GT(origin, before);
  EXPECT_LT(origin, after);
  std::set<int> pids;
  std::set<std::string> cats, names;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") names.insert(e["args"]["name"].get<std::string>());
    if (e["ph"] != "X") continue;
    pids.insert(e["pid"].get<int>());
    cats.insert(e["cat"].get<std::string>());
    EXPECT_GE(e["dur"].get<double>(), 0.0);
    EXPECT_GE(e["ts"].get<double>(), 0.0);
  }
  EXPECT_EQ(pids, (std::set<int>{0, 1}));
  EXPECT_EQ(names, (std::set<std::string>{"cpu:0", "cpu:1"}));
  for (const char* c : {"compute", "copy", "comm", "optim", "step"}) EXPECT_TRUE(cats.count(c)) << c;
  std::remove(trace.c_str());
}

TEST(Dpreport, ShowSummarisesTheReport) {
  const Result r = sh(dpreport() + " show " + sweep_report());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("E(N)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cpu:1"), std::string::npos) << r.out;
  const Result bad = sh(dpreport() + " show /nonexistent.json");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("/nonexistent.json"), std::string::npos);
}

TEST(Dpreport, CompareFailsOnARegressionBeyondTheThreshold) {
  const auto base = nlohmann::json::parse(slurp(sweep_report()));
  auto scaled = [&](double factor) {
    auto j = base;
    for (auto& run : j["runs"]) {
      run["throughput_samples_per_s"] = run["throughput_samples_per_s"].get<double>() * factor;
      run["step_time_s"]["median"] = run["step_time_s"]["median"].get<double>() / factor;
    }
    for (auto& s : j["sweep"]) s["throughput_samples_per_s"] = s["throughput_samples_per_s"].get<double>() * factor;
    return j;
  };
  const std::string slower = tmp("slower.json"), noisy = tmp("noisy.json");
  write(slower, scaled(0.9));
  write(noisy, scaled(0.98));
  const Result bad = sh(dpreport() + " compare " + sweep_report() + " " + slower + " --max-regress=5%");
  EXPECT_EQ(bad.code, 1) << bad.out << bad.err;
  EXPECT_NE(bad.out.find("REGRESSION"), std::string::npos) << bad.out;
  const Result ok = sh(dpreport() + " compare " + sweep_report() + " " + noisy + " --max-regress=5%");
  EXPECT_EQ(ok.code, 0) << ok.out << ok.err;
  EXPECT_EQ(ok.out.find("REGRESSION"), std::string::npos) << ok.out;
  // A looser gate lets the 10% through.
  EXPECT_EQ(sh(dpreport() + " compare " + sweep_report() + " " + slower + " --max-regress=15%").code, 0);
  const Result junk = sh(dpreport() + " compare " + sweep_report() + " " + slower + " --max-regress=lots");
  EXPECT_EQ(junk.code, 2);
  std::remove(slower.c_str());
  std::remove(noisy.c_str());
}

TEST(Dpreport, ExportsGithubBenchmarkEntries) {
  const Result r = sh(dpreport() + " export " + sweep_report() + " --format=github-benchmark");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 4u);  // throughput and efficiency at 1 and 2 devices
  for (const auto& e : j) {
    EXPECT_TRUE(e["name"].is_string());
    EXPECT_TRUE(e["unit"].is_string());
    EXPECT_TRUE(e["value"].is_number());
  }
  const Result smaller = sh(dpreport() + " export " + sweep_report() + " --format=github-benchmark-smaller");
  ASSERT_EQ(smaller.code, 0);
  EXPECT_EQ(nlohmann::json::parse(smaller.out)[0]["unit"], "ms");
  EXPECT_NE(sh(dpreport() + " export " + sweep_report() + " --format=csv").code, 0);
}

std::string chromium() {
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
    const std::string which = "command -v " + std::string(name) + " >/dev/null 2>&1";
    if (std::system(which.c_str()) == 0) return name;
  }
  return "";
}

TEST(Dpreport, HtmlChartsRenderInHeadlessChromium) {
  const std::string browser = chromium();
  if (browser.empty()) GTEST_SKIP() << "no chromium on this machine (scripts/test.sh installs Debian's chromium)";
  const std::string html = tmp("report.html");
  const Result r = sh(dpreport() + " html " + sweep_report() + " -o " + html);
  ASSERT_EQ(r.code, 0) << r.err;
  // The page has no script of its own; this copy measures what the browser laid out.
  std::string page = slurp(html);
  const std::string probe =
      "<script>window.addEventListener('load',()=>{const out=[];"
      "document.querySelectorAll('svg.chart').forEach(s=>{const b=s.getBoundingClientRect();"
      "const shapes=s.querySelectorAll('rect,path,circle,line').length;"
      "out.push(s.id+':'+Math.round(b.width)+'x'+Math.round(b.height)+':'+shapes)});"
      "document.body.setAttribute('data-charts',out.join(' '))});</script>";
  page.insert(page.rfind("</body>"), probe);
  const std::string probed = tmp("probed.html");
  std::ofstream(probed) << page;
  const Result dom = sh("timeout 120 " + browser + " --headless --no-sandbox --disable-gpu --dump-dom file://" + probed);
  ASSERT_EQ(dom.code, 0) << dom.err;
  const std::regex attr("data-charts=\"([^\"]*)\"");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(dom.out, m, attr)) << dom.out.substr(0, 2000);
  const std::string charts = m[1];
  for (const char* id : {"scaling", "busy", "steps", "timeline"}) {
    const std::regex one(std::string(id) + ":(\\d+)x(\\d+):(\\d+)");
    std::smatch c;
    ASSERT_TRUE(std::regex_search(charts, c, one)) << id << " missing in: " << charts;
    EXPECT_GT(std::stoi(c[1]), 100) << id;
    EXPECT_GT(std::stoi(c[2]), 40) << id;
    EXPECT_GT(std::stoi(c[3]), 2) << id << " has nothing drawn";
  }
  std::remove(html.c_str());
  std::remove(probed.c_str());
}

}  // namespace
