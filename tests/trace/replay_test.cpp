// The replay of a timeline with host time cut (engine/trace/replay.h) on constructed
// timelines whose answers are known: a host-bound step gains what was cut, a device-bound
// one gives it back waiting in its synchronize, one in between gains part; and the input
// made ahead keeps each batch's copy to the device once more.
#include "engine/trace/replay.h"

#include <gtest/gtest.h>

namespace dpb::trace {
namespace {

constexpr int64_t us = 1000;

// Steps of 100 us. In each (from its start B): a kernel of `kernel_us` launched at
// [B, B+2), the input loaded at [B+5, B+45) while it runs, a synchronize at
// [B+50, B+50+sync_us), and a pageable copy to the device at [B+46, B+48).
RankTimeline steps_of(int steps, int64_t kernel_us, int64_t sync_us) {
  RankTimeline t;
  int64_t corr = 1;
  const uint32_t launch = t.names.intern("cudaLaunchKernel"), sync = t.names.intern("cudaStreamSynchronize"),
                 copy = t.names.intern("cudaMemcpyAsync"), kernel = t.names.intern("gemm");
  for (int k = 0; k < steps; ++k) {
    const int64_t b = 100 * k;
    t.steps.emplace_back(b * us, (b + 100) * us);
    t.data_waits.emplace_back((b + 5) * us, (b + 45) * us);
    t.calls.push_back({corr, b * us, (b + 2) * us, CallKind::launch, launch, 1});
    DeviceWork w;
    w.stream = 7;
    w.name = kernel;
    w.begin_ns = (b + 2) * us;
    w.end_ns = (b + 2 + kernel_us) * us;
    w.correlation = corr++;
    t.work.push_back(w);
    t.calls.push_back({corr, (b + 46) * us, (b + 48) * us, CallKind::copy, copy, 1});
    DeviceWork c = w;
    c.work = Work::memory;
    c.copy = CopyKind::h2d;
    c.pinned = 0;
    c.stream = 8;
    c.begin_ns = (b + 46) * us;
    c.end_ns = (b + 47) * us;
    c.correlation = corr++;
    t.work.push_back(c);
    t.calls.push_back({corr++, (b + 50) * us, (b + 50 + sync_us) * us, CallKind::sync, sync, 1});
  }
  return t;
}

std::vector<HostEdit> waits_cut(const RankTimeline& t) {
  std::vector<HostEdit> edits;
  for (const auto& w : t.data_waits) edits.push_back({w.first, w.second, 0});
  return edits;
}

TEST(Replay, AHostBoundStepGainsWhatWasCut) {
  const RankTimeline t = steps_of(3, 20, 1);  // the kernel is done long before the sync
  const HostIndex host(t);
  const StepReplay r = replay_steps(t, host, t.steps, waits_cut(t));
  ASSERT_EQ(r.replayed_ns.size(), 3u);
  EXPECT_EQ(r.measured_median_ns, 100 * us);
  // Cut 40 us; the sync (moved to B+10) now meets the kernel still running until B+22,
  // and returns its 1 us after it: 12 us given back.
  EXPECT_EQ(r.replayed_median_ns, 72 * us);
  EXPECT_EQ(r.cut_ns, 3 * 40 * us);
  EXPECT_EQ(r.device_waited_ns, 3 * 12 * us);
}

TEST(Replay, ADeviceBoundStepGivesItAllBack) {
  const RankTimeline t = steps_of(3, 68, 21);  // the sync waits for the kernel, ending at B+70
  const HostIndex host(t);
  const StepReplay r = replay_steps(t, host, t.steps, waits_cut(t));
  EXPECT_EQ(r.replayed_median_ns, 100 * us) << "the device was the bottleneck: nothing is gained";
  EXPECT_EQ(r.device_waited_ns, 3 * 40 * us);
}

TEST(Replay, NothingCutChangesNothing) {
  const RankTimeline t = steps_of(2, 68, 21);
  const HostIndex host(t);
  const StepReplay r = replay_steps(t, host, t.steps, {});
  EXPECT_EQ(r.replayed_ns, r.measured_ns);
  EXPECT_EQ(r.device_waited_ns, 0);
}

TEST(Replay, TheInputMadeAheadKeepsEachBatchsCopyOnceMore) {
  const RankTimeline t = steps_of(3, 20, 1);
  const HostIndex host(t);
  const auto in = replay_input_ahead(t, host, t.steps);
  ASSERT_TRUE(in);
  EXPECT_EQ(in->batches, 3);
  EXPECT_EQ(in->handover_ns, 3 * 2 * us);  // the 2 us copy call after each wait, again
  // Cut 40 us, 2 us added at the wait's end: the sync moves to B+12 and still meets the
  // kernel (until B+22): the hand-over hides behind it, the step is 72 us as without it.
  EXPECT_EQ(in->replay.replayed_median_ns, 72 * us);
  EXPECT_EQ(in->replay.added_ns, 3 * 2 * us);
  // Copies from pinned memory add nothing.
  RankTimeline pinned = t;
  for (auto& w : pinned.work)
    if (w.copy == CopyKind::h2d) w.pinned = 1;
  const HostIndex host_pinned(pinned);
  EXPECT_EQ(replay_input_ahead(pinned, host_pinned, pinned.steps)->handover_ns, 0);
  // No waits, no input ops: nothing to replay.
  RankTimeline none = t;
  none.data_waits.clear();
  const HostIndex host_none(none);
  EXPECT_FALSE(replay_input_ahead(none, host_none, none.steps));
}

}  // namespace
}  // namespace dpb::trace
