// dpbench's figures from a device timeline (benchmarks/dpbench/device_timing): the
// measured steps of a rank analysed on activity records whose answer is known (what CUPTI
// hands over, after decoding: tests/cuda/cupti_decode_test.cpp), the rank's busy,
// compute, communication and exposed communication taken from them instead of host
// spans, and the trace lanes and launch flows they become. The collectors themselves run
// on a GPU (tests/cuda/device_activity_test.cpp).
#include "benchmarks/dpbench/device_timing.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "engine/trace/activity.h"
#include "engine/trace/chrome_trace.h"

namespace dpb::bench {
namespace {

constexpr int64_t us = 1'000, ms = 1'000'000;
constexpr uint32_t kCompute = 7, kComm = 13;

trace::ActivityRecord device_record(trace::ActivityKind kind, int64_t start, int64_t end, uint32_t stream,
                                    int64_t correlation) {
  trace::ActivityRecord r;
  r.kind = kind;
  r.start = start;
  r.end = end;
  r.stream = stream;
  r.correlation = correlation;
  return r;
}

trace::ActivityRecord launch(int64_t start, int64_t correlation) {
  trace::ActivityRecord r;
  r.kind = trace::ActivityKind::runtime;
  r.start = start;
  r.end = start + 5 * us;
  r.correlation = correlation;
  r.thread = 1;
  return r;
}

// Two 6 ms steps on the GPU's clock (0 = the host's 1 s). In each: a 4 ms compute kernel
// from 0.5 ms, an NCCL all-reduce on the communication stream from 3.5 ms to 5.5 ms (1 ms
// under the kernel, 1 ms exposed), a 0.25 MB host-to-device copy at 0.1 ms, each launched
// 50 us before it starts.
struct Fixture {
  trace::ActivityLog log;
  trace::StreamMap streams;
  trace::ClockConversion clock = trace::ClockConversion::fit({{1000 * ms, 0, 0}});
  std::vector<StepRecord> measured;

