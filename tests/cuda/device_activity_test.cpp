// The device timeline's collectors on a GPU (engine/backend/device_activity.h): CUPTI's
// records of real kernels, copies and launches become the timeline's work on the right
// logical device and lane, linked to their launch calls, on the host's clock; CUDA timing
// events time a span's work (and ops::DeviceMarks what ran between two marks) on the
// device. Skipped without a GPU (and the CUPTI test when another profiler holds CUPTI,
// saying so).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <unordered_set>

#include "engine/backend/device_activity.h"
#include "engine/backend/ops.h"
#include "engine/core/clock.h"
#include "engine/trace/analysis.h"
#include "engine/trace/timeline.h"
#include "tests/cuda/cuda_test_util.h"

namespace dpb {
namespace {

const Device kGpu = Device::cuda(0);

// Work for the GPU: a few linear layers forward, a host-to-device copy first.
void some_work() {
  Tensor x = test::random_tensor({256, 512}, 1).to(kGpu);
  Tensor w = test::random_tensor({512, 512}, 2).to(kGpu);
  Tensor b = test::random_tensor({512}, 3).to(kGpu);
  Tensor y = Tensor::empty({256, 512}, kGpu);
  for (int i = 0; i < 8; ++i) ops::linear_forward(x, ops::compute_weight(w), b, y);
}

TEST(CudaDeviceActivity, CuptiRecordsKernelsCopiesAndLaunchesOnTheHostClock) {
  DPB_REQUIRE_GPU();
  ops::synchronize(kGpu);
  std::string why;
  const int64_t t0 = now_ns();
  auto a = start_cupti_activity({kGpu}, &why);
  if (!a) GTEST_SKIP() << why;
  EXPECT_EQ(a->source(), trace::TimelineSource::cupti);
  some_work();
  ops::synchronize(kGpu);
  const int64_t t1 = now_ns();
  a->stop();
  EXPECT_LT(a->clock_residual_ns(), 1'000'000) << "the GPU clock converted within 1 ms of the host's";
  const trace::RankTimeline t = a->timeline({t0, t1});
  int kernels = 0, copies = 0;
  std::unordered_set<int64_t> launched;
  for (const auto& w : t.work) {
    EXPECT_EQ(w.device, 0);
    // On the host's clock: within the window, give or take the conversion.
    EXPECT_GE(w.begin_ns, t0 - a->clock_residual_ns() - 1000);
    EXPECT_LE(w.end_ns, t1 + a->clock_residual_ns() + 1000);
    if (w.work == trace::Work::compute) ++kernels;
    if (w.copy == trace::CopyKind::h2d) {
      ++copies;
      EXPECT_GT(w.bytes, 0);
    }
    if (w.correlation >= 0) launched.insert(w.correlation);
  }
  EXPECT_GE(kernels, 8) << "eight linear layers ran at least a kernel each";
  EXPECT_GE(copies, 3) << "three tensors copied to the GPU";
  int launches = 0;
  for (const auto& c : t.calls)
    if (c.kind == trace::CallKind::launch && launched.count(c.correlation)) ++launches;
  EXPECT_GE(launches, 8) << "kernels linked to their launch calls by correlation id";
  trace::AnalysisOptions o;
  o.window = trace::Span64{t0, t1};
  const trace::RankAnalysis r = trace::analyze_rank(t, o);
  ASSERT_NE(r.device(0), nullptr);
  EXPECT_GT(r.device(0)->busy_share(), 0.0);
  EXPECT_GE(r.launches.kernels, 8);
}

TEST(CudaDeviceActivity, TimingEventsTimeEachSpanOnItsStream) {
  DPB_REQUIRE_GPU();
  ops::synchronize(kGpu);
  const int64_t t0 = now_ns();
  auto a = start_event_activity({kGpu});
  EXPECT_EQ(a->source(), trace::TimelineSource::cuda_events);
  int64_t host_begin = 0;
  {
    trace::Span span("forward", trace::Category::compute, 0);
    host_begin = now_ns();
    some_work();
  }
  { trace::Span wait("waiting for data", trace::Category::data, 0); }  // never timed: the host's
  ops::synchronize(kGpu);
  const int64_t t1 = now_ns();
  a->stop();
  EXPECT_EQ(a->dropped(), 0u);
  const trace::RankTimeline t = a->timeline({t0, t1});
  ASSERT_EQ(t.work.size(), 1u) << "one span timed (the data wait is not)";
  const auto& w = t.work.front();
  EXPECT_EQ(t.names.name(w.name), "forward");
  EXPECT_EQ(w.work, trace::Work::compute);
  EXPECT_GT(w.end_ns, w.begin_ns);
  // The device finished the span's work after the host began queueing it.
  EXPECT_GE(w.end_ns, host_begin - a->clock_residual_ns());
  EXPECT_LE(w.end_ns, t1 + a->clock_residual_ns());
  EXPECT_TRUE(t.calls.empty()) << "events time spans, not launches";
}

TEST(CudaDeviceActivity, DeviceMarksTimeWorkOnTheGpuClock) {
  DPB_REQUIRE_GPU();
  ops::synchronize(kGpu);
  const int64_t t0 = now_ns();
  ops::DeviceMarks marks(kGpu);
  const size_t a = marks.mark();
  some_work();
  const size_t b = marks.mark();
  const double s = marks.seconds(a, b);  // waits for b
  const double host = static_cast<double>(now_ns() - t0) * 1e-9;
  EXPECT_GT(s, 0.0);
  EXPECT_LE(s, host) << "the device ran the work within the host's wall time around it";
}

}  // namespace
}  // namespace dpb
