#pragma once
// dpdoctor's rules over PyTorch profiler traces (Kineto's Chrome trace JSON, as
// torch.profiler's export_chrome_trace or tensorboard_trace_handler write it, plain or
// gzipped; also the bare array of events a PyTorch built without Kineto writes), so that
// PyTorch jobs get the same answers as dpbench runs.
//
// What is read, per trace (one per process, i.e. per rank):
//   distributedInfo{rank, world_size}, deviceProperties[] (the GPUs the process sees);
//   GPU activity: events of cat kernel, gpu_memcpy and gpu_memset, on device args.device
//     (else pid); kernels named nccl* are communication, the rest compute;
//   steps: ProfilerStep#N annotations (else the span of the GPU activity is one step);
//   data waits: the DataLoader's "enumerate(DataLoader)#...__next__" annotations;
//   DataParallel: its "DataParallel.forward" annotations.
// Everything else (CPU ops, Python frames) is dropped while parsing.
//
// How it becomes evidence: two or more ranks (a world size above 1, or several traces)
// are ddp, each rank's device the GPU it ran most on, its compute and communication per
// step the medians over the steps of the unions of those kernels, overlap and exposed
// communication as dpbench defines them; one process on several GPUs is dp when it called
// DataParallel.forward (the primary's own work: its busy time while no other GPU was
// busy) and model parallel otherwise (stages = GPUs); one GPU is single. A trace does not
// record samples per device or the ranks' hosts: the rules that need them stand aside.
#include <string>
#include <vector>

#include "diagnostics/dpdoctor/evidence.h"

namespace dpb::doctor {

// Evidence from the traces at `paths` (files, or directories whose *.json and *.json.gz
// files are read). Throws dpb::Error naming the file for a missing, unreadable or
// non-trace file, or one with neither GPU activity nor profiler steps.
Evidence read_torch_traces(const std::vector<std::string>& paths);

}  // namespace dpb::doctor
