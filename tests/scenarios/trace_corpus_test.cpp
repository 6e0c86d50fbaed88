// dpdoctor on real PyTorch profiler traces (tests/data/traces):
//   cpu-*:   traces this project recorded with PyTorch 2.15 (its README says how);
//   public/: 33 GPU traces of 19 public jobs recorded by others with PyTorch 1.8 to 2.x
//            (public/README.md: sources, licences, what each job is).
// Every real file is read (the reader's guards must accept all of them), files are
// grouped into jobs and runs as they were recorded, and each job or run gets the
// verdict an analysis of its gaps gives (public/README.md explains each).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "diagnostics/dpdoctor/doctor.h"
#include "diagnostics/dpdoctor/kineto_reader.h"
#include "diagnostics/dpdoctor/torch_trace.h"
#include "engine/trace/replay.h"
#include "reports/schemas.h"
#include "tests/support/schemas.h"

namespace dpb::doctor {
namespace {

namespace fs = std::filesystem;

std::string corpus(const std::string& name) { return (fs::path(DPB_SOURCE_DIR) / "tests/data/traces" / name).string(); }
std::string public_job(const std::string& name) { return corpus("public/" + name); }

std::vector<std::string> ids(const Diagnosis& d) {
  std::vector<std::string> out;
  for (const auto& f : d.findings) out.push_back(f.id);
  return out;
}

// The warnings and errors (info is advice).
std::set<std::string> problems(const Diagnosis& d) {
  std::set<std::string> out;
  for (const auto& f : d.findings)
    if (f.severity != Severity::info) out.insert(f.id);
  return out;
}

const reports::Finding* find(const Diagnosis& d, const std::string& id) {
  for (const auto& f : d.findings)
    if (f.id == id) return &f;
  return nullptr;
}

// The diagnoses of a folder's jobs, in the order of their first event.
std::vector<Diagnosis> diagnose_all(const std::string& folder) {
  std::vector<Diagnosis> out;
  for (const auto& e : read_torch_traces({folder})) out.push_back(diagnose(e));
  return out;
}

// The one diagnosis whose job holds a file named with `part`.
Diagnosis run_of(const std::string& folder, const std::string& part) {
  for (auto& d : diagnose_all(folder))
    for (const auto& f : d.job->files)
      if (f.path.find(part) != std::string::npos) return d;
  ADD_FAILURE() << "no job in " << folder << " holds a file named with " << part;
  return {};
}

std::string text(const Diagnosis& d) {
  std::ostringstream out;
  print_diagnosis(d, out);
  return out.str();
}

// ---------------------------------------------------------------- recorded here (CPU)

TEST(TraceCorpus, CpuSlowLoaderIsInputBound) {
  const auto jobs = diagnose_all(corpus("cpu-slow-loader"));
  ASSERT_EQ(jobs.size(), 1u);
  const Diagnosis& d = jobs[0];
  EXPECT_EQ(ids(d), std::vector<std::string>{"input-bound"});
  EXPECT_GT(d.findings.at(0).evidence["data_wait_share"].get<double>(), 0.5);
  EXPECT_FALSE(d.healthy);
}

TEST(TraceCorpus, CpuHealthyLoopIsHealthyAndSaysItHasNoDeviceActivity) {
  const auto jobs = diagnose_all(corpus("cpu-healthy"));
  ASSERT_EQ(jobs.size(), 1u);
  const Diagnosis& d = jobs[0];
  EXPECT_TRUE(ids(d).empty());
  EXPECT_TRUE(d.healthy);
  EXPECT_LT(d.summary.data_wait_share, 0.1);
  EXPECT_TRUE(d.summary.devices.empty());
  EXPECT_FALSE(d.summary.global_batch.has_value());  // a trace does not record samples
  EXPECT_NE(text(d).find("no device activity recorded"), std::string::npos) << text(d);
  EXPECT_EQ(text(d).find("cuda:0"), std::string::npos) << text(d);
}

TEST(TraceCorpus, CpuDdpOverGlooIsTwoRanksInOrderAndHealthy) {
  const auto jobs = diagnose_all(corpus("cpu-ddp-gloo"));
  ASSERT_EQ(jobs.size(), 1u);
  const Diagnosis& d = jobs[0];
  EXPECT_EQ(d.summary.mode, ParallelMode::ddp);
  EXPECT_EQ(d.summary.world_size, 2);
  ASSERT_TRUE(d.job.has_value());
  EXPECT_TRUE(d.job->ranks);
  // Neither rank is a straggler, nor does a loader hold them up: no finding.
  EXPECT_TRUE(ids(d).empty()) << d.to_json().dump(2);
  EXPECT_GT(d.summary.step_time_s, 0);
}

// FSDP2 and tensor parallelism over Gloo, as PyTorch's profiler records them: the ranks
// of one job, told apart from DDP by their host ops (FSDP's FSDP:: ranges; DTensor's
// functional collectives and no DistributedDataParallel), and healthy.
TEST(TraceCorpus, CpuFsdp2AndTensorParallelAreToldFromDdp) {
  for (const auto& [folder, mode] : {std::pair{"cpu-fsdp2-gloo", ParallelMode::fsdp}, {"cpu-tp-gloo", ParallelMode::tp}}) {
    const auto jobs = diagnose_all(corpus(folder));
    ASSERT_EQ(jobs.size(), 1u) << folder;
    const Diagnosis& d = jobs[0];
    EXPECT_EQ(d.summary.mode, mode) << folder;
    EXPECT_EQ(d.summary.world_size, 2) << folder;
    ASSERT_TRUE(d.job.has_value()) << folder;
    EXPECT_TRUE(d.job->ranks) << folder;
    EXPECT_TRUE(ids(d).empty()) << folder << ": " << d.to_json().dump(2);
    EXPECT_GT(d.summary.step_time_s, 0) << folder;
  }
}

// ---------------------------------------------------------------- public GPU jobs

// Every real file is read: epoch and relative times, with and without
// baseTimeNanoseconds, string and integer pids and tids, files without schemaVersion,
// deviceProperties or distributedInfo, the bare event array, legacy autograd-profiler
// traces. Every file is in exactly one job, every job has device activity, and every
// diagnosis fits its schema and accounts for its time.
TEST(TraceCorpus, EveryPublicTraceIsReadGroupedAndAccountedFor) {
  size_t files = 0, folders = 0;
  for (const auto& entry : fs::directory_iterator(corpus("public"))) {
    if (!entry.is_directory() || entry.path().filename() == "LICENSES") continue;
    ++folders;
    const auto in_folder = trace_files({entry.path().string()});
    std::set<std::string> seen;
    for (const auto& e : read_torch_traces({entry.path().string()})) {
      ASSERT_TRUE(e.job.has_value());
      for (const auto& f : e.job->files) EXPECT_TRUE(seen.insert(f.path).second) << f.path << " is in two jobs";
      EXPECT_TRUE(e.device_activity) << entry.path();
      for (const auto& t : e.timelines) {
        // Epoch times in nanoseconds: 2020 to 2026, wherever the trace put its time base.
        EXPECT_GT(t.idle.cold_start.first, int64_t{1577836800} * 1'000'000'000) << entry.path();
        EXPECT_LT(t.idle.cold_start.first, int64_t{1798761600} * 1'000'000'000) << entry.path();
      }
      // Every public trace records its steps back to back: none reads as sampled.
      for (const auto& n : e.notes) EXPECT_EQ(n.find("sampled or paused"), std::string::npos) << entry.path() << ": " << n;
      const Diagnosis d = diagnose(e);
      test::expect_fits(reports::findings_schema(), d.to_json(), "the diagnosis of " + entry.path().string());
      EXPECT_FALSE(d.budget.empty());
      for (const auto& b : d.budget) {
        double explained = 0;
        for (const auto& [id, share] : b.explained) explained += share;
        EXPECT_NEAR(explained + b.unexplained_share, std::min(1.0, b.idle_share + b.exposed_comm_share), 1e-9)
            << entry.path() << " " << b.device;
      }
    }
    EXPECT_EQ(seen.size(), in_folder.size()) << entry.path();
    files += seen.size();
  }
  EXPECT_EQ(folders, 19u);
  EXPECT_EQ(files, 33u);
}

TEST(TraceCorpus, SeparateRunsAreNotRanks) {
  // Five single-GPU inference runs, two mixture-of-experts runs: separate processes at
  // separate times. Two recordings of one process six minutes apart: two runs.
  EXPECT_EQ(diagnose_all(public_job("particle_transformer_a100_fwd")).size(), 5u);
  EXPECT_EQ(diagnose_all(public_job("switchtransformers_moe_a100_infer")).size(), 2u);
  for (const char* job : {"kineto_resnet50_nw0_v100_2021jun", "kineto_resnet50_nw4_v100_2021jun"}) {
    const auto runs = diagnose_all(public_job(job));
    ASSERT_EQ(runs.size(), 2u) << job;
    for (const auto& d : runs) {
      EXPECT_EQ(d.summary.mode, ParallelMode::single);
      EXPECT_FALSE(d.job->ranks);
      EXPECT_LT(d.budget.at(0).idle_share, 0.45) << job;  // each window its own: not "idle 100%"
      for (const auto& f : d.findings) EXPECT_NE(f.id, "straggler-rank");
    }
    EXPECT_NE(runs[1].job->reason.find("another recording of the same process"), std::string::npos)
        << runs[1].job->reason;
  }
}

TEST(TraceCorpus, InputBoundJobs) {
  for (const char* run : {".1623143089861.", ".1623143566756."}) {
    const Diagnosis d = run_of(public_job("kineto_resnet50_nw0_v100_2021jun"), run);
    EXPECT_EQ(d.primary, "input-bound") << text(d);
    EXPECT_GT(find(d, "input-bound")->evidence["share_of_idle"].get<double>(), 0.55);
  }
  const Diagnosis api = diagnose_all(public_job("kineto_resnet50_profiler_api_nw0_2021jan")).at(0);
  EXPECT_EQ(api.primary, "input-bound") << text(api);
  // Over its profiled steps (the first step's load before its first kernel inside).
  EXPECT_NEAR(find(api, "input-bound")->evidence["share_of_idle"].get<double>(), 0.73, 0.05);

  // Input-bound, after a 1.85 s cold-start gap in the first iteration, named as such.
  const Diagnosis resnet = diagnose_all(public_job("param_resnet_rtx2080ti")).at(0);
  EXPECT_EQ(resnet.primary, "input-bound") << text(resnet);
  EXPECT_GT(find(resnet, "input-bound")->evidence["share_of_idle"].get<double>(), 0.6);
  const auto* cold = find(resnet, "cold-start");
  ASSERT_NE(cold, nullptr) << text(resnet);
  bool long_gap = false;
  for (const auto& g : cold->evidence["longest_gaps"]) long_gap = long_gap || g["length_s"].get<double>() > 1.8;
  EXPECT_TRUE(long_gap) << cold->evidence.dump(2);

  // Input-bound first (44% of the idle time), launch-bound host work second.
  const Diagnosis dec = diagnose_all(public_job("kineto_resnet50_nw0_2020dec")).at(0);
  EXPECT_EQ(dec.primary, "input-bound") << text(dec);
  EXPECT_NEAR(find(dec, "input-bound")->evidence["share_of_idle"].get<double>(), 0.44, 0.06);
  ASSERT_NE(find(dec, "gpu-starved-by-host"), nullptr);
  EXPECT_EQ(find(dec, "gpu-starved-by-host")->severity, Severity::warning);
}

TEST(TraceCorpus, LaunchBoundJobs) {
  const Diagnosis linear = diagnose_all(public_job("param_linear_rtx2080ti")).at(0);
  const Diagnosis batch2 = run_of(public_job("particle_transformer_a100_fwd"), "batch_size_2.");
  const Diagnosis nw4 = diagnose_all(public_job("kineto_resnet50_nw4_2020dec")).at(0);
  for (const Diagnosis* d : {&linear, &batch2, &nw4}) {
    EXPECT_EQ(d->primary, "gpu-starved-by-host") << text(*d);
    EXPECT_EQ(problems(*d).count("input-bound"), 0u) << text(*d);
  }
  // Over its profiled steps, a few longer gaps at their starts too.
  EXPECT_GT(find(nw4, "gpu-starved-by-host")->evidence["small_gaps_share_of_idle"].get<double>(), 0.85);
  // Evidence keeps its precision: 14 us kernels are not 0.0 s.
  EXPECT_NEAR(find(linear, "gpu-starved-by-host")->evidence["median_kernel_s"].get<double>(), 14e-6, 3e-6);
}

TEST(TraceCorpus, WorkersKeepTheInputAhead) {
  for (const char* job : {"kineto_resnet50_nw4_2020dec", "kineto_resnet50_nw4_v100_2021jun",
                          "kineto_resnet50_profiler_api_nw4_2021jan", "kineto_resnet50_autograd_api_nw4_2021jan"})
    for (const auto& d : diagnose_all(public_job(job))) EXPECT_EQ(problems(d).count("input-bound"), 0u) << job;
  // The healthiest trace: advice at most.
  const Diagnosis api = diagnose_all(public_job("kineto_resnet50_profiler_api_nw4_2021jan")).at(0);
  EXPECT_TRUE(api.healthy) << text(api);
  // Its small launch gaps, and the profiler's start before the first kernel, are named.
  for (const auto& d : diagnose_all(public_job("kineto_resnet50_nw4_v100_2021jun"))) {
    const auto* f = find(d, "gpu-starved-by-host");
    ASSERT_NE(f, nullptr) << text(d);
    EXPECT_GT(f->evidence["profiler_start_s"].get<double>(), 0.04);
    EXPECT_NE(f->explanation.find("the profiler starting"), std::string::npos);
  }
}

// What the input fix is worth, against the same job run with it: from each num_workers=0
// trace alone, the step replayed with the input made ahead (input-bound's prediction) is
// within 10% of the num_workers=4 run's measured median step, and closer to it than the
// step less its wait in the DataLoader (too optimistic: the GPU still waits on launches,
// the copies remain, and a batch from a worker is read once more).
TEST(TraceCorpus, TheInputFixIsPricedWithinATenthOfTheRunWithWorkers) {
  const std::vector<std::pair<std::string, std::string>> pairs = {
      {"kineto_resnet50_nw0_2020dec", "kineto_resnet50_nw4_2020dec"},
      {"kineto_resnet50_nw0_v100_2021jun", "kineto_resnet50_nw4_v100_2021jun"},
      {"kineto_resnet50_profiler_api_nw0_2021jan", "kineto_resnet50_profiler_api_nw4_2021jan"}};
  for (const auto& [before, after] : pairs) {
    std::vector<double> with_workers;
    for (const auto& e : read_torch_traces({public_job(after)})) {
      ASSERT_EQ(e.timelines.size(), 1u) << after;
      ASSERT_TRUE(e.timelines[0].full_step_s) << after;
      with_workers.push_back(*e.timelines[0].full_step_s);
    }
    std::sort(with_workers.begin(), with_workers.end());
    const double measured = with_workers.size() % 2 ? with_workers[with_workers.size() / 2]
                                                    : (with_workers[with_workers.size() / 2 - 1] + with_workers[with_workers.size() / 2]) / 2;
    for (const auto& e : read_torch_traces({public_job(before)})) {
      const Diagnosis d = diagnose(e);
      const auto* f = find(d, "input-bound");
      ASSERT_NE(f, nullptr) << before << "\n" << text(d);
      ASSERT_TRUE(f->predicted && f->predicted->step_time_s && f->predicted->measured_step_time_s) << before;
      const double predicted = *f->predicted->step_time_s;
      const double baseline = e.timelines.at(0).step_s.value();  // the median step less its data wait
      EXPECT_NEAR(predicted, measured, 0.10 * measured) << before << ": predicted " << predicted << " s";
      EXPECT_LT(std::fabs(predicted - measured), std::fabs(baseline - measured))
          << before << ": predicted " << predicted << " s, baseline " << baseline << " s, measured " << measured << " s";
      EXPECT_NEAR(*f->predicted->measured_step_time_s, e.timelines[0].full_step_s.value(), 1e-3);
      EXPECT_GT(*f->predicted->gain_share, 0.15) << before;
      // The budget says what it gives back.
      EXPECT_NE(text(d).find("input-bound"), std::string::npos);
      EXPECT_NE(text(d).find("gives back"), std::string::npos) << text(d);
    }
  }
  // A run that does not wait for its input has nothing to price: no such finding.
  for (const auto& d : diagnose_all(public_job("kineto_resnet50_nw4_2020dec"))) EXPECT_EQ(find(d, "input-bound"), nullptr);
}

// The replay behind those predictions, with nothing cut, gives back every real trace's
// steps as measured (within 2%): its model of launches, streams and blocking calls holds
// on what ran, before it is asked what would run.
TEST(TraceCorpus, ReplayingWithNothingCutGivesTheMeasuredSteps) {
  int replayed = 0;
  for (const auto& entry : fs::directory_iterator(corpus("public"))) {
    if (!entry.is_directory() || entry.path().filename() == "LICENSES") continue;
    for (const auto& file : trace_files({entry.path().string()})) {
      const KinetoTrace k = read_kineto_trace(file);
      const auto& t = k.timeline;
      if (t.steps.size() < 3 || t.work.empty()) continue;
      const trace::HostIndex host(t);
      const trace::StepReplay r = trace::replay_steps(t, host, t.steps, {});
      ASSERT_EQ(r.replayed_ns.size(), t.steps.size());
      for (size_t i = 0; i < t.steps.size(); ++i)
        EXPECT_NEAR(static_cast<double>(r.replayed_ns[i]), static_cast<double>(r.measured_ns[i]),
                    0.02 * static_cast<double>(r.measured_ns[i]))
            << file << " step " << i;
      ++replayed;
    }
  }
  EXPECT_GE(replayed, 6);
}

TEST(TraceCorpus, AHealthyInferenceRunIsHealthy) {
  const Diagnosis d = run_of(public_job("particle_transformer_a100_fwd"), "batch_size_128");
  EXPECT_TRUE(d.healthy) << text(d);
}

TEST(TraceCorpus, ColdStartsAreNamedAsSuch) {
  // Legacy autograd profiler: the first iteration is the cold start (slow first launch,
  // cuDNN set-up, cudaFree); its event syncs are cuDNN's autotuning, not the cause. After
  // it, num_workers=0 is input-bound (74% of the idle time).
  for (const char* job : {"kineto_resnet50_autograd_api_nw0_2021jan", "kineto_resnet50_autograd_api_nw4_2021jan"}) {
    const Diagnosis d = diagnose_all(public_job(job)).at(0);
    EXPECT_EQ(d.primary, "cold-start") << text(d);
    EXPECT_EQ(problems(d).count("host-sync-stalls"), 0u);
    EXPECT_EQ(problems(d).count("gpu-starved-by-host"), 0u);
    EXPECT_GT(find(d, "cold-start")->evidence["share_of_idle"].get<double>(), 0.85);
  }
  const Diagnosis nw0 = diagnose_all(public_job("kineto_resnet50_autograd_api_nw0_2021jan")).at(0);
  ASSERT_NE(find(nw0, "input-bound"), nullptr);
  EXPECT_EQ(find(nw0, "input-bound")->severity, Severity::warning);
  EXPECT_NEAR(find(nw0, "input-bound")->evidence["share_of_idle"].get<double>(), 0.74, 0.05);
  EXPECT_NEAR(find(nw0, "cold-start")->evidence["idle_after_cold_start"].get<double>(), 0.36, 0.03);
  // Mixture of experts: first launches of each kernel (lazy loading) and the allocator;
  // its stream syncs run while the GPU is busy.
  for (const auto& d : diagnose_all(public_job("switchtransformers_moe_a100_infer"))) {
    EXPECT_EQ(d.primary, "cold-start") << text(d);
    EXPECT_EQ(problems(d).count("host-sync-stalls"), 0u);
    EXPECT_EQ(find(d, "cold-start")->evidence["calls"][0]["call"], "cudaLaunchKernel");
  }
  for (const char* run : {"batch_size_512", "gpu_working", "single_sample"})
    EXPECT_EQ(run_of(public_job("particle_transformer_a100_fwd"), run).primary, "cold-start") << run;
}

TEST(TraceCorpus, DlrmOnEightGpusWaitsInExposedCommunicationForLateRanks) {
  const auto jobs = diagnose_all(public_job("param_dlrm_8xv100_ddp"));
  ASSERT_EQ(jobs.size(), 1u);
  const Diagnosis& d = jobs[0];
  ASSERT_TRUE(d.job && d.job->ranks);
  ASSERT_EQ(d.job->files.size(), 8u);
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(d.job->files[static_cast<size_t>(r)].rank, r);
    EXPECT_NE(d.job->files[static_cast<size_t>(r)].path.find("worker" + std::to_string(r) + "_"), std::string::npos);
  }
  EXPECT_EQ(d.summary.mode, ParallelMode::ddp);
  // Almost all NCCL time runs alone: exposed communication, the primary verdict.
  EXPECT_EQ(d.primary, "exposed-communication") << text(d);
  const auto* exposed = find(d, "exposed-communication");
  EXPECT_LT(exposed->evidence["overlap_ratio"].get<double>(), 0.1);
  // Its communication by collective, from the NCCL kernels' names: 3 all-reduces
  // (ncclKernel_AllReduce_RING_LL_Sum_float) and 5 send/recv kernels (the embeddings'
  // all-to-all, ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t) per rank and step.
  std::map<std::string, int64_t> kernels;
  for (const auto& k : exposed->evidence["by_collective"]) {
    kernels[k["kind"].get<std::string>()] = k["kernels"].get<int64_t>();
    EXPECT_LE(k["exposed_per_step_s"].get<double>(), k["per_step_s"].get<double>() + 1e-12) << k;
    EXPECT_GT(k["per_step_s"].get<double>(), 0) << k;
  }
  EXPECT_EQ(kernels, (std::map<std::string, int64_t>{{"all-reduce", 3}, {"send/recv", 5}})) << exposed->evidence.dump();
  // Who reaches each collective last: rank 7, then ranks 4 and 5; late because their
  // step starts later, not because of more GPU work.
  const auto* late = find(d, "straggler-rank");
  ASSERT_NE(late, nullptr) << text(d);
  EXPECT_EQ(late->evidence["slow_rank"], 7);
  EXPECT_EQ(late->evidence["kind"], "late start");
  std::set<int> last;
  for (const auto& r : late->evidence["ranks"])
    if (r["last_at"].get<int>() > 0) last.insert(r["rank"].get<int>());
  EXPECT_EQ(last, (std::set<int>{4, 5, 7}));
  EXPECT_LT(late->evidence["clock_agreement_s"].get<double>(), 1e-4);
  // Launch-bound host work between tiny kernels is the other cause; no host-sync finding
  // (aten::item on CPU tensors, and the long stream syncs run while NCCL kernels run).
  EXPECT_EQ(problems(d).count("gpu-starved-by-host"), 1u);
  EXPECT_EQ(problems(d).count("host-sync-stalls"), 0u);
}

// TraceLens' H100 and B200 inference traces (PyTorch 2.x, with Python stacks).
// Timesformer: ~217 ms of video preprocessing in Python inside the profiled step, before
// its first kernel, then a forward with the GPU 99% busy. Over the kernel span it looks
// healthy; over the step it waits ~60% of the time for its input, and says which host
// work made it.
TEST(TraceCorpus, HostPreprocessingBeforeTheFirstKernelIsInputBound) {
  const Diagnosis d = diagnose_all(public_job("tracelens_h100_timesformer_infer")).at(0);
  EXPECT_EQ(d.primary, "input-bound") << text(d);
  const auto* f = find(d, "input-bound");
  EXPECT_GT(f->evidence["data_loading_share"].get<double>(), 0.5);
  ASSERT_FALSE(f->evidence["host_ops"].empty());
  EXPECT_NE(f->evidence["host_ops"][0]["op"].get<std::string>().find("preprocess"), std::string::npos)
      << f->evidence["host_ops"].dump();
  EXPECT_EQ(d.budget.at(0).window, "profiled steps");
  EXPECT_GT(d.budget.at(0).idle_share, 0.5);
  // HTA's window, the kernel span, beside: idle under 1%.
  ASSERT_EQ(d.ranks_kernel_span.size(), 1u);
  EXPECT_LT(*d.ranks_kernel_span[0].idle_share, 0.02);
}

// A rank of an 8-GPU tensor-parallel prefill on a B200: launch-bound, and its all-reduces
// are PyTorch's symmetric memory (multimem_all_reduce kernels, not NCCL's): counted as
// communication, exposed, and the job's parallelism said as tensor from them.
TEST(TraceCorpus, SymmetricMemoryAllReducesAreCommunication) {
  const Diagnosis d = diagnose_all(public_job("tracelens_b200_tp8_rank0_prefill")).at(0);
  EXPECT_EQ(d.primary, "gpu-starved-by-host") << text(d);
  EXPECT_EQ(d.summary.parallelism, "tensor") << d.summary.parallelism_evidence;
  EXPECT_EQ(d.summary.mode, ParallelMode::tp);
  const auto* comm = find(d, "exposed-communication");
  ASSERT_NE(comm, nullptr) << text(d);
  std::map<std::string, int64_t> kernels;
  for (const auto& k : comm->evidence["by_collective"]) kernels[k["kind"].get<std::string>()] = k["kernels"].get<int64_t>();
  EXPECT_EQ(kernels["all-reduce"], 73) << comm->evidence.dump();
  EXPECT_GT(d.budget.at(0).exposed_comm_share, 0.01);
}

TEST(TraceCorpus, TraceLensInferenceJobs) {
  for (const char* job : {"tracelens_h100_bert_small_infer", "tracelens_h100_falconsai_infer"}) {
    const Diagnosis d = diagnose_all(public_job(job)).at(0);
    EXPECT_EQ(d.primary, "gpu-starved-by-host") << job << "\n" << text(d);
    EXPECT_EQ(problems(d).count("input-bound"), 0u) << job;
  }
  const Diagnosis owl = diagnose_all(public_job("tracelens_h100_owlv2_infer")).at(0);
  EXPECT_EQ(owl.primary, "input-bound") << text(owl);
  const Diagnosis qwen = diagnose_all(public_job("tracelens_h100_qwen15_05b_infer")).at(0);
  EXPECT_TRUE(qwen.healthy) << text(qwen);
}

// The budget is an invariant, on every real trace (public and recorded here): per rank,
// lost = idle + exposed communication, each point of it charged to a finding or to
// unexplained, the parts adding to the total; and the verdict follows it: never healthy
// while a device loses a quarter of its window or more than 10 points of it are
// unexplained, and never a finding that says nothing explains time a finding explains.
TEST(TraceCorpus, EveryVerdictFollowsItsBudget) {
  std::vector<std::string> folders;
  for (const auto& entry : fs::directory_iterator(corpus("public")))
    if (entry.is_directory() && entry.path().filename() != "LICENSES") folders.push_back(entry.path().string());
  for (const char* cpu : {"cpu-ddp-gloo", "cpu-fsdp2-gloo", "cpu-healthy", "cpu-slow-loader", "cpu-tp-gloo"})
    folders.push_back(corpus(cpu));
  int jobs = 0;
  for (const auto& folder : folders)
    for (const auto& d : diagnose_all(folder)) {
      ++jobs;
      bool must_warn = false;
      for (const auto& b : d.budget) {
        const double lost = std::min(1.0, b.idle_share + b.exposed_comm_share);
        double parts = b.unexplained_share;
        for (const auto& [id, share] : b.explained) {
          parts += share;
          EXPECT_NE(id, "unexplained-idle") << folder;  // only what the others leave
        }
        EXPECT_NEAR(parts, lost, 0.01) << folder << " " << b.device;
        must_warn = must_warn || lost >= 0.25 || b.unexplained_share > 0.10;
      }
      if (must_warn) {
        EXPECT_FALSE(d.healthy) << folder << "\n" << text(d);
      }
      // A warning that nothing explains the time is there only when some time is unexplained.
      if (const auto* u = find(d, "unexplained-idle")) {
        double most = 0;
        for (const auto& b : d.budget) most = std::max(most, b.unexplained_share);
        EXPECT_GT(most + 1e-9, 0.10) << folder << "\n" << text(d);
        EXPECT_NE(u->severity, Severity::info);
      }
    }
  EXPECT_GE(jobs, 30);
}

}  // namespace
}  // namespace dpb::doctor
