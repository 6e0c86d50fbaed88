#pragma once
// Reads PyTorch profiler traces (Kineto's Chrome trace JSON, as torch.profiler's
// export_chrome_trace or tensorboard_trace_handler write it, plain or gzipped; also the
// bare event array of a PyTorch built without Kineto) into device timelines
// (engine/trace/device_timeline.h), streaming: the file is decompressed and scanned in
// chunks, each event parsed on its own with simdjson, and only what the analyses need
// is kept (device work, runtime calls, aten:: ops, profiler steps, DataLoader waits),
// so memory stays well below the trace's size.
//
// Kept, per file:
//   distributedInfo{rank, world_size}, deviceProperties[] (the GPUs the process sees);
//   device work: events of cat kernel, gpu_memcpy, gpu_memset (args device, stream,
//     correlation, bytes; pinned or pageable from the copy's name);
//   runtime calls: cuda_runtime and cuda_driver events (args correlation);
//   host ops: cpu_op events named aten::*;
//   steps: ProfilerStep#N annotations on the host (not gpu_user_annotation);
//   data waits: the DataLoader's "enumerate(DataLoader)#...__next__"; DataParallel.forward.
// Timestamps are microseconds (fractions carry nanoseconds); they become nanoseconds.
//
// A trace is untrusted input: anything that is not such a document, or nests too deep,
// or has an event too large or a number out of range, is one dpb::Error naming the file
// and the byte offset; it never crashes or reads out of bounds.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/trace/device_timeline.h"

namespace dpb::doctor {

struct KinetoTrace {
  std::string path;
  int64_t process = -1;      // the host process (its pid in the trace or the file name)
  trace::RankTimeline timeline;
};

// One file.
KinetoTrace read_kineto_trace(const std::string& path);

// The ranks of a job from its trace files (files, or folders whose *.json and *.json.gz
// files are read): files of one process (the same rank, or the same host and process)
// are one rank's steps; ranks in numerical order.
std::vector<trace::RankTimeline> read_kineto_ranks(const std::vector<std::string>& paths);

// The host a tensorboard_trace_handler file name names ("{host}_{pid}.{time}.pt.trace.json"),
// and that pid; empty and -1 when the name does not say.
std::pair<std::string, int64_t> host_from_file_name(const std::string& path);

}  // namespace dpb::doctor
