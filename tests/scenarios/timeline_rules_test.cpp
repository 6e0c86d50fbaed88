// The rules that read device timelines (PyTorch GPU traces, dpbench runs with device
// times), each on evidence where it must fire and on its healthy neighbour where it must
// not; the straggler's two kinds at a 20% slowdown; and the rule that keeps the doctor
// from calling a device that idles a quarter of its window healthy.
#include <gtest/gtest.h>

#include "diagnostics/dpdoctor/doctor.h"
#include "reports/schemas.h"
#include "tests/support/schemas.h"

namespace dpb::doctor {
namespace {

// One GPU, 10 steps of 10 ms: busy 92% unless a test says otherwise (its 9% lost, idle
// and exposed communication, stays under the 10 points a healthy verdict leaves
// unexplained).
TimelineEvidence gpu_timeline(int rank = 0) {
  TimelineEvidence t;
  t.rank = rank;
  t.device = "cuda:" + std::to_string(rank);
  t.steps = 10;
  t.step_s = 0.010;
  t.launches_known = true;
  t.breakdown.rank = rank;
  t.breakdown.device = t.device;
  t.breakdown.window_s = 0.1;
  t.breakdown.idle_share = 0.08;
  t.breakdown.compute_share = 0.89;
  t.breakdown.comm_share = 0.01;  // communication not under compute: 1% of the window
  t.breakdown.memory_share = 0.02;
  t.breakdown.overlap = 0.9;
  t.breakdown.idle_breakdown = {0.2, 0.5, 0.3};
  t.compute_per_step_s = 0.0085;
  t.comm_per_step_s = 0.001;
  t.exposed_comm_per_step_s = 0.0001;
  t.host_wait_per_step_s = 0.0002;
  t.launches.kernels = 2000;
  t.launches.kernels_per_step = 200;
  t.launches.median_launch_delay_s = 5e-6;
  t.launches.short_kernel_share = 0.1;
  t.launches.median_kernel_s = 40e-6;
  t.syncs.per_step_s = 0.0001;
  t.syncs.share = 0.01;
  return t;
}

// What the trace analysis charged the idle time to: shares of the 100 ms window.
void attribute(TimelineEvidence& t, std::initializer_list<std::pair<trace::IdleCause, double>> causes) {
  auto& c = t.idle;
  c = {};
  c.window_ns = 100'000'000;
  c.cold_start = {0, 0};
  for (const auto& [cause, share] : causes) {
    const auto ns = static_cast<int64_t>(share * 1e8);
    c.ns[static_cast<size_t>(cause)] += ns;
    c.idle_ns += ns;
    c.small_gap_ns += ns;
  }
  t.breakdown.idle_share = static_cast<double>(c.idle_ns) / 1e8;
}

Evidence single_gpu(const TimelineEvidence& t) {
  Evidence e;
  e.source = "PyTorch profiler trace";
  e.timeline_source = trace::TimelineSource::cupti;
  e.samples_known = false;
  e.hosts_known = false;
  e.gpu = true;
  e.mode = ParallelMode::single;
  e.step_s = t.step_s.value_or(0);
  e.steps = t.steps;
  e.device.push_back({t.device, 1.0 - t.breakdown.idle_share.value_or(0), 0});
  e.breakdown.push_back(t.breakdown);
  e.timelines.push_back(t);
  return e;
}

std::vector<std::string> problems_of(const Diagnosis& d) {
  std::vector<std::string> out;
  for (const auto& f : d.findings)
    if (f.severity != Severity::info) out.push_back(f.id);
  return out;
}

std::vector<std::string> ids(const Evidence& e) {
  const auto d = diagnose(e);
  test::expect_fits(reports::findings_schema(), d.to_json(), "the diagnosis");
  std::vector<std::string> out;
  for (const auto& f : d.findings) out.push_back(f.id);
  return out;
}

TEST(TimelineRules, AHealthyGpuIsHealthy) {
  const auto d = diagnose(single_gpu(gpu_timeline()));
  EXPECT_TRUE(d.healthy);
  EXPECT_TRUE(d.findings.empty());
  ASSERT_EQ(d.ranks.size(), 1u);  // the breakdown table travels with the verdict
  std::ostringstream text;
  print_diagnosis(d, text, /*verbose=*/true);
  EXPECT_NE(text.str().find("time per device (cupti times)"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("cuda:0 92% busy (cupti times)"), std::string::npos) << text.str();
}

TEST(TimelineRules, GpuStarvedByHost) {
  using trace::IdleCause;
  auto t = gpu_timeline();
  attribute(t, {{IdleCause::launch_overhead, 0.70}, {IdleCause::device_wait, 0.08}});
  t.launches.short_kernel_share = 0.8;
  EXPECT_EQ(ids(single_gpu(t)), std::vector<std::string>{"gpu-starved-by-host"});
  // Idle, but not for the host: work queued on the device waited on something else.
  // (The 4% between launches is said, as advice, and claims its share.)
  attribute(t, {{IdleCause::launch_overhead, 0.04}, {IdleCause::device_wait, 0.74}});
  EXPECT_EQ(problems_of(diagnose(single_gpu(t))), std::vector<std::string>{"unexplained-idle"});
  // Between launches 8% of the window: said as advice, not a warning.
  attribute(t, {{IdleCause::launch_overhead, 0.08}, {IdleCause::device_wait, 0.04}});
  const auto d = diagnose(single_gpu(t));
  EXPECT_TRUE(d.healthy);
  ASSERT_EQ(d.findings.size(), 1u);
  EXPECT_EQ(d.findings[0].severity, Severity::info);
}

TEST(TimelineRules, HostSyncStallsNameTheirOps) {
  using trace::IdleCause;
  auto t = gpu_timeline();
  t.syncs.share = 0.35;
  t.syncs.per_step_s = 0.0035;
  t.syncs.calls = 100;
  t.syncs.top_ops = {{"aten::item", 0.03, 90}, {"aten::to", 0.005, 10}};
  // The device drained while the host blocked in .item(), then waited for its launches.
  attribute(t, {{IdleCause::host_sync, 0.33}, {IdleCause::launch_overhead, 0.03}, {IdleCause::device_wait, 0.04}});
  t.idle.sync_ops = {{"aten::item", 30'000'000, 10, 4'000'000}, {"aten::to", 3'000'000, 1, 3'000'000}};
  const auto d = diagnose(single_gpu(t));
  ASSERT_EQ(problems_of(d), std::vector<std::string>{"host-sync-stalls"});
  EXPECT_EQ(d.findings[0].id, "host-sync-stalls");
  EXPECT_NE(d.findings[0].title.find("aten::item"), std::string::npos) << d.findings[0].title;
  // The host blocks as long, but on a busy device (the gaps did not begin while it
  // blocked): harmless, whatever the time it spent blocked.
  attribute(t, {{IdleCause::launch_overhead, 0.03}, {IdleCause::device_wait, 0.02}});
  const auto busy = ids(single_gpu(t));
  EXPECT_EQ(std::count(busy.begin(), busy.end(), "host-sync-stalls"), 0);
  EXPECT_TRUE(diagnose(single_gpu(t)).healthy);
}

TEST(TimelineRules, PageableCopiesAndCopyBoundInput) {
  auto t = gpu_timeline();
  t.copies.copies = 10;
  t.copies.h2d_bytes = 10 * (64 << 20);
  t.copies.pageable_bytes = t.copies.h2d_bytes;
  t.copies.pageable_s = 0.02;  // 2 ms of each 10 ms step
  EXPECT_EQ(ids(single_gpu(t)), std::vector<std::string>{"pageable-copies"});
  t.copies.pageable_bytes = 0;  // pinned: overlappable
  t.copies.pinned_bytes = t.copies.h2d_bytes;
  t.copies.pageable_s = 0;
  EXPECT_TRUE(ids(single_gpu(t)).empty());
  t.breakdown.memory_share = 0.3;  // but copies fill a third of the device's time
  EXPECT_EQ(ids(single_gpu(t)), std::vector<std::string>{"pageable-copies"});
}

Evidence ddp(std::vector<TimelineEvidence> ranks) {
  Evidence e = single_gpu(ranks[0]);
  e.mode = ParallelMode::ddp;
  e.world = static_cast<int>(ranks.size());
  e.device.clear();
  e.breakdown.clear();
  e.timelines.clear();
  for (const auto& t : ranks) {
    e.ranks.push_back({*t.rank, "", t.device, {"gpu " + std::to_string(*t.rank)}, t.compute_per_step_s.value_or(0),
                       t.comm_per_step_s.value_or(0), t.step_s.value_or(0), 1 - t.breakdown.idle_share.value_or(0), 0,
                       {}, {t.host_wait_per_step_s.value_or(0)}});
    e.device.push_back({"rank " + std::to_string(*t.rank) + " (" + t.device + ")", 1 - *t.breakdown.idle_share, 0});
    e.breakdown.push_back(t.breakdown);
    e.timelines.push_back(t);
  }
  return e;
}

TEST(TimelineRules, ExposedCommunicationFromNcclKernels) {
  std::vector<TimelineEvidence> ranks{gpu_timeline(0), gpu_timeline(1)};
  EXPECT_TRUE(ids(ddp(ranks)).empty());
  for (auto& t : ranks) {
    t.exposed_comm_per_step_s = 0.004;  // 40% of the step, hidden 16%
    t.breakdown.comm_share = 0.4;       // communication not under compute: 40% of the window
    t.breakdown.compute_share = 0.48;
    t.breakdown.overlap = 0.16;
  }
  const auto d = diagnose(ddp(ranks));
  ASSERT_EQ(d.findings.size(), 1u);
  EXPECT_EQ(d.findings[0].id, "exposed-communication");
  EXPECT_EQ(d.primary, "exposed-communication");
  // It accounts for the exposed 40% of each rank's window; the 8% idle is left over.
  ASSERT_EQ(d.budget.size(), 2u);
  EXPECT_NEAR(d.budget[0].explained.at(0).second, 0.4, 1e-9);
  EXPECT_NEAR(d.budget[0].unexplained_share, 0.08, 1e-9);
}

TEST(TimelineRules, StragglersOfBothKindsAtTwentyPercent) {
  std::vector<TimelineEvidence> ranks{gpu_timeline(0), gpu_timeline(1), gpu_timeline(2), gpu_timeline(3)};
  // Jitter of a few percent is not a straggler.
  ranks[2].compute_per_step_s = 0.0089;
  EXPECT_TRUE(ids(ddp(ranks)).empty());
  // A device 20% slower: 10.2 ms against 8.5 ms.
  ranks[2].compute_per_step_s = 0.0102;
  auto d = diagnose(ddp(ranks));
  ASSERT_EQ(d.findings.size(), 1u);
  EXPECT_EQ(d.findings[0].id, "straggler-rank");
  EXPECT_EQ(d.findings[0].evidence["slow_rank"], 2);
  EXPECT_EQ(d.findings[0].evidence["kind"], "slow device");
  // A host-side straggler: its device computes as long, and waits 2 ms a step for its host.
  ranks[2].compute_per_step_s = 0.0085;
  ranks[1].host_wait_per_step_s = 0.0022;
  d = diagnose(ddp(ranks));
  ASSERT_EQ(d.findings.size(), 1u);
  EXPECT_EQ(d.findings[0].evidence["slow_rank"], 1);
  EXPECT_EQ(d.findings[0].evidence["kind"], "host side");
}

TEST(TimelineRules, StragglersAreJudgedStepByStep) {
  // Two ranks whose steps the machine slows together (150 ms or 230 ms): not stragglers,
  // even when their medians differ; a rank slower in every step by 20% is one.
  Evidence e = ddp({gpu_timeline(0), gpu_timeline(1)});
  e.step_s = 0.25;
  e.ranks[0].compute_steps_s = {0.150, 0.150, 0.230, 0.230, 0.230, 0.150};
  e.ranks[1].compute_steps_s = {0.151, 0.149, 0.229, 0.231, 0.150, 0.150};
  e.ranks[0].compute_s = 0.19;  // medians of two modes
  e.ranks[1].compute_s = 0.15;
  EXPECT_TRUE(ids(e).empty());
  e.ranks[1].compute_steps_s = {0.180, 0.181, 0.276, 0.277, 0.275, 0.180};
  const auto d = diagnose(e);
  ASSERT_EQ(d.findings.size(), 1u);
  EXPECT_EQ(d.findings[0].evidence["slow_rank"], 1);
}

TEST(TimelineRules, DataParallelOnFewerGpusThanVisibleNamesTheIdleOnes) {
  Evidence e = single_gpu(gpu_timeline());
  e.mode = ParallelMode::dp;
  e.has_dp = true;
  e.scatter_calls = 10;
  e.visible = 4;
  for (int d = 1; d < 4; ++d) e.device.push_back({"cuda:" + std::to_string(d), 0.0, 0});
  const auto d = diagnose(e);
  ASSERT_FALSE(d.findings.empty());
  EXPECT_EQ(d.findings[0].id, "dataparallel-idle-gpus");
  EXPECT_NE(d.findings[0].title.find("cuda:1, cuda:2, cuda:3"), std::string::npos) << d.findings[0].title;
  e.device.resize(1);  // device_ids cover all it sees: 1 visible GPU
  e.visible = 1;
  EXPECT_TRUE(ids(e).empty());
}

// The verdict follows the budget: never healthy while a device loses a quarter of its
// window, or while more than 10 points of it are unexplained.
TEST(TimelineRules, NeverHealthyWhileADeviceLosesAQuarterOrTenPointsAreUnexplained) {
  using trace::IdleCause;
  auto t = gpu_timeline();
  attribute(t, {{IdleCause::device_wait, 0.09}});
  EXPECT_TRUE(diagnose(single_gpu(t)).healthy);
  attribute(t, {{IdleCause::device_wait, 0.12}});  // 12 points no finding explains
  EXPECT_FALSE(diagnose(single_gpu(t)).healthy);
  EXPECT_EQ(problems_of(diagnose(single_gpu(t))), std::vector<std::string>{"unexplained-idle"});
  attribute(t, {{IdleCause::device_wait, 0.26}});
  const auto d = diagnose(single_gpu(t));
  EXPECT_FALSE(d.healthy);
  ASSERT_EQ(d.findings.size(), 1u);
  EXPECT_EQ(d.findings[0].id, "unexplained-idle");
  EXPECT_NEAR(d.findings[0].evidence["idle_causes"]["device_wait"].get<double>(), 0.26, 1e-9);
  // A quarter lost to idle time and exposed communication together: not healthy, and the
  // finding that explains the most of it is the warning, though each is under its own line.
  attribute(t, {{IdleCause::launch_overhead, 0.13}});
  t.breakdown.comm_share = 0.13;
  t.breakdown.overlap = 0.2;
  const auto both = diagnose(single_gpu(t));
  EXPECT_FALSE(both.healthy);
  EXPECT_EQ(both.budget.at(0).unexplained_share, 0.0);
  EXPECT_EQ(problems_of(both).size(), 1u);
  t.breakdown.comm_share = 0.01;
  t.breakdown.overlap = 0.9;
  // An explained idle device gets its explanation, not "unexplained".
  attribute(t, {{IdleCause::data_loading, 0.24}, {IdleCause::device_wait, 0.02}});
  EXPECT_EQ(ids(single_gpu(t)), std::vector<std::string>{"input-bound"});
  // Small causes that add up: the one that explains the most becomes the warning.
  attribute(t, {{IdleCause::data_loading, 0.04}, {IdleCause::launch_overhead, 0.12}, {IdleCause::device_wait, 0.09}});
  const auto small = diagnose(single_gpu(t));
  EXPECT_FALSE(small.healthy);
  EXPECT_EQ(small.primary, "gpu-starved-by-host");
  EXPECT_EQ(problems_of(small), std::vector<std::string>{"gpu-starved-by-host"});
}

TEST(TimelineRules, ACpuOnlyTraceSaysItHasNoDeviceActivity) {
  Evidence e;
  e.source = "PyTorch profiler trace";
  e.device_activity = false;
  e.samples_known = false;
  e.step_s = 0.01;
  const auto d = diagnose(e);
  std::ostringstream text;
  print_diagnosis(d, text);
  EXPECT_NE(text.str().find("no device activity recorded"), std::string::npos) << text.str();
  EXPECT_EQ(text.str().find("cuda:0"), std::string::npos) << text.str();
}

}  // namespace
}  // namespace dpb::doctor
