// The CUPTI collector's decoding, on buffers of the toolkit's own CUpti_Activity* structs
// (no GPU needed): every kind it keeps, the fields it reads, what it skips, a corrupt
// walk, the log's bound, and the timeline the records make (compute, NCCL communication,
// pinned and pageable copies, launches and synchronizations linked by correlation id).
// Built with the CUDA backend only (the decoder is part of it); no GPU needed to run.
#include <gtest/gtest.h>

#include "engine/core/error.h"
#if DPB_WITH_CUDA
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "engine/backend/cuda/cupti_decode.h"

namespace dpb::cuda {
namespace {

// A buffer laid out as CUPTI lays out its records: one after another, each 8-byte aligned,
// walked by size of kind (what cuptiActivityGetNextRecord does for these kinds).
class Buffer {
 public:
  template <class T>
  void put(const T& record) {
    const size_t at = (bytes_.size() + 7) / 8 * 8;
    bytes_.resize(at + sizeof(T));
    std::memcpy(bytes_.data() + at, &record, sizeof(T));
    sizes_[at] = sizeof(T);
  }
  uint8_t* data() { return bytes_.data(); }
  size_t size() const { return bytes_.size(); }
  NextRecord walker() {
    return [this](uint8_t* buffer, size_t valid, CUpti_Activity** record) {
      size_t at = 0;
      if (*record) {
        const size_t current = static_cast<size_t>(reinterpret_cast<uint8_t*>(*record) - buffer);
        at = (current + sizes_.at(current) + 7) / 8 * 8;
      }
      if (at >= valid) return CUPTI_ERROR_MAX_LIMIT_REACHED;
      *record = reinterpret_cast<CUpti_Activity*>(buffer + at);
      return CUPTI_SUCCESS;
    };
  }

