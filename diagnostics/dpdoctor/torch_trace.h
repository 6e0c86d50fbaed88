#pragma once
// dpdoctor's evidence from PyTorch profiler traces, so that PyTorch jobs get the same
// answers as dpbench runs: the traces read into device timelines (kineto_reader.h),
// grouped into jobs (trace_jobs.h), analysed with HTA's definitions and every idle gap
// charged to its cause (engine/trace/analysis.h, idle_causes.h), and turned into the
// evidence the rules read, one Evidence per job.
//
// How: two or more ranks (or one rank of a larger world) are ddp, each rank's device the
// GPU it ran most on, its compute and communication per step the medians over the steps
// on that device, overlap and exposed communication as dpbench defines them, and across
// ranks the order in which they reach each collective (where their clocks agree); one
// process on several GPUs is dp when it called DataParallel.forward (the primary's own
// work: its busy time while no other GPU was busy; the GPUs it never used are listed
// idle) and model parallel otherwise (stages = GPUs); one GPU is single. A trace does
// not record samples per device or the ranks' hosts (unless its file name says): the
// rules that need them stand aside. A trace without GPU work (a CPU-only profile) says
// so; its steps and waits still count.
#include <string>
#include <vector>

#include "diagnostics/dpdoctor/evidence.h"
#include "diagnostics/dpdoctor/trace_jobs.h"

namespace dpb::doctor {

// Evidence from the traces at `paths` (files, or directories whose *.json and *.json.gz
// files are read), one per job in the order of their first event. Throws dpb::Error
// naming the file for a missing, unreadable or non-trace file, or one with neither GPU
// activity nor profiler steps.
std::vector<Evidence> read_torch_traces(const std::vector<std::string>& paths,
                                        Grouping grouping = Grouping::automatic);

// The evidence of one job's traces.
Evidence evidence_from_job(TraceJob job);

// The evidence of analysed timelines (used for traces and, with the host timeline,
// for tests).
Evidence evidence_from_timelines(const std::vector<trace::RankTimeline>& ranks);

}  // namespace dpb::doctor
