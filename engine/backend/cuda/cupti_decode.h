#pragma once
// CUPTI activity buffers into the engine's plain records (engine/trace/activity.h): the
// part of the CUPTI collector that is a function over a byte buffer, so that it is tested
// on buffers of real CUpti_Activity* structs without a GPU.
//
// Kinds decoded (the struct versions of the toolkit's cupti_activity.h, which the linked
// libcupti delivers):
//   KERNEL, CONCURRENT_KERNEL  CUpti_ActivityKernel10: name, device, context, stream,
//                              correlation id, the CUDA graph it ran in (NCCL's kernels
//                              are kernels: their stream or name makes them communication)
//   MEMCPY                     CUpti_ActivityMemcpy6: direction, bytes, pinned or pageable
//   MEMSET                     CUpti_ActivityMemset4: bytes
//   RUNTIME, DRIVER            CUpti_ActivityAPI: the call's name (from the callback id),
//                              thread, correlation id
//   SYNCHRONIZATION            CUpti_ActivitySynchronization2: which wait, its stream
//   GRAPH_TRACE                CUpti_ActivityGraphTrace2: one launch of a CUDA graph
// Any other kind is counted as skipped, never misread.
#include <cupti_activity.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>

#include "engine/trace/activity.h"

namespace dpb::cuda {

// The next record after `*record` (nullptr: the first) in the first `valid` bytes of
// `buffer`; CUPTI_ERROR_MAX_LIMIT_REACHED at the end. In the collector,
// cuptiActivityGetNextRecord.
using NextRecord = std::function<CUptiResult(uint8_t* buffer, size_t valid, CUpti_Activity** record)>;
// A runtime or driver API call's name from its callback id. In the collector,
// cuptiGetCallbackName.
using CallbackName = std::function<std::string_view(CUpti_CallbackDomain domain, CUpti_CallbackId cbid)>;

struct DecodeStats {
  size_t records = 0;  // read from the buffer
  size_t kept = 0;     // added to the log
  size_t skipped = 0;  // of kinds not decoded
  size_t dropped = 0;  // past the log's bound (counted in the log too)
};

// One record into `log`. False for a kind not decoded (nothing added) or a record the log
// dropped at its bound (then *dropped is set).
bool decode_cupti_record(const CUpti_Activity& record, const CallbackName& names, trace::ActivityLog& log,
                         bool* dropped = nullptr);

// Every record of one completed buffer. Throws dpb::Error when the walk fails other than
// by reaching the end (a corrupt buffer), naming the error code and how far it got.
DecodeStats decode_cupti_buffer(uint8_t* buffer, size_t valid, const NextRecord& next, const CallbackName& names,
                                trace::ActivityLog& log);

// The name a synchronization record is given in the timeline (the call it stands for).
std::string_view sync_name(CUpti_ActivitySynchronizationType type);

}  // namespace dpb::cuda
