// Device activity records (CUPTI's, decoded) -> timeline -> metrics, on constructed
// records: clock conversion and its residual, overlapping streams, graph kernels, the
// stream-to-lane map, the bound and the dropped count.
#include <gtest/gtest.h>

#include "engine/core/error.h"
#include "engine/trace/activity.h"
#include "engine/trace/analysis.h"

namespace dpb::trace {
namespace {

constexpr int64_t kMs = 1'000'000;

ActivityRecord kernel(int device, uint32_t stream, int64_t start, int64_t end, int64_t corr, uint64_t graph = 0) {
  ActivityRecord r;
  r.kind = ActivityKind::kernel;
  r.device = device;
  r.stream = stream;
  r.start = start;
  r.end = end;
  r.correlation = corr;
  r.graph = graph;
  return r;
}

ActivityRecord runtime(int64_t start, int64_t end, int64_t corr) {
  ActivityRecord r;
  r.kind = ActivityKind::runtime;
  r.start = start;
  r.end = end;
  r.correlation = corr;
  r.thread = 7;
  return r;
}

TEST(ClockConversion, FollowsOffsetAndDriftAndReportsItsResidual) {
  // The GPU clock runs 1e-5 fast and 5 s ahead; reads bracketed by host reads 2 us apart.
  const auto device_at = [](int64_t host) { return 5'000 * kMs + host + host / 100'000; };
  std::vector<ClockPair> pairs;
  for (int64_t host : {int64_t{1'000} * kMs, int64_t{1'500} * kMs, int64_t{2'000} * kMs})
    pairs.push_back({host, device_at(host), 1'000});
  pairs[1].host_ns += 3'000;  // a read disturbed by 3 us
  const ClockConversion c = ClockConversion::fit(pairs);
  EXPECT_NEAR(c.rate(), 1.0 / 1.00001, 1e-9);
  for (int64_t host : {int64_t{1'000} * kMs, int64_t{1'750} * kMs, int64_t{2'000} * kMs})
    EXPECT_LE(std::llabs(c.to_host(device_at(host)) - host), 2) << host;
  EXPECT_EQ(c.residual_ns(), 3'000 + 1'000) << "the disturbed pair's distance plus its uncertainty";
  // One pair: an offset only.
  const ClockConversion one = ClockConversion::fit({pairs.front()});
  EXPECT_EQ(one.to_host(device_at(1'000 * kMs) + 10), 1'000 * kMs + 10);
  EXPECT_THROW(ClockConversion::fit({}), Error);
  EXPECT_THROW(ClockConversion::fit({pairs[2], pairs[0]}), Error);
}

TEST(ActivityLog, OverlappingStreamsGiveBusyOverlapAndExposedCommunication) {
  // One step of 10 ms on device 0: compute on stream 7 for 0-6 ms, NCCL's kernel on
  // stream 9 for 4-8 ms (half of it behind compute), idle 8-10 ms.
  ActivityLog log;
  StreamMap streams;
  streams.add(0, 7, {0, Lane::compute});
  streams.add(0, 9, {0, Lane::communication});
  const int64_t t0 = 100 * kMs;
  log.add(runtime(t0 - kMs, t0 - kMs + 10'000, 1), "cudaLaunchKernel");
  log.add(kernel(0, 7, t0, t0 + 3 * kMs, 1), "volta_sgemm_128x64_nn");
  log.add(runtime(t0 - kMs + 20'000, t0 - kMs + 30'000, 2), "cudaLaunchKernel");
  log.add(kernel(0, 7, t0 + 3 * kMs, t0 + 6 * kMs, 2), "bn_fw_tr_1C11_kernel_NCHW");
  log.add(runtime(t0 + 3 * kMs, t0 + 3 * kMs + 10'000, 3), "ncclGroupEnd");
  log.add(kernel(0, 9, t0 + 4 * kMs, t0 + 8 * kMs, 3), "ncclDevKernel_AllReduce_Sum_f32_RING_LL");
  const ClockConversion same = ClockConversion::fit({{0, 0, 0}});
  RankTimeline t = log.to_timeline(same, streams, {t0, t0 + 10 * kMs});
  ASSERT_EQ(t.work.size(), 3u);
  EXPECT_EQ(t.calls.size(), 3u) << "launch calls before the window are kept for their kernels";
  t.steps = {{t0, t0 + 10 * kMs}};
  AnalysisOptions ao;
  ao.window = Span64{t0, t0 + 10 * kMs};
  const RankAnalysis a = analyze_rank(t, ao);
  ASSERT_EQ(a.devices.size(), 1u);
  const Breakdown& b = a.devices[0].breakdown;
  EXPECT_NEAR(*b.idle_share, 0.2, 1e-9);
  EXPECT_NEAR(*b.compute_share, 0.6, 1e-9);
  EXPECT_NEAR(*b.comm_share, 0.2, 1e-9) << "communication under compute counts as compute (HTA)";
  EXPECT_NEAR(*b.overlap, 0.5, 1e-9);
  ASSERT_TRUE(a.devices[0].exposed_comm_per_step_s);
  EXPECT_NEAR(*a.devices[0].exposed_comm_per_step_s, 0.002, 1e-9);
}

TEST(ActivityLog, StreamsMapToLogicalDevicesAndLanes) {
  // --logical-gpus: logical devices 0 and 1 share GPU 0 on streams 11 and 12; Gloo's
  // staging copies on stream 13 are logical device 1's communication.
  ActivityLog log;
  StreamMap streams;
  streams.add(0, 11, {0, Lane::compute});
  streams.add(0, 12, {1, Lane::compute});
  streams.add(0, 13, {1, Lane::communication});
  log.add(kernel(0, 11, 0, 4 * kMs, 1), "conv_fwd");
  log.add(kernel(0, 12, kMs, 2 * kMs, 2), "conv_fwd");
  ActivityRecord copy;
  copy.kind = ActivityKind::memcpy;
  copy.device = 0;
  copy.stream = 13;
  copy.start = 2 * kMs;
  copy.end = 3 * kMs;
  copy.copy = CopyKind::d2h;
  copy.bytes = 1 << 20;
  copy.pinned = 1;
  log.add(copy, "Memcpy DtoH (Device -> Pinned)");
  ActivityRecord set = copy;
  set.kind = ActivityKind::memset;
  set.stream = 99;  // not registered: the physical device, memory by its kind
  log.add(set, "Memset (Device)");
  const RankTimeline t = log.to_timeline(ClockConversion::fit({{0, 0, 0}}), streams, {0, 10 * kMs});
  ASSERT_EQ(t.work.size(), 4u);
  EXPECT_EQ(t.work[0].device, 0);
  EXPECT_EQ(t.work[1].device, 1);
  EXPECT_EQ(t.work[2].device, 1);
  EXPECT_EQ(t.work[2].work, Work::communication) << "a copy on the communication stream is communication";
  EXPECT_EQ(t.work[2].copy, CopyKind::d2h);
  EXPECT_EQ(t.work[2].bytes, 1 << 20);
  EXPECT_EQ(t.work[3].device, 0);
  EXPECT_EQ(t.work[3].work, Work::memory);
  EXPECT_EQ(t.work[3].copy, CopyKind::memset);
  EXPECT_EQ(t.devices(), (std::vector<int>{0, 1}));
}

TEST(ActivityLog, AnUnnamedStreamBelongsToTheLogicalDeviceThatOwnsItsGpu) {
  // A DDP rank on cuda:1 (GPU 1): NCCL's kernels on its communication stream, a
  // library's kernels on a stream of its own; GPU 0 has no default (several owners).
  ActivityLog log;
  StreamMap streams;
  streams.add(1, 21, {1, Lane::communication});
  streams.add_default(1, {1, Lane::compute});
  log.add(kernel(1, 21, 0, kMs, 1), "ncclDevKernel_AllReduce_Sum_f32_RING_LL");
  log.add(kernel(1, 77, 0, kMs, 2), "cutlass_gemm");
  log.add(kernel(1, 78, 0, kMs, 3), "ncclDevKernel_AllGather_RING_LL");
  log.add(kernel(0, 77, 0, kMs, 4), "cutlass_gemm");
  const RankTimeline t = log.to_timeline(ClockConversion::fit({{0, 0, 0}}), streams, {0, 10 * kMs});
  ASSERT_EQ(t.work.size(), 4u);
  EXPECT_EQ(t.work[0].work, Work::communication);
  EXPECT_EQ(t.work[1].device, 1);
  EXPECT_EQ(t.work[1].work, Work::compute);
  EXPECT_EQ(t.work[2].device, 1);
  EXPECT_EQ(t.work[2].work, Work::communication) << "an NCCL kernel by its name on a stream of its own";
  EXPECT_EQ(t.work[3].device, 0) << "no default: the physical GPU";
}

TEST(ActivityLog, GraphKernelsCountOneByOneAndTheWindowClipsOnTheHostClock) {
  // A CUDA graph replay: one launch, five kernels with the graph's id. The GPU clock is
  // 1 s ahead of the host's; the window is on the host's.
  ActivityLog log;
  const int64_t ahead = 1'000 * kMs;
  log.add(runtime(ahead + 0, ahead + 20'000, 40), "cudaGraphLaunch");
  for (int i = 0; i < 5; ++i)
    log.add(kernel(0, 7, ahead + (2 * i + 1) * kMs, ahead + (2 * i + 2) * kMs, 40, /*graph=*/3), "k");
  log.add(kernel(0, 7, ahead + 20 * kMs, ahead + 21 * kMs, 41), "after_the_window");
  const RankTimeline t =
      log.to_timeline(ClockConversion::fit({{5 * kMs, ahead + 5 * kMs, 0}}), StreamMap{}, {0, 10 * kMs});
  ASSERT_EQ(t.work.size(), 5u);
  for (const auto& w : t.work) EXPECT_EQ(w.correlation, 40);
  EXPECT_EQ(t.work.front().begin_ns, kMs);
  ASSERT_EQ(t.calls.size(), 1u);
  EXPECT_EQ(t.calls[0].kind, CallKind::launch);
  AnalysisOptions ao;
  ao.window = Span64{0, 10 * kMs};
  const RankAnalysis a = analyze_rank(t, ao);
  ASSERT_EQ(a.devices.size(), 1u);
  EXPECT_NEAR(a.devices[0].busy_share(), 0.5, 1e-9);
  EXPECT_EQ(a.launches.kernels, 5);
}

TEST(ActivityLog, IsBoundedAndCountsWhatItDrops) {
  ActivityLog log(4096);
  int kept = 0;
  for (int i = 0; i < 1000; ++i) kept += log.add(kernel(0, 7, i, i + 1, i), "k");
  EXPECT_GT(kept, 10);
  EXPECT_LT(kept, 1000);
  EXPECT_LE(log.bytes(), 4096u);
  EXPECT_EQ(log.records(), static_cast<size_t>(kept));
  EXPECT_EQ(log.dropped(), static_cast<uint64_t>(1000 - kept));
  log.add_dropped(17);  // CUPTI's own count
  EXPECT_EQ(log.dropped(), static_cast<uint64_t>(1000 - kept + 17));
  EXPECT_EQ(ActivityLog::kDefaultBound, size_t{64} << 20);
}

}  // namespace
}  // namespace dpb::trace
