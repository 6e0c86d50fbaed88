#pragma once
// Reads PyTorch profiler traces into device timelines (engine/trace/device_timeline.h),
// streaming (json_stream.h): each event is parsed on its own with simdjson and only what
// the analyses need is kept (device work, runtime calls, host ops, profiler steps,
// DataLoader waits, optimizer steps), so memory stays well below the trace's size.
//
// Every format PyTorch 1.8 to 2.x writes:
//   Kineto's Chrome trace (torch.profiler, export_chrome_trace, tensorboard_trace_handler),
//     plain or gzipped, with or without schemaVersion, deviceProperties, distributedInfo;
//   the bare event array of a PyTorch without Kineto, and of the earliest Kineto (2020);
//   the legacy torch.autograd.profiler's trace (use_cuda=True): categories Operator,
//     Runtime, Kernel, Memcpy, Memset, no ProfilerStep;
//   times in epoch microseconds (1.6e15 and up) or relative to baseTimeNanoseconds
//     (PyTorch 2.x), with fractional nanoseconds; pid and tid as numbers or strings.
// Times become exact int64 nanoseconds (the digits are read as text: a double holds an
// epoch time in microseconds only to a quarter of a microsecond), relative times moved
// by baseTimeNanoseconds wherever that key stands in the file.
//
// Kept, per file:
//   distributedInfo{rank, world_size, backend}, deviceProperties[] (the GPUs the process sees);
//   device work: cat kernel, gpu_memcpy, gpu_memset, Memcpy, Memset (args device, stream,
//     correlation, bytes; pinned or pageable from the copy's name);
//   runtime calls: cuda_runtime, cuda_driver, Runtime (args correlation);
//   host ops: cpu_op and Operator events (aten:: and the rest), the optimizer's
//     Optimizer.step#/zero_grad# annotations, and python_function events (with_stack);
//   steps: ProfilerStep#N on the host (not gpu_user_annotation); data waits: the
//     DataLoader's "enumerate(DataLoader)#...__next__"; DataParallel.forward calls.
//
// A trace is untrusted input: anything that is not such a document, or nests too deep,
// or has an event too large, or a time beyond what int64 nanoseconds hold (the year
// 2262 as epoch time), is one dpb::Error naming the file and the byte offset; it never
// crashes or reads out of bounds.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/trace/device_timeline.h"

namespace dpb::doctor {

struct KinetoTrace {
  std::string path;
  int64_t process = -1;            // the host process (its pid in the trace or the file name)
  bool distributed_info = false;   // the file says its rank and world size
  std::string backend;             // distributedInfo's backend ("nccl", "gloo"), if said
  trace::RankTimeline timeline;
  trace::Span64 span{0, 0};        // from the first to the last time it recorded
};

// One file.
KinetoTrace read_kineto_trace(const std::string& path);

// The trace files among `paths`: files as given, and the *.json and *.json.gz files of
// each folder (a tensorboard_trace_handler folder), in name order.
std::vector<std::string> trace_files(const std::vector<std::string>& paths);

// The files read side by side (a thread per core); the first error in file order is the
// one raised.
std::vector<KinetoTrace> read_kineto_traces(const std::vector<std::string>& files);

// The host a tensorboard_trace_handler file name names ("{host}_{pid}.{time}.pt.trace.json"),
// and that pid; empty and -1 when the name does not say.
std::pair<std::string, int64_t> host_from_file_name(const std::string& path);

}  // namespace dpb::doctor
