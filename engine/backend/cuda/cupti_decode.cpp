#include "engine/backend/cuda/cupti_decode.h"

#include "engine/core/error.h"

namespace dpb::cuda {

namespace {

trace::CopyKind copy_kind(uint8_t k) {
  switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA:
      return trace::CopyKind::h2d;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH:
      return trace::CopyKind::d2h;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA:
      return trace::CopyKind::d2d;
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
      return trace::CopyKind::p2p;
    default:
      return trace::CopyKind::other;
  }
}

// The host side of a copy: 1 pinned, 0 pageable, -1 no host side or unknown.
int8_t host_pinned(const CUpti_ActivityMemcpy6& m) {
  const trace::CopyKind k = copy_kind(m.copyKind);
  const uint8_t host = k == trace::CopyKind::h2d ? m.srcKind : k == trace::CopyKind::d2h ? m.dstKind : 0;
  if (host == CUPTI_ACTIVITY_MEMORY_KIND_PINNED) return 1;
  if (host == CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE) return 0;
  return -1;
}

int64_t ns(uint64_t t) { return static_cast<int64_t>(t); }

// What kernel, memcpy, memset and graph records share: span, place, launch, graph.
template <class T>
void device_fields(const T& x, trace::ActivityRecord& r) {
  r.start = ns(x.start);
  r.end = ns(x.end);
  r.device = static_cast<int>(x.deviceId);
  r.context = x.contextId;
  r.stream = x.streamId;
  r.correlation = x.correlationId;
  r.graph = x.graphId;
}

}  // namespace

std::string_view sync_name(CUpti_ActivitySynchronizationType type) {
  switch (type) {
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE:
      return "cudaEventSynchronize";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT:
      return "cudaStreamWaitEvent";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE:
      return "cudaStreamSynchronize";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE:
      return "cudaDeviceSynchronize";
    default:
      return "synchronization";
  }
}

bool decode_cupti_record(const CUpti_Activity& record, const CallbackName& names, trace::ActivityLog& log,
                         bool* dropped) {
  trace::ActivityRecord r;
  std::string_view name;
  switch (record.kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto& k = reinterpret_cast<const CUpti_ActivityKernel10&>(record);
      r.kind = trace::ActivityKind::kernel;
      device_fields(k, r);
      name = k.name ? std::string_view(k.name) : std::string_view("kernel");
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto& m = reinterpret_cast<const CUpti_ActivityMemcpy6&>(record);
      r.kind = trace::ActivityKind::memcpy;
      device_fields(m, r);
      r.copy = copy_kind(m.copyKind);
      r.bytes = static_cast<int64_t>(m.bytes);
      r.pinned = host_pinned(m);
      name = "memcpy";
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto& m = reinterpret_cast<const CUpti_ActivityMemset4&>(record);
      r.kind = trace::ActivityKind::memset;
      device_fields(m, r);
      r.copy = trace::CopyKind::memset;
      r.bytes = static_cast<int64_t>(m.bytes);
      name = "memset";
      break;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER: {
      const auto& a = reinterpret_cast<const CUpti_ActivityAPI&>(record);
      r.kind = trace::ActivityKind::runtime;
      r.start = ns(a.start);
      r.end = ns(a.end);
      r.correlation = a.correlationId;
      r.thread = a.threadId;
      name = names(record.kind == CUPTI_ACTIVITY_KIND_RUNTIME ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API,
                   a.cbid);
      if (name.empty()) name = record.kind == CUPTI_ACTIVITY_KIND_RUNTIME ? "runtime call" : "driver call";
      break;
    }
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
      const auto& s = reinterpret_cast<const CUpti_ActivitySynchronization2&>(record);
      r.kind = trace::ActivityKind::sync;
      r.start = ns(s.start);
      r.end = ns(s.end);
      r.context = s.contextId;
      r.stream = s.streamId;
      r.correlation = s.correlationId;
      name = sync_name(s.type);
      break;
    }
    case CUPTI_ACTIVITY_KIND_GRAPH_TRACE: {
      const auto& g = reinterpret_cast<const CUpti_ActivityGraphTrace2&>(record);
      r.kind = trace::ActivityKind::graph;
      device_fields(g, r);
      name = "cudaGraphLaunch";
      break;
    }
    default:
      return false;
  }
  const bool added = log.add(r, name);
  if (dropped) *dropped = !added;
  return added;
}

DecodeStats decode_cupti_buffer(uint8_t* buffer, size_t valid, const NextRecord& next, const CallbackName& names,
                                trace::ActivityLog& log) {
  DecodeStats s;
  CUpti_Activity* record = nullptr;
  for (;;) {
    const CUptiResult status = next(buffer, valid, &record);
    if (status == CUPTI_ERROR_MAX_LIMIT_REACHED) break;
    DPB_CHECK(status == CUPTI_SUCCESS && record != nullptr)
        << "CUPTI activity buffer: reading the record after " << s.records << " of " << valid
        << " bytes failed (CUptiResult " << static_cast<int>(status) << ")";
    ++s.records;
    bool dropped = false;
    if (decode_cupti_record(*record, names, log, &dropped))
      ++s.kept;
    else if (dropped)
      ++s.dropped;
    else
      ++s.skipped;
  }
  return s;
}

}  // namespace dpb::cuda
