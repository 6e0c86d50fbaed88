// The one analysis of device timelines on constructed timelines whose answers are known:
// HTA's kernel classes and window, the temporal breakdown and overlap, idle time by
// cause, launches, host syncs and their ops, copies, and which rank starts collectives
// last.
#include "engine/trace/analysis.h"

#include <gtest/gtest.h>

namespace dpb::trace {
namespace {

constexpr int64_t us = 1000;

struct Builder {
  RankTimeline t;
  int64_t next_corr = 1;
  // Device work on `device`/`stream` over [b, e) us, launched by a call over [cb, ce) us.
  void work(std::string_view name, int64_t b, int64_t e, int64_t stream = 7, int device = 0, int64_t cb = -1,
            int64_t ce = -1, CopyKind copy = CopyKind::none, int64_t bytes = -1, int8_t pinned = -1) {
    DeviceWork w;
    w.device = device;
    w.stream = stream;
    w.name = t.names.intern(name);
    w.work = classify_kernel(name);
    w.begin_ns = b * us;
    w.end_ns = e * us;
    w.copy = copy;
    w.bytes = bytes;
    w.pinned = pinned;
    if (cb >= 0) {
      w.correlation = next_corr++;
      const std::string call = copy == CopyKind::none ? "cudaLaunchKernel" : "cudaMemcpyAsync";
      t.calls.push_back({w.correlation, cb * us, ce * us, classify_runtime_call(call), t.names.intern(call), 1});
    }
    t.work.push_back(w);
  }
};

TEST(KernelClasses, FollowHta) {
  EXPECT_EQ(classify_kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"),
            Work::communication);
  EXPECT_EQ(classify_kernel("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"), Work::communication);
  EXPECT_EQ(classify_kernel("Memcpy HtoD (Pageable -> Device)"), Work::memory);
  EXPECT_EQ(classify_kernel("Memset (Device)"), Work::memory);
  EXPECT_EQ(classify_kernel("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>"),
            Work::compute);
  EXPECT_EQ(classify_kernel("sm90_xmma_gemm_bf16bf16_bf16f32"), Work::compute);
  EXPECT_EQ(classify_kernel("cudaMemcpyToSymbolKernel"), Work::other);
  EXPECT_EQ(classify_runtime_call("cudaStreamSynchronize"), CallKind::sync);
  EXPECT_EQ(classify_runtime_call("cudaLaunchKernel"), CallKind::launch);
  EXPECT_EQ(classify_runtime_call("cudaMemcpyAsync"), CallKind::copy);
}

// The collective a communication kernel runs, from NCCL's names old (2.x ncclKernel_*, as
// in the DLRM traces of the corpus) and new (2.19+ ncclDevKernel_*).
TEST(KernelClasses, CollectiveKindFromNcclNames) {
  EXPECT_EQ(collective_kind("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"),
            CollectiveKind::all_reduce);
  EXPECT_EQ(collective_kind("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"),
            CollectiveKind::send_recv);
  EXPECT_EQ(collective_kind("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
            CollectiveKind::all_gather);
  EXPECT_EQ(collective_kind("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
            CollectiveKind::reduce_scatter);
  EXPECT_EQ(collective_kind("ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
            CollectiveKind::broadcast);
  EXPECT_EQ(collective_kind("ncclDevKernel_Reduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
            CollectiveKind::reduce);
  EXPECT_EQ(collective_kind("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)"), CollectiveKind::other);
  // Communication that is not NCCL's, by what the kernel does: PyTorch's symmetric memory
  // (as in the corpus' B200 trace), vLLM's and TensorRT-LLM's custom all-reduces, DeepEP's
  // dispatch and combine (an all-to-all), NVSHMEM.
  for (const char* k : {"void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, "
                        "unsigned long, unsigned int**, unsigned long, unsigned long)",
                        "void c10d::symmetric_memory::one_shot_all_reduce_kernel<float, 16, 8>(float**, float*)",
                        "void c10d::symmetric_memory::two_shot_all_reduce_kernel<c10::BFloat16, 16, 8>()",
                        "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*)",
                        "void tensorrt_llm::kernels::oneShotAllReduceKernel<__nv_bfloat16, 8>(AllReduceParams)"}) {
    EXPECT_EQ(classify_kernel(k), Work::communication) << k;
    EXPECT_EQ(collective_kind(k), CollectiveKind::all_reduce) << k;
  }
  for (const char* k : {"void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*)",
                        "void deep_ep::internode_ll::combine<true, 7168>(void*, void*, int*)",
                        "void at::native::all_to_all_kernel<float>(float*)"}) {
    EXPECT_EQ(classify_kernel(k), Work::communication) << k;
    EXPECT_EQ(collective_kind(k), CollectiveKind::all_to_all) << k;
  }
  EXPECT_EQ(classify_kernel("void nvshmemi_transfer_kernel<float>(float*)"), Work::communication);
  // Names that only look alike stay compute: a gather, a reduction.
  EXPECT_EQ(classify_kernel("void at::native::vectorized_gather_kernel<16, long>(char*, char*, long*, int)"),
            Work::compute);
  EXPECT_EQ(classify_kernel("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>"), Work::compute);
  EXPECT_EQ(collective_kind("void cutlass::Kernel<AllGather_fused>"), CollectiveKind::other);
  EXPECT_STREQ(collective_kind_name(CollectiveKind::reduce_scatter), "reduce-scatter");
}

TEST(TemporalBreakdown, SharesAddUpAndOverlapIsCommUnderCompute) {
  Builder b;
  // Window [0, 100): compute [0, 40) and [60, 80); comm [30, 70) on another stream;
  // a copy [85, 95); idle [40, 60) is covered by comm, so idle = [80, 85) + [95, 100).
  b.work("gemm", 0, 40, 7);
  b.work("gemm", 60, 80, 7);
  b.work("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 30, 70, 13);
  b.work("Memcpy DtoH (Device -> Pinned)", 85, 95, 7, 0, -1, -1, CopyKind::d2h, 1 << 20, 1);
  AnalysisOptions o;
  o.window = Span64{0, 100 * us};
  const RankAnalysis a = analyze_rank(b.t, o);
  ASSERT_EQ(a.devices.size(), 1u);
  const Breakdown& br = a.devices[0].breakdown;
  EXPECT_NEAR(*br.compute_share, 0.60, 1e-12);
  EXPECT_NEAR(*br.comm_share, 0.20, 1e-12);  // [40, 60): comm not under compute
  EXPECT_NEAR(*br.memory_share, 0.10, 1e-12);
  EXPECT_NEAR(*br.idle_share, 0.10, 1e-12);
  EXPECT_NEAR(*br.overlap, 20.0 / 40.0, 1e-12);  // [30, 40) and [60, 70) of 40 us
  EXPECT_NEAR(*a.devices[0].exposed_comm_per_step_s, 20e-6, 1e-15);
  // No communication: overlap is not a number to make up.
  Builder c;
  c.work("gemm", 0, 10);
  EXPECT_FALSE(analyze_rank(c.t).devices[0].breakdown.overlap.has_value());
}

TEST(TemporalBreakdown, HtaWindowLeavesOutTheLastStepsWork) {
  Builder b;
  b.t.steps = {{0, 100 * us}, {100 * us, 200 * us}, {200 * us, 300 * us}};
  b.work("gemm", 10, 60, 7, 0, 5, 8);      // step 0
  b.work("gemm", 110, 160, 7, 0, 105, 108);  // step 1
  b.work("gemm", 210, 290, 7, 0, 205, 208);  // step 2: the last, left out
  const RankAnalysis a = analyze_rank(b.t);
  EXPECT_EQ(a.hta_window, (Span64{10 * us, 160 * us}));
  EXPECT_EQ(a.steps, 2);
  EXPECT_NEAR(*a.devices[0].hta_breakdown.idle_share, 50.0 / 150.0, 1e-12);
  // The window the doctor reads is the two profiled steps, [0, 200] us: host time before
  // each step's first kernel and after its last is in it.
  EXPECT_TRUE(a.window_is_steps);
  EXPECT_EQ(a.window, (Span64{0, 200 * us}));
  EXPECT_NEAR(*a.devices[0].breakdown.idle_share, 100.0 / 200.0, 1e-12);
  EXPECT_NEAR(*a.devices[0].compute_per_step_s, 50e-6, 1e-15);
  EXPECT_EQ(a.launches.kernels, 2);
}

TEST(IdleBreakdown, HostWaitKernelWaitAndOther) {
  Builder b;
  b.work("k0", 0, 10, 7, 0, 0, 1);
  b.work("k1", 30, 40, 7, 0, 20, 25);    // launched after k0 ended: 20 us host wait
  b.work("k2", 45, 60, 7, 0, 21, 26);    // queued early, 5 us gap < 30: kernel wait
  b.work("k3", 160, 170, 7, 0, 22, 27);  // queued early, 100 us gap: other (a dependency)
  AnalysisOptions o;
  o.window = Span64{0, 170 * us};
  const RankAnalysis a = analyze_rank(b.t, o);
  const auto& ib = a.devices[0].breakdown.idle_breakdown;
  EXPECT_NEAR(*ib.host_wait, 20.0 / 125.0, 1e-12);
  EXPECT_NEAR(*ib.kernel_wait, 5.0 / 125.0, 1e-12);
  EXPECT_NEAR(*ib.other, 100.0 / 125.0, 1e-12);
  ASSERT_EQ(a.devices[0].streams.size(), 1u);
  EXPECT_NEAR(a.devices[0].streams[0].host_wait_s, 20e-6, 1e-15);
  // A host timeline has no launches to blame: its idle causes are unknown, not zero.
  o.launches_known = false;
  EXPECT_FALSE(analyze_rank(b.t, o).devices[0].breakdown.idle_breakdown.host_wait.has_value());
}

TEST(Launches, DelayAndShortKernels) {
  Builder b;
  b.work("k0", 10, 12, 7, 0, 0, 8);   // delay 2 us, 2 us kernel < 8 us launch: short
  b.work("k1", 20, 40, 7, 0, 12, 16);  // delay 4 us
  b.work("k2", 50, 60, 7, 0, 14, 18);  // delay 32 us
  AnalysisOptions o;
  o.window = Span64{0, 100 * us};
  const RankAnalysis a = analyze_rank(b.t, o);
  EXPECT_EQ(a.launches.kernels, 3);
  EXPECT_NEAR(*a.launches.median_launch_delay_s, 4e-6, 1e-15);
  EXPECT_NEAR(*a.launches.short_kernel_share, 1.0 / 3.0, 1e-12);
}

TEST(HostSyncs, BlockingCallsAreNamedByTheirOp) {
  Builder b;
  b.t.steps = {{0, 1000 * us}};
  b.work("gemm", 0, 400, 7, 0, 0, 1);
  // .item(): aten::item > aten::_local_scalar_dense > a copy to the host, then a sync.
  b.t.ops.push_back({100 * us, 500 * us, b.t.names.intern("aten::item"), 1});
  b.t.ops.push_back({101 * us, 499 * us, b.t.names.intern("aten::_local_scalar_dense"), 1});
  b.work("Memcpy DtoH (Device -> Pageable)", 400, 402, 7, 0, 102, 403, CopyKind::d2h, 4, 0);
  b.t.calls.push_back({-1, 403 * us, 498 * us, CallKind::sync, b.t.names.intern("cudaStreamSynchronize"), 1});
  b.t.calls.push_back({-1, 600 * us, 700 * us, CallKind::sync, b.t.names.intern("cudaDeviceSynchronize"), 1});
  AnalysisOptions o;
  o.window = Span64{0, 1000 * us};
  const RankAnalysis a = analyze_rank(b.t, o);
  EXPECT_EQ(a.syncs.calls, 3);
  EXPECT_NEAR(a.syncs.blocked_s, (301 + 95 + 100) * 1e-6, 1e-12);
  ASSERT_EQ(a.syncs.top_ops.size(), 2u);
  EXPECT_EQ(a.syncs.top_ops[0].name, "aten::item");
  EXPECT_EQ(a.syncs.top_ops[0].calls, 2);
  EXPECT_EQ(a.syncs.top_ops[1].name, "cudaDeviceSynchronize");  // outside any op: the call itself
  EXPECT_NEAR(*a.syncs.share, 0.496, 1e-9);
}

TEST(Copies, VolumePageableAndBandwidth) {
  Builder b;
  b.work("Memcpy HtoD (Pageable -> Device)", 0, 100, 7, 0, -1, -1, CopyKind::h2d, 100'000, 0);
  b.work("Memcpy HtoD (Pinned -> Device)", 100, 110, 7, 0, -1, -1, CopyKind::h2d, 200'000, 1);
  b.work("Memset (Device)", 110, 111, 7, 0, -1, -1, CopyKind::memset, 64, -1);
  AnalysisOptions o;
  o.window = Span64{0, 200 * us};
  const RankAnalysis a = analyze_rank(b.t, o);
  EXPECT_EQ(a.copies.copies, 2);
  EXPECT_EQ(a.copies.h2d_bytes, 300'000);
  EXPECT_EQ(a.copies.pageable_bytes, 100'000);
  EXPECT_EQ(a.copies.pinned_bytes, 200'000);
  EXPECT_NEAR(*a.copies.h2d_gbps, 300'000.0 / 110'000.0, 1e-12);  // bytes per ns = GB/s
  EXPECT_NEAR(a.copies.pageable_s, 100e-6, 1e-15);
}

TEST(CrossRanks, WhoStartsTheCollectivesLast) {
  std::vector<RankTimeline> ranks(2);
  for (int r = 0; r < 2; ++r) {
    Builder b;
    b.t.rank = r;
    b.t.steps = {{0, 1000 * us}};
    for (int k = 0; k < 4; ++k) {
      const int64_t start = 100 * k + (r == 1 ? 30 : 10);  // rank 1 always arrives later
      b.work("gemm", 100 * k, start, 7);
      b.work("ncclDevKernel_AllReduce", start, 100 * k + 60, 13);
    }
    ranks[static_cast<size_t>(r)] = std::move(b.t);
  }
  std::vector<RankAnalysis> a;
  for (const auto& t : ranks) a.push_back(analyze_rank(t));
  const CrossRank x = analyze_ranks(ranks, a);
  EXPECT_EQ(x.collectives, 4);
  EXPECT_EQ(x.last_starts, (std::vector<int>{0, 4}));
}

}  // namespace
}  // namespace dpb::trace
