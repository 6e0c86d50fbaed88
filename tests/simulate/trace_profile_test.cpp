// The one-device profile read from real PyTorch profiler traces (--simulate --from-trace),
// and the job predicted back at the world size it was recorded in.
#include "benchmarks/simulate/trace_profile.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "benchmarks/simulate/simulator.h"
#include "engine/core/error.h"

namespace {

namespace fs = std::filesystem;
using namespace dpb::sim;

const fs::path kPublic = fs::path(DPB_SOURCE_DIR) / "tests/data/traces/public";

std::string error_of(const std::string& path) {
  try {
    (void)profile_from_trace(path);
  } catch (const dpb::Error& e) {
    return e.what();
  }
  return "";
}

// The step `t` predicts at `ranks` on `link`: the simulation of its profile plus its other
// communication.
double predicted_step(const TraceProfile& t, const LinkModel& link, int ranks) {
  SimOptions o;
  o.mode = dpb::ParallelMode::ddp;
  return simulate_point(t.profile, link, ranks, o).step_s + other_comm_at(t, link, ranks);
}

// DLRM on 8 V100s under DDP (facebookresearch/param): from each rank's trace alone, the
// step at 8 ranks comes back within 10 % of what that rank measured, on the DGX-1 preset
// scaled to the trace's own all-reduces (measured: 0.963-1.001 of each rank's step). Its
// all-to-alls of embeddings are part of it: without them the prediction falls short by
// more than a tenth on seven ranks of eight (0.50-0.83; the last rank to arrive, which
// waits for no one, 0.94).
TEST(TraceProfile, EachRankOfTheDlrmJobPredictsItsOwnStepAtEightRanks) {
  int ranks = 0, short_without = 0;
  for (const auto& f : fs::directory_iterator(kPublic / "param_dlrm_8xv100_ddp")) {
    const TraceProfile t = profile_from_trace(f.path().string());
    ++ranks;
    EXPECT_EQ(t.world, 8);
    EXPECT_EQ(t.gpu, "Tesla V100-SXM2-32GB");
    EXPECT_EQ(preset_for_gpu(t.gpu), "dgx1-v100");
    EXPECT_EQ(t.gradients_from, "the backward's all-reduces");
    // Three buckets: 394,241 + 112 + 226,960 floats, each all-reduce timed.
    EXPECT_EQ(t.profile.gradient_bytes(), (394241 + 112 + 226960) * 4) << f.path();
    EXPECT_EQ(t.allreduce_samples.size(), 3u);
    EXPECT_GT(t.other_comm_s, 0);
    // One device: the step less the communication it waited for.
    EXPECT_NEAR(t.profile.step_s(), t.measured_step_s - t.allreduce_exposed_s - t.other_comm_s,
                1e-9 + 1e-6 * t.measured_step_s);
    double factor = 0;
    const LinkModel link = calibrate_link(load_preset("dgx1-v100"), t, &factor);
    EXPECT_GT(factor, 0);
    const double step = predicted_step(t, link, 8);
    EXPECT_NEAR(step / t.measured_step_s, 1.0, 0.10) << f.path() << ": " << step << " s against "
                                                     << t.measured_step_s;
    SimOptions o;
    const double without = simulate_point(t.profile, link, 8, o).step_s / t.measured_step_s;
    short_without += without < 0.90;
    // At one rank nothing is exchanged.
    EXPECT_EQ(other_comm_at(t, link, 1), 0);
    EXPECT_NEAR(simulate_point(t.profile, link, 1, o).step_s, t.profile.step_s(), 1e-12);
  }
  EXPECT_EQ(ranks, 8);
  EXPECT_GE(short_without, 6);
}

// ResNet-50 on one V100 (pytorch/kineto's sample, recorded with shapes): its 161
// parameters from AccumulateGrad, 25,557,032 floats; the one-device step is the median
// step as measured; the backward, as autograd's own ops say, is most of the compute.
TEST(TraceProfile, AOneGpuJobGivesItsParametersFromAutogradsShapes) {
  const TraceProfile t = profile_from_trace((kPublic / "kineto_resnet50_nw0_v100_2021jun").string());
  EXPECT_EQ(t.world, 1);
  EXPECT_EQ(t.steps, 6);
  EXPECT_EQ(t.gradients_from, "AccumulateGrad's shapes");
  EXPECT_EQ(t.profile.gradient_bytes(), int64_t{25557032} * 4);
  std::set<std::string> params;  // "gradients I.J": piece J of parameter I
  double forward = 0, backward = 0;
  for (const auto& l : t.profile.layers) {
    for (const auto& p : l.params) params.insert(p.name.substr(0, p.name.rfind('.')));
    forward += l.forward_s;
    backward += l.backward_s;
  }
  EXPECT_EQ(params.size(), 161u);
  EXPECT_NEAR(t.profile.step_s(), t.measured_step_s, 1e-9);
  EXPECT_GT(backward, forward);
  EXPECT_GT(t.profile.optimizer_s, 0);
  EXPECT_TRUE(t.allreduce_samples.empty());
  // Nothing to calibrate on one device.
  double factor = 0;
  const LinkModel preset = load_preset("dgx1-v100");
  EXPECT_EQ(calibrate_link(preset, t, &factor).intra.bus_bandwidth, preset.intra.bus_bandwidth);
  EXPECT_EQ(factor, 1);
  // FSDP's units: consecutive gradients up to 25 MiB, every byte in one of them.
  const TraceProfile u = profile_from_trace((kPublic / "kineto_resnet50_nw0_v100_2021jun").string(), 25 << 20);
  EXPECT_EQ(u.profile.gradient_bytes(), t.profile.gradient_bytes());
  size_t units = 0;
  for (const auto& l : u.profile.layers)
    if (!l.params.empty()) {
      ++units;
      EXPECT_LE(l.params.front().bytes, 25 << 20);
    }
  EXPECT_GE(units, 4u);
  EXPECT_LE(units, 8u);
}

TEST(TraceProfile, WhatATraceLacksIsNamed) {
  // The legacy autograd profiler's trace: no ProfilerStep.
  EXPECT_NE(error_of((kPublic / "kineto_resnet50_autograd_api_nw0_2021jan").string()).find("no step markers"),
            std::string::npos);
  // Inference: no backward.
  EXPECT_NE(error_of((kPublic / "tracelens_h100_bert_small_infer").string()).find("ran no backward"),
            std::string::npos);
  // Training recorded without shapes: no gradient sizes, and how to record them.
  const std::string sizes = error_of((kPublic / "kineto_resnet50_nw0_2020dec").string());
  EXPECT_NE(sizes.find("no gradient sizes"), std::string::npos) << sizes;
  EXPECT_NE(sizes.find("record_shapes=True"), std::string::npos) << sizes;
  // A CPU-only profile: steps but no device events.
  const std::string dir = fs::temp_directory_path() / ("dpb_trace_profile_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string cpu = dir + "/cpu.json", text = dir + "/notes.json";
  std::ofstream(cpu) << R"({"traceEvents": [
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 10, "dur": 100},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 20, "dur": 30}]})";
  EXPECT_NE(error_of(cpu).find("no device events"), std::string::npos) << error_of(cpu);
  // Not a trace at all.
  std::ofstream(text) << "step times: 1.2 ms, 1.3 ms\n";
  EXPECT_NE(error_of(text).find("notes.json"), std::string::npos) << error_of(text);
  EXPECT_FALSE(is_dpbench_report(cpu));
  EXPECT_FALSE(is_dpbench_report(text));
  fs::remove_all(dir);
}

TEST(TraceProfile, TheOtherCommunicationScalesAsAnExchangeOfEveryRankWithEveryOther) {
  TraceProfile t;
  t.world = 8;
  t.other_comm_s = 1e-3;
  const LinkModel link = load_preset("dgx1-v100");
  EXPECT_EQ(other_comm_at(t, link, 8), 1e-3);
  EXPECT_EQ(other_comm_at(t, link, 1), 0);
  // Without bytes: the traffic's (N-1)/N.
  EXPECT_NEAR(other_comm_at(t, link, 2), 1e-3 * 0.5 / (7.0 / 8), 1e-12);
  // With them: latency and bandwidth of the tier it spans; past a node, the slower one.
  t.other_comm_bytes = 64 << 20;
  const double in_node = other_comm_at(t, link, 4), across = other_comm_at(t, link, 16);
  EXPECT_LT(in_node, 1e-3);
  EXPECT_GT(across, 2e-3);  // 45 GB/s between nodes against 130 within
  // A trace of one device has none to scale.
  t.world = 1;
  EXPECT_EQ(other_comm_at(t, link, 8), 0);
}

}  // namespace
