// dpbench --simulate end to end: a prediction from an analytic profile and from a
// --layer-profile run, its report (schema, predicted points), dpreport reading it and
// plotting it beside measurements, and the flags it refuses.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "reports/model.h"
#include "reports/schemas.h"
#include "tests/support/process.h"
#include "tests/support/schemas.h"

namespace {

namespace test = dpb::test;
using test::checked_report;
using test::Proc;

Proc dpbench(const std::string& args) {
  return test::run_command(test::binary("DPBENCH_BIN", DPBENCH_BIN) + " " + args);
}
Proc dpreport(const std::string& args) {
  return test::run_command(test::binary("DPREPORT_BIN", DPREPORT_BIN) + " " + args);
}
std::string temp(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("dpb_sim_" + std::to_string(::getpid()) + "_" + name);
}

// The predicted step at 2 ranks of `dpbench --simulate --mode=ddp --gpus=2 ARGS`; its
// printed summary into `out` when given.
double predicted_step_at_2(const std::string& args, std::string* out = nullptr) {
  const std::string json = temp("pred.json");
  const Proc s = dpbench("--simulate --mode=ddp --gpus=2 " + args + " --json=" + json);
  EXPECT_EQ(s.code, 0) << s.err;
  if (out) *out = s.out;
  const double step = checked_report(json)["sweep"][0]["step_time_s"].get<double>();
  std::remove(json.c_str());
  return step;
}

TEST(DpbenchSimulate, PredictsAThousandRanksFromAPublishedStep) {
  const std::string json = temp("r50.json");
  const Proc r = dpbench("--simulate --mode=ddp --model=resnet50 --batch=32 --hardware=dgx1-v100 "
                         "--single-step-s=0.097 --gpus=2..1024 --json=" + json);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("what ends the step"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("   1024 "), std::string::npos) << r.out;
  const auto rep = checked_report(json);
  EXPECT_TRUE(rep["runs"].empty());
  ASSERT_EQ(rep["sweep"].size(), 10u);
  for (const auto& p : rep["sweep"]) {
    EXPECT_TRUE(p["predicted"].get<bool>());
    EXPECT_GT(p["step_time_s"].get<double>(), 0.097);
    EXPECT_GT(p["scaling_efficiency"].get<double>(), 0.5);
    EXPECT_LE(p["scaling_efficiency"].get<double>(), 1.0);
  }
  EXPECT_EQ(rep["sweep"].back()["world_size"], 1024);
  EXPECT_EQ(rep["simulation"]["link"]["name"], "dgx1-v100");
  // The typed model reads it back; dpreport shows it; dpdoctor says there is no run.
  EXPECT_EQ(dpb::reports::RunReport::read(json).sweep->size(), 10u);
  const Proc show = dpreport("show " + json);
  EXPECT_EQ(show.code, 0) << show.err;
  EXPECT_NE(show.out.find("predicted"), std::string::npos) << show.out;
  std::remove(json.c_str());
}

TEST(DpbenchSimulate, ALayerProfileFeedsThePredictionAndThePageShowsBoth) {
  const std::string profile = temp("profile.json"), measured = temp("measured.json"), predicted = temp("pred.json"),
                    html = temp("page.html");
  const Proc p = dpbench("--mode=single --model=lenet --batch=16 --steps=3 --warmup=1 --threads=1 --layer-profile "
                         "--progress=none --json=" + profile);
  ASSERT_EQ(p.code, 0) << p.err;
  const auto prof = checked_report(profile)["runs"][0]["layer_profile"];
  ASSERT_EQ(prof["layers"].size(), 12u);
  EXPECT_EQ(prof["layers"][0]["name"], "conv1");
  EXPECT_GT(prof["layers"][3]["backward_s"].get<double>(), 0);
  EXPECT_GT(prof["optimizer_s"].get<double>(), 0);
  EXPECT_EQ(prof["source"], "measured");
  // FSDP's copies: the parameters' bytes into one buffer and back, timed on the device.
  ASSERT_TRUE(prof["copy_bytes_per_s"].is_number()) << prof.dump();
  EXPECT_GT(prof["copy_bytes_per_s"].get<double>(), 1e7);
  EXPECT_LT(prof["copy_bytes_per_s"].get<double>(), 1e13);
  EXPECT_NE(prof["evidence"].get<std::string>().find("copy rate: the 0.2 MB of parameters"), std::string::npos)
      << prof["evidence"];
  const Proc s = dpbench("--simulate --mode=ddp --gpus=2,4 --profile=" + profile + " --json=" + predicted);
  ASSERT_EQ(s.code, 0) << s.err;
  EXPECT_NE(s.out.find("profile: measured"), std::string::npos) << s.out;
  const Proc m = dpbench("--mode=ddp --gpus=1,2 --model=lenet --batch=16 --steps=3 --warmup=1 --threads=1 "
                         "--progress=none --json=" + measured);
  ASSERT_EQ(m.code, 0) << m.err;
  const Proc h = dpreport("html " + measured + " --predicted=" + predicted + " -o " + html);
  ASSERT_EQ(h.code, 0) << h.err;
  const std::string page = test::slurp(html);
  EXPECT_NE(page.find("class=\"measured\""), std::string::npos);
  EXPECT_NE(page.find("class=\"predicted\""), std::string::npos);
  // A measured report is no prediction.
  EXPECT_EQ(dpreport("html " + measured + " --predicted=" + measured + " -o " + html).code, 2);
  for (const auto& f : {profile, measured, predicted, html}) std::remove(f.c_str());
}

// --crowded-profile: the same profile recorded with a second rank computing beside it. Its
// layers slower by a tenth stretch the compute from 2 ranks on; faster, they are noise (a
// second rank cannot speed this one up), taken as no crowding and said so.
TEST(DpbenchSimulate, ACrowdedProfileStretchesComputeButNeverShrinksIt) {
  const std::string profile = temp("alone.json"), slower = temp("slower.json"), faster = temp("faster.json");
  const Proc p = dpbench("--mode=single --model=mlp --batch=16 --steps=3 --warmup=1 --threads=1 --layer-profile "
                         "--progress=none --json=" + profile);
  ASSERT_EQ(p.code, 0) << p.err;
  auto scaled = [&](const std::string& out, double factor) {
    nlohmann::json j = checked_report(profile);
    for (auto& l : j["runs"][0]["layer_profile"]["layers"]) {
      l["forward_s"] = l["forward_s"].get<double>() * factor;
      l["backward_s"] = l["backward_s"].get<double>() * factor;
    }
    std::ofstream(out) << j.dump();
  };
  scaled(slower, 1.10);
  scaled(faster, 0.95);
  auto step_at_2 = [&](const std::string& extra, std::string* out) {
    return predicted_step_at_2("--sim-jitter=0 --profile=" + profile + " " + extra, out);
  };
  std::string said;
  const double alone = step_at_2("", nullptr);
  const double crowded = step_at_2("--crowded-profile=" + slower, &said);
  EXPECT_NE(said.find("crowding: compute +10.0 %"), std::string::npos) << said;
  EXPECT_GT(crowded, alone);
  EXPECT_DOUBLE_EQ(step_at_2("--crowded-profile=" + faster, &said), alone);
  EXPECT_NE(said.find("it measured -5.0 %, faster than alone"), std::string::npos) << said;
  for (const auto& f : {profile, slower, faster}) std::remove(f.c_str());
}

// A crowded profile's rank_lag (its steps taken with a neighbour computing) is the ranks'
// spread at 2 ranks and more, in place of the profile's alone: ranks compute side by side.
// --sim-jitter, given, still decides.
TEST(DpbenchSimulate, ACrowdedProfilesRankLagIsTheSpreadOfRanksSideBySide) {
  const std::string profile = temp("lag-alone.json"), crowded = temp("lag-crowded.json");
  const Proc p = dpbench("--mode=single --model=mlp --batch=16 --steps=3 --warmup=1 --threads=1 --layer-profile "
                         "--progress=none --json=" + profile);
  ASSERT_EQ(p.code, 0) << p.err;
  nlohmann::json j = checked_report(profile);
  auto& lp = j["runs"][0]["layer_profile"];
  double compute = 0;
  for (const auto& l : lp["layers"]) compute += l["forward_s"].get<double>() + l["backward_s"].get<double>();
  lp["rank_lag"] = nlohmann::json::parse(R"([{"ranks": 2, "relative": 0.0}])");
  std::ofstream(profile) << j.dump();
  lp["rank_lag"] = nlohmann::json::parse(R"([{"ranks": 2, "relative": 0.2}])");
  std::ofstream(crowded) << j.dump();
  const double alone = predicted_step_at_2("--profile=" + profile, nullptr);
  const double side_by_side = predicted_step_at_2("--profile=" + profile + " --crowded-profile=" + crowded, nullptr);
  // The slowest rank's compute a fifth longer (less what overlapping communication hides).
  EXPECT_GT(side_by_side, alone + 0.1 * compute);
  EXPECT_DOUBLE_EQ(predicted_step_at_2("--sim-jitter=0 --profile=" + profile + " --crowded-profile=" + crowded, nullptr),
                   predicted_step_at_2("--sim-jitter=0 --profile=" + profile, nullptr));
  for (const auto& f : {profile, crowded}) std::remove(f.c_str());
}

// The profile carries how far the slowest of N ranks' steps run behind (rank_lag), from the
// run's own steps. A profile recorded without it gets it from its steps: one stall among
// them moves nothing (the standard deviation it inflates is no longer what is waited for),
// so the prediction is the one without jitter; a spread of steps lengthens the step.
TEST(DpbenchSimulate, TheSlowestRanksLagComesFromTheProfiledSteps) {
  const std::string profile = temp("lag.json"), stalled = temp("stalled.json"), spread = temp("spread.json");
  const Proc p = dpbench("--mode=single --model=mlp --batch=16 --steps=20 --warmup=1 --threads=1 --layer-profile "
                         "--progress=none --json=" + profile);
  ASSERT_EQ(p.code, 0) << p.err;
  nlohmann::json j = checked_report(profile);
  const auto& lag = j["runs"][0]["layer_profile"]["rank_lag"];
  ASSERT_EQ(lag.size(), 3u) << lag;  // 2, 4 and 8 ranks: 16 ranks' quantile lies past 20 steps
  EXPECT_EQ(lag[0]["ranks"], 2);
  EXPECT_EQ(lag[2]["ranks"], 8);
  auto rewritten = [&](const std::string& out, const std::vector<double>& steps) {
    nlohmann::json k = j;
    k["runs"][0]["layer_profile"].erase("rank_lag");
    k["runs"][0]["layer_profile"]["step_cv"] = 0.9;  // what one stall makes of the deviation
    k["runs"][0]["step_times_s"] = steps;
    std::ofstream(out) << k.dump();
  };
  std::vector<double> steps(20, 0.002);
  steps[7] = 0.040;
  rewritten(stalled, steps);
  for (size_t i = 0; i < steps.size(); ++i) steps[i] = 0.002 * (1 + 0.02 * static_cast<double>(i));
  rewritten(spread, steps);
  auto step_at_2 = [&](const std::string& prof, const std::string& extra, std::string* out) {
    return predicted_step_at_2("--profile=" + prof + " " + extra, out);
  };
  std::string said;
  const double still = step_at_2(profile, "--sim-jitter=0", nullptr);
  EXPECT_DOUBLE_EQ(step_at_2(stalled, "", &said), still);
  EXPECT_NE(said.find("slowest rank's step +0.0 % at 2 ranks"), std::string::npos) << said;
  // The steps' 0.707 quantile is 6.6 % above their median: the compute at 2 ranks is longer
  // by that share of the one-device step. That is the prediction of compute stretched by
  // the same factor through a jitter whose expected maximum of two (1/sqrt(pi)) gives it;
  // how much of it the step shows depends on the all-reduces it overlaps and their contention.
  const double lagged = step_at_2(spread, "", &said);
  EXPECT_NE(said.find("slowest rank's step +6.6 % at 2 ranks"), std::string::npos) << said;
  EXPECT_NE(said.find("0.707 quantile over their median"), std::string::npos) << said;
  EXPECT_GT(lagged, still);
  const auto& prof = j["runs"][0]["layer_profile"];
  double compute = 0;
  for (const auto& l : prof["layers"]) compute += l["forward_s"].get<double>() + l["backward_s"].get<double>();
  const double step = compute + prof["optimizer_s"].get<double>() + prof["other_s"].get<double>();
  // The steps' 0.707 quantile (interpolated at 19 sqrt(1/2)) over their median (1.19 units).
  const double spread_lag = (1 + 0.02 * 19 * std::sqrt(0.5)) / 1.19 - 1;
  const double jitter = spread_lag * step / compute * std::sqrt(M_PI);
  EXPECT_NEAR(lagged, step_at_2(profile, fmt::format("--sim-jitter={:.17g}", jitter), nullptr), 1e-6 * lagged);
  for (const auto& f : {profile, stalled, spread}) std::remove(f.c_str());
}

// GPT-2 as any model: its layer profile (blocks as layers, the tied head's weight counted
// once, with the token embedding), and a prediction from it; its report gives tokens/s,
// the FLOPs per token behind them, and how attention ran.
TEST(DpbenchSimulate, Gpt2ProfilesAndPredictsAsAnyModel) {
  const std::string profile = temp("gpt2_profile.json");
  const Proc p = dpbench("--mode=single --model=gpt2-tiny --seq=32 --batch=4 --steps=3 --warmup=1 --threads=1 "
                         "--optimizer=adamw --layer-profile --progress=none --json=" + profile);
  ASSERT_EQ(p.code, 0) << p.err;
  const auto report = checked_report(profile);
  const auto& run = report["runs"][0];
  EXPECT_EQ(run["tokens_per_sample"], 32);
  EXPECT_NEAR(run["throughput_tokens_per_s"].get<double>(), 32 * run["throughput_samples_per_s"].get<double>(), 1e-6);
  // 6N + 12LCT: N = 149,248 parameters less the 256 x 64 position table; L 2, C 64, T 32.
  EXPECT_DOUBLE_EQ(run["flops_per_token"].get<double>(), 6.0 * (149248 - 256 * 64) + 12.0 * 2 * 64 * 32);
  // How attention ran: never fused on a CPU, in each block's forward of every step, and why.
  EXPECT_EQ(run["attention"]["fused_calls"], 0);
  EXPECT_GE(run["attention"]["unfused_calls"].get<int64_t>(), 2 * 4);
  EXPECT_NE(run["attention"]["unfused_why"].get<std::string>().find("CPU"), std::string::npos) << run["attention"];
  EXPECT_NE(p.out.find("attention: not fused: CPU"), std::string::npos) << p.out;
  const auto& prof = run["layer_profile"];
  ASSERT_EQ(prof["layers"].size(), 6u);  // wte, wpe, 2 blocks, ln_f, lm_head
  EXPECT_EQ(prof["layers"][2]["name"], "transformer.h.0");
  EXPECT_GT(prof["layers"][2]["backward_s"].get<double>(), 0);
  const Proc s = dpbench("--simulate --mode=ddp --gpus=2,4 --profile=" + profile);
  ASSERT_EQ(s.code, 0) << s.err;
  EXPECT_NE(s.out.find("model gpt2-tiny"), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("0.6 MiB of gradients"), std::string::npos) << s.out;  // 149,248 x 4 bytes, once
  std::remove(profile.c_str());
}

// Collectives under load (--load): each row says how much they slowed the ranks' compute;
// --link takes such a report as the all-reduce's time beside compute and the contention,
// beside an idle report for the same rank count, and the prediction says so.
TEST(DpbenchSimulate, ALinkMeasuredUnderLoadGivesTheContention) {
  const std::string idle = temp("idle.json"), loaded = temp("loaded.json"), predicted = temp("pred_load.json");
  // 40 collectives a size: a load thread that made no round while they ran leaves the
  // slowdown unmeasured (null), and beside other tests 5 all-reduces of 256 KB (10 ms) once
  // left a rank's load thread without its core throughout.
  const std::string sizes = "--bench=collectives --gpus=2 --ops=allreduce -b 4K -e 256K -f 8 -n 40 --timeout=60 ";
  ASSERT_EQ(dpbench(sizes + "--json=" + idle).code, 0);
  const Proc l = dpbench(sizes + "--load --json=" + loaded);
  ASSERT_EQ(l.code, 0) << l.err;
  EXPECT_NE(l.out.find("load slowdown"), std::string::npos) << l.out;
  const auto rep = nlohmann::json::parse(test::slurp(loaded));
  test::expect_fits(dpb::reports::collectives_schema(), rep, "the collectives report under load");
  EXPECT_EQ(rep["config"]["load"], "compute");
  ASSERT_EQ(rep["results"].size(), 3u);
  for (const auto& row : rep["results"]) EXPECT_TRUE(row["load_slowdown"].is_number()) << row;
  const auto plain = nlohmann::json::parse(test::slurp(idle));
  EXPECT_EQ(plain["config"]["load"], "none");
  EXPECT_TRUE(plain["results"][0]["load_slowdown"].is_null());
  const Proc s = dpbench("--simulate --mode=ddp --gpus=2 --model=lenet --batch=64 --single-step-s=0.005 "
                         "--hardware=cpu-gloo-local --link=" + idle + "," + loaded + " --json=" + predicted);
  ASSERT_EQ(s.code, 0) << s.err;
  EXPECT_NE(s.out.find("measured: compute slowed by the all-reduces in"), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("take their time under load"), std::string::npos) << s.out;
  const auto link = checked_report(predicted)["simulation"]["link"];
  ASSERT_EQ(link["fitted_allreduce_under_load"].size(), 1u);
  ASSERT_EQ(link["fitted_allreduce"].size(), 1u);
  EXPECT_GE(link["contention"].get<double>(), 0.0);
  // Repeats of one link (same host, backend and devices): each size's median is fitted. A
  // second run twice as slow at every size, with the first twice: the fit is the first's.
  const std::string slower = temp("slower.json"), elsewhere = temp("elsewhere.json"), repeated = temp("rep.json");
  {
    nlohmann::json j = nlohmann::json::parse(test::slurp(idle));
    for (auto& row : j["results"]) row["time_us"] = row["time_us"].get<double>() * 2;
    std::ofstream(slower) << j.dump();
    j = nlohmann::json::parse(test::slurp(idle));
    j["env"]["host"] = "another-host";
    std::ofstream(elsewhere) << j.dump();
  }
  auto fitted = [&](const std::string& links) {
    const Proc r = dpbench("--simulate --mode=ddp --gpus=2 --model=lenet --batch=64 --single-step-s=0.005 "
                           "--hardware=cpu-gloo-local --link=" + links + " --json=" + repeated);
    EXPECT_EQ(r.code, 0) << r.err;
    return checked_report(repeated)["simulation"]["link"]["fitted_allreduce"][0];
  };
  const auto once = fitted(idle), thrice = fitted(idle + "," + slower + "," + idle);
  EXPECT_DOUBLE_EQ(thrice["alpha_s"].get<double>(), once["alpha_s"].get<double>());
  EXPECT_DOUBLE_EQ(thrice["bus_bandwidth_bytes_per_s"].get<double>(), once["bus_bandwidth_bytes_per_s"].get<double>());
  // Two: each size's median is the middle of the two, 1.5x the idle run's time, so the fit
  // scales by 1.5 (its latency may be 0, where the fit's bound holds it).
  const auto middle = fitted(idle + "," + slower);
  const double alpha = once["alpha_s"].get<double>(), bandwidth = once["bus_bandwidth_bytes_per_s"].get<double>();
  EXPECT_NEAR(middle["alpha_s"].get<double>(), 1.5 * alpha, 1e-9 * (1 + alpha));
  if (bandwidth < 1e14) {  // else times that did not grow with size: the fit's vanishing byte cost, not scaled
    EXPECT_NEAR(middle["bus_bandwidth_bytes_per_s"].get<double>(), bandwidth / 1.5, 1e-6 * bandwidth);
  }
  // Two idle reports from different places: which to believe is not guessed.
  const Proc twice = dpbench("--simulate --mode=ddp --gpus=2 --model=lenet --batch=64 --single-step-s=0.005 "
                             "--hardware=cpu-gloo-local --link=" + idle + "," + elsewhere);
  EXPECT_EQ(twice.code, 2) << twice.err;
  EXPECT_NE(twice.err.find("two idle reports for 2 ranks from different places"), std::string::npos) << twice.err;
  for (const auto& f : {idle, loaded, predicted, slower, elsewhere, repeated}) std::remove(f.c_str());
}

// Without --mode a prediction is of DistributedDataParallel, and says so.
TEST(DpbenchSimulate, WithoutAModePredictsDdpAndSaysSo) {
  const Proc r = dpbench("--simulate --model=lenet --batch=64 --single-step-s=0.005 --gpus=2,4");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("dpbench --simulate | ddp (no --mode given)"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("predicting ddp"), std::string::npos) << r.err;
}

TEST(DpbenchSimulate, RefusesWhatItCannotPredict) {
  struct Case {
    const char* args;
    const char* says;
  };
  for (const Case& c : {Case{"--simulate --mode=ddp --gpus=2", "--single-step-s"},
                        Case{"--simulate --mode=ddp --gpus=2 --profile=x.json --single-step-s=0.1", "give one"},
                        Case{"--simulate --mode=single --gpus=2 --single-step-s=0.1", "--mode=ddp, dp, mp, fsdp or tp"},
                        Case{"--simulate --mode=tp --gpus=2 --model=lenet --single-step-s=0.1",
                             "'lenet' over 2 ranks: it declares no tensor-parallel plan"},
                        Case{"--simulate --mode=tp --gpus=2,3 --model=gpt2-tiny --single-step-s=0.1",
                             "over 3 ranks: its 4 heads do not divide evenly"},
                        Case{"--simulate --mode=ddp --gpus=4..2 --single-step-s=0.1", "must go up"},
                        Case{"--simulate --mode=ddp --gpus=2 --single-step-s=0.1 --hardware=dgx2", "valid: cpu-gloo-local"},
                        Case{"--simulate --mode=ddp --gpus=2 --profile=/nonexistent.json", "nonexistent"},
                        Case{"--mode=ddp --gpus=2 --layer-profile", "--layer-profile"}}) {
    const Proc r = dpbench(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.args << "\n" << r.err;
  }
}

}  // namespace
