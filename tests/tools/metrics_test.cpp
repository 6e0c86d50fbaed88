// dpbench's cross-rank metrics (benchmarks/dpbench/metrics): how long each rank's
// all-reduces wait for the last rank to start them, on records whose answer is known.
#include "benchmarks/dpbench/metrics.h"

#include <gtest/gtest.h>

namespace dpb::bench {
namespace {

constexpr int64_t ms = 1'000'000;

// Each bucket as (start, end); queued 0.1 ms before its start, seen done 0.2 ms after its end.
RankRecord rank(const std::string& host, const std::vector<std::vector<std::pair<int64_t, int64_t>>>& collectives) {
  RankRecord r;
  r.placement.host = host;
  for (const auto& step : collectives) {
    r.collectives.emplace_back();
    for (const auto& [start, end] : step)
      r.collectives.back().push_back({start > 0 ? start - ms / 10 : 0, start, end, end > 0 ? end + ms / 5 : 0});
  }
  return r;
}

TEST(WaitForPeers, EachRankWaitsUntilTheLastStartsAtMostAsLongAsItsAllReduceRan) {
  // Two steps of two buckets. Step 0: rank 1 starts bucket 0 3 ms late and bucket 1
  // 1 ms late. Step 1: rank 0 is late by 2 ms on bucket 0; on bucket 1 rank 1 starts
  // 10 ms late but rank 0's all-reduce ran only 4 ms (its wait is at most that).
  // Times on the steady clock (never 0: 0 means not recorded).
  const int64_t t = 1000 * ms;
  const auto r0 = rank("n1", {{{t, t + 5 * ms}, {t + 6 * ms, t + 8 * ms}}, {{t + 22 * ms, t + 25 * ms}, {t + 30 * ms, t + 34 * ms}}});
  const auto r1 = rank("n1", {{{t + 3 * ms, t + 5 * ms}, {t + 7 * ms, t + 8 * ms}}, {{t + 20 * ms, t + 25 * ms}, {t + 40 * ms, t + 41 * ms}}});
  const auto w = wait_for_peers({r0, r1});
  ASSERT_EQ(w.size(), 2u);
  EXPECT_NEAR(w[0], (3 + 1 + 0 + 4) * 1e-3 / 2, 1e-12);
  EXPECT_NEAR(w[1], (0 + 0 + 2 + 0) * 1e-3 / 2, 1e-12);
}

// Hand-offs only: not the time a bucket queued behind an earlier one, nor the time a
// finished all-reduce waited while the training thread was still computing.
TEST(CollectiveCosts, QueueingAndComputeAreNotHandoffs) {
  const int64_t t = 1000 * ms;
  RankRecord r;
  // Bucket 0: queued at t, started 0.05 ms later, ran 2 ms; the training thread began
  // waiting 5 ms later (still in backward until then) and saw it 0.01 ms after.
  // Bucket 1: queued at t + 1 ms behind bucket 0, started 0.03 ms after bucket 0 ended,
  // ran 1 ms; waited for from t + 2.5 ms, seen 0.02 ms after its end.
  r.collectives.push_back({{t, t + ms / 20, t + 2 * ms + ms / 20, t + 5 * ms + ms / 100, t + 5 * ms},
                           {t + ms, t + 2 * ms + ms / 20 + 3 * ms / 100, t + 3 * ms + ms / 20 + 3 * ms / 100,
                            t + 3 * ms + ms / 20 + 5 * ms / 100, t + 5 * ms / 2}});
  const auto c = collective_costs(r);
  ASSERT_TRUE(c.has_value());
  EXPECT_NEAR(c->collective_s, 3e-3, 1e-12);
  EXPECT_NEAR(c->handoff_s, (0.05 + 0.01 + 0.03 + 0.02) * 1e-3, 1e-9);
}

TEST(CollectiveCosts, TheCollectiveItselfAndTheHandoffsAroundIt) {
  const int64_t t = 1000 * ms;
  const auto r = rank("n1", {{{t, t + 5 * ms}, {t + 6 * ms, t + 8 * ms}}, {{t + 22 * ms, t + 25 * ms}}});
  const auto c = collective_costs(r);
  ASSERT_TRUE(c.has_value());
  EXPECT_NEAR(c->collective_s, (5 + 2 + 3) * 1e-3 / 2, 1e-12);
  EXPECT_NEAR(c->handoff_s, 3 * 0.3e-3 / 2, 1e-12);
  EXPECT_FALSE(collective_costs(rank("n1", {{{0, 0}}})).has_value());
  EXPECT_FALSE(collective_costs(rank("n1", {})).has_value());
}

TEST(WaitForPeers, UnknownAcrossHostsOrWithoutRecords) {
  const auto a = rank("n1", {{{1 * ms, 5 * ms}}});
  EXPECT_TRUE(wait_for_peers({a, rank("n2", {{{2 * ms, 5 * ms}}})}).empty());  // clocks of two hosts
  EXPECT_TRUE(wait_for_peers({a, rank("n1", {})}).empty());                      // steps missing
  EXPECT_TRUE(wait_for_peers({a, rank("n1", {{{0, 0}}})}).empty());              // a start not recorded
  EXPECT_TRUE(wait_for_peers({a}).empty());                                      // one rank waits for no one
}

// DataParallel's split on a GPU, from the device timeline. One 10 ms step: the primary
// (device 0) runs its replica's forward and backward on a worker thread (host spans on
// lane "replica"), and scatters, gathers and reduces on the main thread; its kernels
// belong to whichever span launched them, wherever on the device they ran.
TEST(DpDeviceSplit, ThePrimarysKernelsAreItsReplicasWhereTheReplicaLaunchedThem) {
  constexpr int64_t us = 1'000, ms = 1'000'000;
  const auto span = [](std::string name, trace::Category cat, int device, std::string lane, int64_t b, int64_t e) {
    trace::Interval i;
    i.name = std::move(name);
    i.cat = cat;
    i.device = device;
    i.lane = std::move(lane);
    i.begin_ns = b;
    i.end_ns = e;
    return i;
  };
  const std::vector<trace::Interval> host{
      span("next batch", trace::Category::data, 0, "main", 0, 1 * ms),
      span("scatter", trace::Category::copy, 0, "main", 1 * ms, 2 * ms),
      span("replica forward", trace::Category::compute, 0, "replica", 2 * ms, 4 * ms),
      span("replica forward", trace::Category::compute, 1, "replica", 2 * ms, 4 * ms),
      span("gather", trace::Category::copy, 0, "main", 4 * ms, 5 * ms),
      span("replica backward", trace::Category::compute, 0, "replica", 6 * ms, 8 * ms),
      span("reduce gradients", trace::Category::comm, 0, "main", 8 * ms, 9 * ms)};
  trace::RankTimeline t;
  int64_t corr = 0;
  const auto kernel = [&](int device, int64_t launched, int64_t b, int64_t e) {
    trace::HostCall c;
    c.correlation = ++corr;
    c.begin_ns = launched;
    c.end_ns = launched + 5 * us;
    c.kind = trace::CallKind::launch;
    c.name = t.names.intern("cudaLaunchKernel");
    t.calls.push_back(c);
    trace::DeviceWork w;
    w.device = device;
    w.correlation = corr;
    w.begin_ns = b;
    w.end_ns = e;
    w.name = t.names.intern("sm90_gemm");
    t.work.push_back(w);
  };
  kernel(0, 2100 * us, 2200 * us, 3800 * us);  // the replica's forward
  kernel(0, 3900 * us, 4000 * us, 4100 * us);  // launched by the forward, run after its host span ended
  kernel(0, 4100 * us, 4200 * us, 4600 * us);  // the gather's
  kernel(0, 6500 * us, 6600 * us, 7900 * us);  // the replica's backward
  kernel(0, 8200 * us, 8300 * us, 8900 * us);  // the reduction's
  kernel(1, 2200 * us, 2300 * us, 3500 * us);  // the other replica's, on its own device
  reports::DpStats s;
  dp_device_split(s, t, host, {0, 1}, Window{0, 10 * ms}, 1);
  EXPECT_NEAR(s.primary_replica_s.value_or(-1), 3.0e-3, 1e-12);  // 1.6 + 0.1 + 1.3 ms
  // Each device's replica: the primary's as above, the other device's all its work.
  ASSERT_EQ(s.replica_s.size(), 2u);
  EXPECT_NEAR(s.replica_s[0].value_or(-1), 3.0e-3, 1e-12);
  EXPECT_NEAR(s.replica_s[1].value_or(-1), 1.2e-3, 1e-12);
  EXPECT_NEAR(s.primary_only_s.value_or(-1), 1.0e-3, 1e-12);     // 0.4 + 0.6 ms
  // No device worked and no data was awaited: 10 - 4.0 (device work) - 1 (data) ms.
  EXPECT_NEAR(s.host_only_s.value_or(-1), 5.0e-3, 1e-12);

  // Timing events time the spans themselves (no launches): a span's name says whose it is.
  trace::RankTimeline events;
  const auto timed = [&](const char* name, int64_t b, int64_t e) {
    trace::DeviceWork w;
    w.device = 0;
    w.begin_ns = b;
    w.end_ns = e;
    w.name = events.names.intern(name);
    events.work.push_back(w);
  };
  timed("replica forward", 2300 * us, 3900 * us);
  timed("gather", 4200 * us, 4500 * us);
  timed("replica backward", 6600 * us, 7800 * us);
  dp_device_split(s, events, host, {0, 1}, Window{0, 10 * ms}, 2);
  EXPECT_NEAR(s.primary_replica_s.value_or(-1), 1.4e-3, 1e-12);  // (1.6 + 1.2 ms) over 2 steps
  // Device 1 recorded nothing: not measured, never 0.
  ASSERT_EQ(s.replica_s.size(), 2u);
  EXPECT_FALSE(s.replica_s[1].has_value());
  EXPECT_NEAR(s.primary_only_s.value_or(-1), 0.15e-3, 1e-12);
}

// Each replica waits, after its forward and after its backward, for the latest device's
// same phase: over two steps, device 1 ends its forwards 1 and 3 ms late, device 0 its
// second backward 2 ms late.
TEST(ReplicaWaits, EachDeviceWaitsForTheLatestEndOfEachPhase) {
  constexpr int64_t ms = 1'000'000;
  const auto span = [](const char* name, int device, int64_t b, int64_t e) {
    trace::Interval i;
    i.name = name;
    i.device = device;
    i.lane = "replica";
    i.begin_ns = b;
    i.end_ns = e;
    return i;
  };
  std::vector<trace::Interval> host{
      span("replica forward", 0, 0, 4 * ms),        span("replica forward", 1, 0, 5 * ms),
      span("replica backward", 0, 6 * ms, 10 * ms), span("replica backward", 1, 6 * ms, 10 * ms),
      span("replica forward", 0, 11 * ms, 14 * ms), span("replica forward", 1, 11 * ms, 17 * ms),
      span("replica backward", 0, 18 * ms, 24 * ms), span("replica backward", 1, 18 * ms, 22 * ms)};
  const auto w = replica_waits(host, {0, 1}, Window{0, 30 * ms}, 2);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_NEAR(w[0].value_or(-1), (1 + 3) * 1e-3 / 2, 1e-12);  // 4 ms over 2 steps
  EXPECT_NEAR(w[1].value_or(-1), 2 * 1e-3 / 2, 1e-12);
  // Spans outside the window do not count; a device with no spans: not measured.
  EXPECT_NEAR(replica_waits(host, {0, 1}, Window{0, 12 * ms}, 1)[0].value_or(-1), 1e-3, 1e-12);
  EXPECT_TRUE(replica_waits(host, {0, 2}, Window{0, 30 * ms}, 2).empty());
}

}  // namespace
}  // namespace dpb::bench
