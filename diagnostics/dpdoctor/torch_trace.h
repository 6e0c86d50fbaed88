#pragma once
// dpdoctor's evidence from PyTorch profiler traces, so that PyTorch jobs get the same
// answers as dpbench runs: the traces read into device timelines (kineto_reader.h),
// analysed with HTA's definitions (engine/trace/analysis.h), and turned into the
// evidence the rules read.
//
// How: two or more ranks (a world size above 1, or several processes) are ddp, each
// rank's device the GPU it ran most on, its compute and communication per step the
// medians over the steps on that device, overlap and exposed communication as dpbench
// defines them; one process on several GPUs is dp when it called DataParallel.forward
// (the primary's own work: its busy time while no other GPU was busy; the GPUs it never
// used are listed idle) and model parallel otherwise (stages = GPUs); one GPU is single.
// A trace does not record samples per device or the ranks' hosts (unless its file name
// says): the rules that need them stand aside. A trace without GPU work (a CPU-only
// profile) says so; its steps and waits still count.
#include <string>
#include <vector>

#include "diagnostics/dpdoctor/evidence.h"

namespace dpb::doctor {

// Evidence from the traces at `paths` (files, or directories whose *.json and *.json.gz
// files are read). Throws dpb::Error naming the file for a missing, unreadable or
// non-trace file, or one with neither GPU activity nor profiler steps.
Evidence read_torch_traces(const std::vector<std::string>& paths);

// The evidence of analysed timelines (used for traces and, with the host timeline,
// for tests).
Evidence evidence_from_timelines(const std::vector<trace::RankTimeline>& ranks);

}  // namespace dpb::doctor