 private:
  std::vector<uint8_t> bytes_;
  std::map<size_t, size_t> sizes_;
};

CUpti_ActivityKernel10 kernel(const char* name, uint64_t start, uint64_t end, uint32_t stream, uint32_t correlation) {
  CUpti_ActivityKernel10 k{};
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.name = name;
  k.start = start;
  k.end = end;
  k.deviceId = 0;
  k.contextId = 1;
  k.streamId = stream;
  k.correlationId = correlation;
  return k;
}

CUpti_ActivityAPI call(CUpti_CallbackId cbid, uint64_t start, uint64_t end, uint32_t correlation) {
  CUpti_ActivityAPI a{};
  a.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  a.cbid = cbid;
  a.start = start;
  a.end = end;
  a.processId = 42;
  a.threadId = 7;
  a.correlationId = correlation;
  return a;
}

std::string_view runtime_names(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  if (domain != CUPTI_CB_DOMAIN_RUNTIME_API) return "";
  if (cbid == 211) return "cudaLaunchKernel";
  if (cbid == 41) return "cudaMemcpyAsync";
  return "";
}

// One step's worth of records of each kind, times in GPU nanoseconds from 1'000'000.
Buffer one_step() {
  Buffer b;
  b.put(call(211, 1'000'000, 1'004'000, 1));                                          // launch of the GEMM
  b.put(kernel("ampere_sgemm_128x64_nn", 1'010'000, 1'110'000, 7, 1));               // compute, 100 us
  b.put(call(211, 1'005'000, 1'008'000, 2));                                          // launch of NCCL's kernel
  b.put(kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 1'110'000, 1'160'000, 13, 2));  // communication, 50 us
  CUpti_ActivityMemcpy6 h2d{};
  h2d.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  h2d.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
  h2d.srcKind = CUPTI_ACTIVITY_MEMORY_KIND_PINNED;
  h2d.dstKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  h2d.bytes = 1 << 20;
  h2d.start = 1'000'500;
  h2d.end = 1'009'500;
  h2d.streamId = 9;
  h2d.correlationId = 3;
  b.put(h2d);
  CUpti_ActivityMemcpy6 d2h = h2d;
  d2h.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
  d2h.srcKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  d2h.dstKind = CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE;
  d2h.bytes = 4;
  d2h.start = 1'160'000;
  d2h.end = 1'162'000;
  d2h.streamId = 7;
  d2h.correlationId = 4;
  b.put(d2h);
  CUpti_ActivityMemset4 set{};
  set.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  set.bytes = 4096;
  set.start = 1'162'000;
  set.end = 1'163'000;
  set.streamId = 7;
  set.correlationId = 5;
  b.put(set);
  CUpti_ActivitySynchronization2 sync{};
  sync.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
  sync.type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE;
  sync.start = 1'150'000;
  sync.end = 1'163'500;
  sync.streamId = 7;
  sync.correlationId = 6;
  b.put(sync);
  CUpti_ActivityGraphTrace2 graph{};
  graph.kind = CUPTI_ACTIVITY_KIND_GRAPH_TRACE;
  graph.start = 1'200'000;
  graph.end = 1'300'000;
  graph.graphId = 3;
  graph.streamId = 7;
  graph.correlationId = 8;
  b.put(graph);
  CUpti_ActivityMarker2 marker{};  // a kind the collector does not decode
  marker.kind = CUPTI_ACTIVITY_KIND_MARKER;
  b.put(marker);
  return b;
}

TEST(CuptiDecode, EveryKindItKeepsAndNothingElse) {
  Buffer b = one_step();
  trace::ActivityLog log;
  const DecodeStats s = decode_cupti_buffer(b.data(), b.size(), b.walker(), runtime_names, log);
  EXPECT_EQ(s.records, 10u);
  EXPECT_EQ(s.kept, 9u);
  EXPECT_EQ(s.skipped, 1u);
  EXPECT_EQ(s.dropped, 0u);
  EXPECT_EQ(log.records(), 9u);
  EXPECT_EQ(sync_name(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE), "cudaEventSynchronize");
}

TEST(CuptiDecode, TheRecordsMakeTheTimeline) {
  Buffer b = one_step();
  trace::ActivityLog log;
  decode_cupti_buffer(b.data(), b.size(), b.walker(), runtime_names, log);
  // GPU clock 1'000'000 ns is host 5'000'000 ns, the clocks running at the same rate.
  const auto clock = trace::ClockConversion::fit({{5'000'000, 1'000'000, 100}, {6'000'000, 2'000'000, 100}});
  trace::StreamMap streams;
  streams.add(0, 13, {0, trace::Lane::communication});
  const trace::RankTimeline t = log.to_timeline(clock, streams, {4'000'000, 7'000'000});
  EXPECT_EQ(t.source, "cupti");
  ASSERT_EQ(t.work.size(), 5u);  // GEMM, NCCL, two copies, memset: not the graph's span
  std::map<std::string, const trace::DeviceWork*> by_name;
  for (const auto& w : t.work) by_name[t.names.name(w.name)] = &w;
  const trace::DeviceWork* gemm = by_name.at("ampere_sgemm_128x64_nn");
  EXPECT_EQ(gemm->work, trace::Work::compute);
  EXPECT_EQ(gemm->begin_ns, 5'010'000);
  EXPECT_EQ(gemm->end_ns, 5'110'000);
  EXPECT_EQ(gemm->correlation, 1);
  EXPECT_EQ(gemm->stream, 7u);
  EXPECT_EQ(by_name.at("ncclDevKernel_AllReduce_Sum_f32_RING_LL")->work, trace::Work::communication);
  int pinned = 0, pageable = 0;
  for (const auto& w : t.work) {
    if (w.copy == trace::CopyKind::h2d) {
      EXPECT_EQ(w.bytes, 1 << 20);
      pinned += w.pinned == 1;
    }
    if (w.copy == trace::CopyKind::d2h) pageable += w.pinned == 0;
    if (w.copy == trace::CopyKind::memset) {
      EXPECT_EQ(w.bytes, 4096);
    }
  }
  EXPECT_EQ(pinned, 1);
  EXPECT_EQ(pageable, 1);
  // The launches, named from their callback ids, and the synchronization.
  std::map<std::string, const trace::HostCall*> calls;
  for (const auto& c : t.calls) calls[t.names.name(c.name)] = &c;
  ASSERT_TRUE(calls.count("cudaLaunchKernel"));
  EXPECT_EQ(calls.at("cudaLaunchKernel")->kind, trace::CallKind::launch);
  EXPECT_EQ(calls.at("cudaLaunchKernel")->thread, 7);
  ASSERT_TRUE(calls.count("cudaStreamSynchronize"));
  EXPECT_EQ(calls.at("cudaStreamSynchronize")->kind, trace::CallKind::sync);
}

TEST(CuptiDecode, ACorruptWalkIsOneClearErrorAndTheBoundDropsAndCounts) {
  Buffer b = one_step();
  trace::ActivityLog log;
  const NextRecord broken = [](uint8_t*, size_t, CUpti_Activity**) { return CUPTI_ERROR_INVALID_KIND; };
  try {
    decode_cupti_buffer(b.data(), b.size(), broken, runtime_names, log);
    FAIL() << "a corrupt buffer was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUPTI activity buffer"), std::string::npos) << e.what();
  }
  // A log with room for a few records: the rest are dropped and counted, never silently.
  trace::ActivityLog small(600);
  Buffer c = one_step();
  const DecodeStats s = decode_cupti_buffer(c.data(), c.size(), c.walker(), runtime_names, small);
  EXPECT_GT(s.dropped, 0u);
  EXPECT_EQ(s.kept + s.dropped + s.skipped, s.records);
  EXPECT_EQ(small.dropped(), s.dropped);
}

}  // namespace
}  // namespace dpb::cuda
#endif  // DPB_WITH_CUDA