  Fixture() {
    streams.add(0, kCompute, {0, trace::Lane::compute});
    streams.add(0, kComm, {0, trace::Lane::communication});
    int64_t corr = 1;
    for (int s = 0; s < 2; ++s) {
      const int64_t t = s * 6 * ms;
      auto copy = device_record(trace::ActivityKind::memcpy, t + 100 * us, t + 200 * us, kCompute, corr);
      copy.copy = trace::CopyKind::h2d;
      copy.bytes = 250'000;
      copy.pinned = 1;
      log.add(launch(t + 50 * us, corr++), "cudaMemcpyAsync");
      log.add(copy, "memcpy");
      log.add(launch(t + 450 * us, corr), "cudaLaunchKernel");
      log.add(device_record(trace::ActivityKind::kernel, t + 500 * us, t + 4500 * us, kCompute, corr++), "sm90_gemm");
      log.add(launch(t + 3450 * us, corr), "cuLaunchKernelEx");
      log.add(device_record(trace::ActivityKind::kernel, t + 3500 * us, t + 5500 * us, kComm, corr++),
              "ncclDevKernel_AllReduce_Sum_f32_RING_LL");
      StepRecord r;
      r.step = s;
      r.begin_ns = 1000 * ms + t;
      r.end_ns = r.begin_ns + 6 * ms;
      measured.push_back(r);
    }
  }
  DeviceFigures figures() const {
    return device_figures(log.to_timeline(clock, streams, {1000 * ms, 1012 * ms}), trace::TimelineSource::cupti,
                          measured);
  }
};

TEST(DeviceTiming, RankFiguresComeFromTheDeviceTimelineNotHostSpans) {
  const Fixture fx;
  const DeviceFigures f = fx.figures();
  EXPECT_EQ(f.analysis.steps, 2);
  RankMetrics m;  // as host spans left it: nonsense the device figures must replace
  m.step_median_s = 6e-3;
  m.busy_fraction = 1.0;
  m.compute_s = 1.0;
  m.comm_s = 9.0;
  m.exposed_comm_s = 9.0;
  const Window w = measured_window(fx.measured);
  apply_device_figures(f, 0, w, m);
  // Busy: 0.1 ms copy + 0.5..5.5 ms kernels = 5.1 of 6 ms.
  EXPECT_NEAR(m.busy_fraction, 5.1 / 6, 1e-9);
  EXPECT_NEAR(m.compute_s, 4e-3, 1e-12);
  EXPECT_NEAR(m.comm_s, 2e-3, 1e-12);
  EXPECT_NEAR(m.exposed_comm_s, 1e-3, 1e-12);
  EXPECT_NEAR(m.overlap_ratio, 0.5, 1e-9);
  EXPECT_NEAR(m.exposed_share, 1.0 / 6, 1e-9);
  EXPECT_NEAR(m.comm_share, 1.0 / 6, 1e-9);  // the exposed part: compute takes precedence
  EXPECT_NEAR(m.memory_share, 0.1 / 6, 1e-9);
  EXPECT_NEAR(m.window_s, 12e-3, 1e-12);
  // Launches are known from CUPTI: the gap before each step's first copy is the host's.
  EXPECT_EQ(f.analysis.launches.kernels, 4);
  ASSERT_NE(f.analysis.device(0), nullptr);
  EXPECT_TRUE(f.analysis.device(0)->breakdown.idle_breakdown.host_wait.has_value());
}

// NCCL's work has no host time: each step's bucket takes that step's all-reduce kernel.
TEST(DeviceTiming, BucketsWhoseAllReduceRanOnTheDeviceTakeTheirKernelsTimes) {
  Fixture fx;
  const DeviceFigures f = fx.figures();
  std::vector<StepRecord> measured = fx.measured;
  BucketRecord b;
  b.launch_ns = measured[0].begin_ns + 3400 * us;
  measured[0].buckets = {b};
  // Two buckets against one kernel: which is which cannot be told, so neither is said.
  measured[1].buckets = {b, b};
  measured[1].buckets[0].launch_ns += 6 * ms;
  measured[1].buckets[1].launch_ns += 6 * ms + 10 * us;
  EXPECT_EQ(fill_bucket_times(f, 0, measured), 1);
  EXPECT_EQ(measured[0].buckets[0].comm_start_ns, 1000 * ms + 3500 * us);
  EXPECT_EQ(measured[0].buckets[0].comm_end_ns, 1000 * ms + 5500 * us);
  EXPECT_EQ(measured[1].buckets[0].comm_start_ns, 0);
  EXPECT_EQ(measured[1].buckets[1].comm_start_ns, 0);
  // A bucket the process group timed (Gloo's host-side all-reduce) keeps its times.
  measured[1].buckets = {b};
  measured[1].buckets[0].comm_start_ns = 1;
  measured[1].buckets[0].comm_end_ns = 2;
  EXPECT_EQ(fill_bucket_times(f, 0, measured), 0);
  EXPECT_EQ(measured[1].buckets[0].comm_start_ns, 1);
  // Another device's kernels, or timing events (spans, not kernels), time no bucket.
  measured[1].buckets[0].comm_start_ns = 0;
  EXPECT_EQ(fill_bucket_times(f, 1, measured), 0);
  DeviceFigures events = fx.figures();
  events.source = trace::TimelineSource::cuda_events;
  EXPECT_EQ(fill_bucket_times(events, 0, measured), 0);
  EXPECT_EQ(fill_bucket_times(f, 0, measured), 1);
  EXPECT_EQ(measured[1].buckets[0].comm_start_ns, 1000 * ms + 9500 * us);
}

TEST(DeviceTiming, ADeviceThatRanNothingWasIdleTheWholeWindow) {
  const Fixture fx;
  const DeviceFigures f = fx.figures();
  const Window w = measured_window(fx.measured);
  const trace::Breakdown b = device_breakdown(f, 3, w);
  EXPECT_EQ(b.idle_share, 1.0);
  EXPECT_NEAR(b.window_s, 12e-3, 1e-12);
  RankMetrics m;
  m.compute_s = 5;
  apply_device_figures(f, 3, w, m);
  EXPECT_EQ(m.busy_fraction, 0.0);
  EXPECT_EQ(m.compute_s, 0.0);
}

TEST(DeviceTiming, EachStreamIsALaneAndEachLaunchFlowsToItsWork) {
  const Fixture fx;
  const DeviceFigures f = fx.figures();
  const auto rows = device_intervals(f);
  std::map<std::string, int> lanes;
  for (const auto& i : rows) ++lanes[i.lane];
  EXPECT_EQ(lanes["gpu stream 7"], 4);   // two copies, two kernels
  EXPECT_EQ(lanes["gpu stream 13"], 2);  // the all-reduces
  EXPECT_EQ(lanes["cuda api"], 6);
  for (const auto& i : rows)
    EXPECT_EQ(i.cat == trace::Category::comm, i.lane == "gpu stream 13") << i.name;

  trace::TraceProcess p;
  p.name = "rank 0 (cuda)";
  p.intervals = rows;
  const auto j = trace::chrome_trace({p}, 1000 * ms, nlohmann::json::object());
  std::set<int64_t> starts, ends;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "s") starts.insert(e["id"].get<int64_t>());
    if (e["ph"] == "f") {
      ends.insert(e["id"].get<int64_t>());
      EXPECT_EQ(e["bp"], "e");
    }
  }
  EXPECT_EQ(starts.size(), 6u) << "one flow per launch";
  EXPECT_EQ(starts, ends) << "every flow ends at its work";
}

TEST(DeviceTiming, TimingEventsHaveNoLaunchesToBlame) {
  // What the events collector gives: one interval per span, no calls.
  trace::RankTimeline t;
  trace::DeviceWork fwd;
  fwd.begin_ns = 1000 * ms;
  fwd.end_ns = 1003 * ms;
  fwd.name = t.names.intern("forward");
  t.work.push_back(fwd);
  StepRecord r;
  r.begin_ns = 1000 * ms;
  r.end_ns = 1004 * ms;
  const DeviceFigures f = device_figures(t, trace::TimelineSource::cuda_events, {r});
  ASSERT_NE(f.analysis.device(0), nullptr);
  EXPECT_NEAR(f.analysis.device(0)->busy_share(), 0.75, 1e-9);
  EXPECT_FALSE(f.analysis.device(0)->breakdown.idle_breakdown.host_wait.has_value())
      << "idle causes unknown without launches";
}

}  // namespace
}  // namespace dpb::bench
