// dpdoctor over PyTorch profiler (Kineto) traces: traces written as Kineto writes them
// (CPU ops and Python frames around the GPU activity, kernels with pid = device,
// ProfilerStep#N and DataLoader annotations, distributedInfo, deviceProperties), each
// problem in one and its healthy counterpart in another.
#include "diagnostics/dpdoctor/torch_trace.h"

#include "diagnostics/dpdoctor/doctor.h"
#include "diagnostics/dpdoctor/kineto_reader.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <fmt/format.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <sstream>

#include "engine/core/error.h"

namespace dpb::doctor {
namespace {

namespace fs = std::filesystem;

// Times in milliseconds from the start of the trace; written in microseconds. Every
// kernel and copy has the runtime call that launched it (20 us before it, 5 us long),
// linked by a correlation id, as Kineto writes them.
class KinetoTrace {
 public:
  // world 0: not distributed (no distributedInfo).
  KinetoTrace(int rank, int world, int visible, int pid = 4242) : pid_(pid) {
    doc_ = {{"schemaVersion", 1}, {"traceEvents", nlohmann::json::array()}, {"baseTimeNanoseconds", 1700000000000000000}};
    if (world > 0) doc_["distributedInfo"] = {{"backend", "nccl"}, {"rank", rank}, {"world_size", world}};
    doc_["deviceProperties"] = nlohmann::json::array();
    for (int d = 0; d < visible; ++d)
      doc_["deviceProperties"].push_back({{"id", d}, {"name", "NVIDIA H100 80GB HBM3"}, {"numSms", 132}});
  }
  // `python`: the Python frame a real trace has around the step (with_stack); without it
  // the host time between recorded ops is unrecorded.
  void step(int n, double begin, double end, bool python = true) {
    add({{"ph", "X"}, {"cat", "user_annotation"}, {"name", "ProfilerStep#" + std::to_string(n)}, {"pid", pid_},
         {"tid", pid_}, {"ts", us(begin)}, {"dur", len(end - begin)}});
    // What the device also shows, and must not count as a host step.
    add({{"ph", "X"}, {"cat", "gpu_user_annotation"}, {"name", "ProfilerStep#" + std::to_string(n)}, {"pid", 0},
         {"tid", 7}, {"ts", us(begin + 0.05)}, {"dur", len(end - begin)}});
    // What surrounds it in a real trace, and must not count.
    if (python)
      add({{"ph", "X"}, {"cat", "python_function"}, {"name", "torch/nn/modules/module.py(1501): _call_impl"},
           {"pid", pid_}, {"tid", pid_}, {"ts", us(begin)}, {"dur", len(end - begin)}});
  }
  // A stream synchronize on the host thread.
  void sync(double begin, double end) {
    add({{"ph", "X"}, {"cat", "cuda_runtime"}, {"name", "cudaStreamSynchronize"}, {"pid", pid_}, {"tid", pid_},
         {"ts", us(begin)}, {"dur", len(end - begin)}, {"args", {{"correlation", ++corr_}}}});
  }
  void kernel(int device, double begin, double end, const std::string& name = "void cutlass::Kernel<sm90_gemm>",
              double launch_ms = -1) {
    const int corr = launch(launch_ms >= 0 ? launch_ms : begin - 0.02, "cudaLaunchKernel");
    add({{"ph", "X"}, {"cat", "kernel"}, {"name", name}, {"pid", device}, {"tid", 7}, {"ts", us(begin)},
         {"dur", len(end - begin)}, {"args", {{"device", device}, {"stream", 7}, {"correlation", corr}}}});
  }
  void nccl(int device, double begin, double end) {
    kernel(device, begin, end, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)");
  }
  void all_gather(int device, double begin, double end) {
    kernel(device, begin, end, "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)");
  }
  void reduce_scatter(int device, double begin, double end) {
    kernel(device, begin, end, "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)");
  }
  // A host range, as FSDP2 writes its FSDP::pre_forward (name) around its units, or a
  // host op (category cpu_op), as DTensor's _c10d_functional::all_reduce.
  void range(const std::string& name, double begin, double end, const char* cat = "user_annotation") {
    add({{"ph", "X"}, {"cat", cat}, {"name", name}, {"pid", pid_}, {"tid", pid_}, {"ts", us(begin)},
         {"dur", len(end - begin)}});
  }
  void memcpy(int device, double begin, double end, const std::string& name = "Memcpy HtoD (Pinned -> Device)") {
    const int corr = launch(begin - 0.02, "cudaMemcpyAsync");
    add({{"ph", "X"}, {"cat", "gpu_memcpy"}, {"name", name}, {"pid", device}, {"tid", 8}, {"ts", us(begin)},
         {"dur", len(end - begin)}, {"args", {{"device", device}, {"stream", 8}, {"correlation", corr}, {"bytes", 1 << 20}}}});
  }
  // .item(): aten::item around a copy to the host and a stream sync that waits until `until`.
  void item(double begin, double until) {
    add({{"ph", "X"}, {"cat", "cpu_op"}, {"name", "aten::item"}, {"pid", pid_}, {"tid", pid_}, {"ts", us(begin)},
         {"dur", len(until - begin + 0.01)}});
    add({{"ph", "X"}, {"cat", "cpu_op"}, {"name", "aten::_local_scalar_dense"}, {"pid", pid_}, {"tid", pid_},
         {"ts", us(begin + 0.001)}, {"dur", len(until - begin)}});
    add({{"ph", "X"}, {"cat", "cuda_runtime"}, {"name", "cudaStreamSynchronize"}, {"pid", pid_}, {"tid", pid_},
         {"ts", us(begin + 0.002)}, {"dur", len(until - begin - 0.002)}, {"args", {{"correlation", ++corr_}}}});
  }
  void data_wait(double begin, double end) {
    add({{"ph", "X"}, {"cat", "user_annotation"},
         {"name", "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"}, {"pid", pid_}, {"tid", pid_},
         {"ts", us(begin)}, {"dur", len(end - begin)}});
  }
  void dp_forward(double begin, double end) {
    add({{"ph", "X"}, {"cat", "user_annotation"}, {"name", "DataParallel.forward"}, {"pid", pid_}, {"tid", pid_},
         {"ts", us(begin)}, {"dur", len(end - begin)}});
  }
  std::string write(const std::string& path, bool gzip = false) const {
    const std::string text = doc_.dump();
    if (gzip) {
      gzFile f = gzopen(path.c_str(), "wb");
      gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
      gzclose(f);
    } else {
      std::ofstream(path) << text;
    }
    return path;
  }

 private:
  int launch(double at, const char* name) {
    add({{"ph", "X"}, {"cat", "cuda_runtime"}, {"name", name}, {"pid", pid_}, {"tid", pid_}, {"ts", us(at)},
         {"dur", len(0.005)}, {"args", {{"correlation", ++corr_}}}});
    return corr_;
  }
  static double us(double ms) { return 1e3 * ms + 1e6; }  // a time: traces start at an offset
  static double len(double ms) { return 1e3 * ms; }       // a duration
  void add(nlohmann::json e) { doc_["traceEvents"].push_back(std::move(e)); }
  int pid_;
  int corr_ = 0;
  nlohmann::json doc_;
};

class TorchTrace : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("dpb_kineto_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // The findings' ids for these traces, most severe first.
  // The one job's evidence these traces are.
  static Evidence one(const std::vector<std::string>& paths) {
    auto jobs = read_torch_traces(paths);
    EXPECT_EQ(jobs.size(), 1u);
    return std::move(jobs.at(0));
  }
  std::vector<std::string> ids(const std::vector<std::string>& paths) {
    last_ = diagnose(one(paths));
    summary_ = last_.to_json()["summary"];
    std::vector<std::string> out;
    for (const auto& f : last_.findings) out.push_back(f.id);
    return out;
  }
  // The warnings and errors only (info is advice, e.g. a few launch gaps).
  std::vector<std::string> problems(const std::vector<std::string>& paths) {
    ids(paths);
    std::vector<std::string> out;
    for (const auto& f : last_.findings)
      if (f.severity != Severity::info) out.push_back(f.id);
    return out;
  }
  const reports::Finding& finding(const std::string& id) const {
    for (const auto& f : last_.findings)
      if (f.id == id) return f;
    throw std::runtime_error("no finding " + id);
  }
  // Two ranks on GPUs 0 and 1, 5 steps of 10 ms; `body` adds rank r's work in the step
  // that starts at o ms. Returns the files (named prefix + rank).
  std::vector<std::string> two_ranks(const std::string& prefix,
                                     const std::function<void(KinetoTrace&, int r, double o)>& body) {
    std::vector<std::string> files;
    for (int r = 0; r < 2; ++r) {
      KinetoTrace t(r, 2, 2);
      for (int s = 0; s < 5; ++s) {
        t.step(s, 10.0 * s, 10.0 * s + 10);
        body(t, r, 10.0 * s);
      }
      files.push_back(t.write(path(prefix + std::to_string(r) + ".pt.trace.json")));
    }
    return files;
  }
  // Two DDP ranks, 5 steps of 10 ms: each rank computes [0, compute_r) and all-reduces
  // over [comm_begin_r, comm_end_r) of every step, on GPU device_r.
  std::vector<std::string> ddp(int world, std::array<double, 2> compute, std::array<double, 2> comm_begin,
                               std::array<double, 2> comm_end, std::array<int, 2> device = {0, 1}) {
    std::vector<std::string> files;
    for (int r = 0; r < 2; ++r) {
      KinetoTrace t(r, world, 8);
      for (int s = 0; s < 5; ++s) {
        const double o = 10.0 * s;
        t.step(s, o, o + 10);
        t.data_wait(o, o + 0.1);
        t.range("DistributedDataParallel.forward", o + 0.1, o + 0.2);
        t.memcpy(device[r], o + 0.1, o + 0.2);
        t.kernel(device[r], o + 0.2, o + compute[r]);
        t.nccl(device[r], o + comm_begin[r], o + comm_end[r]);
      }
      files.push_back(t.write(path("rank" + std::to_string(r) + ".pt.trace.json")));
    }
    return files;
  }

  fs::path dir_;
  Diagnosis last_;
  nlohmann::json summary_;  // the diagnosis' summary as dpdoctor --json writes it
};

// FSDP2 on two GPUs, 5 steps of 10 ms: each step all-gathers two units' parameters and
// reduce-scatters their gradients. With the second all-gather issued only when its unit
// starts (nothing computes beside it) exposed-allgather names it as a warning, from the NCCL
// kernels; prefetched under the first unit's compute, only the first unit's all-gather
// (which nothing can hide) is left, as advice.
TEST_F(TorchTrace, FsdpAllGathersFromNcclKernels) {
  auto fsdp = [&](bool prefetched) {
    return two_ranks(prefetched ? "prefetched" : "alone", [&](KinetoTrace& t, int r, double o) {
      t.range("FSDP::pre_forward (layers.0)", o + 0.1, o + 0.5);
      t.all_gather(r, o + 0.1, o + 0.5);
      t.kernel(r, o + 0.5, o + 4.5);
      if (prefetched) {
        t.all_gather(r, o + 1.0, o + 4.0);  // under the first unit's compute
        t.kernel(r, o + 4.5, o + 8.5);
      } else {
        t.all_gather(r, o + 4.5, o + 7.5);  // alone
        t.kernel(r, o + 7.5, o + 9.5);
      }
      t.reduce_scatter(r, o + 8.0, o + 8.4);
    });
  };
  const auto late = ids(fsdp(false));
  EXPECT_EQ(summary_["mode"], "fsdp");
  ASSERT_NE(std::find(late.begin(), late.end(), "exposed-allgather"), late.end()) << last_.to_json().dump(2);
  const auto& f = finding("exposed-allgather");
  EXPECT_EQ(f.severity, Severity::warning);
  EXPECT_EQ(f.evidence["allgathers_per_step"], 2);
  // 0.4 + 3 ms of all-gather a step, of which the 0.4 ms one before any compute and the
  // 3 ms one alone.
  EXPECT_NEAR(f.evidence["allgather_s"].get<double>(), 3.4e-3, 1e-9);
  EXPECT_NEAR(f.evidence["allgather_waited_s"].get<double>(), 3.4e-3, 1e-9);
  EXPECT_NE(f.fix.find("prefetch"), std::string::npos);
  // Both ranks' share of their steps is claimed.
  EXPECT_EQ(f.explains.size(), 2u);
  const auto hidden = problems(fsdp(true));
  EXPECT_EQ(summary_["mode"], "fsdp");
  EXPECT_EQ(std::find(hidden.begin(), hidden.end(), "exposed-allgather"), hidden.end()) << last_.to_json().dump(2);
  EXPECT_NEAR(finding("exposed-allgather").evidence["allgather_waited_s"].get<double>(), 0.4e-3, 1e-9);
  EXPECT_EQ(finding("exposed-allgather").severity, Severity::info);
}

// Tensor parallelism on two GPUs (DTensor's functional all-reduces, no DDP): its
// activation all-reduces run between layers with nothing beside them. Exposed
// communication, said with tensor parallelism's fixes, not DDP's buckets.
TEST_F(TorchTrace, TensorParallelAllReducesAreExposedByDesign) {
  const auto files = two_ranks("tp", [](KinetoTrace& t, int r, double o) {
    for (int layer = 0; layer < 2; ++layer) {
      const double l = o + 0.2 + 4.8 * layer;
      t.kernel(r, l, l + 3.0);
      t.range("_c10d_functional::all_reduce", l + 3.0, l + 3.05, "cpu_op");
      t.nccl(r, l + 3.05, l + 4.5);
    }
  });
  const auto found = problems(files);
  EXPECT_EQ(summary_["mode"], "tp");
  ASSERT_NE(std::find(found.begin(), found.end(), "exposed-communication"), found.end()) << last_.to_json().dump(2);
  const auto& f = finding("exposed-communication");
  EXPECT_NE(f.fix.find("tensor-parallel group within one node"), std::string::npos) << f.fix;
  EXPECT_EQ(f.fix.find("bucket"), std::string::npos) << f.fix;
  ASSERT_EQ(f.evidence["by_collective"].size(), 1u);
  EXPECT_EQ(f.evidence["by_collective"][0]["kind"], "all-reduce");
  EXPECT_NEAR(f.evidence["by_collective"][0]["exposed_per_step_s"].get<double>(), 2.9e-3, 1e-9);
  EXPECT_NE(f.explanation.find("Exposed by collective: all-reduce"), std::string::npos) << f.explanation;
}

TEST_F(TorchTrace, HealthyDdpOverlapsItsAllReduce) {
  EXPECT_TRUE(problems(ddp(2, {9, 9}, {3, 3}, {8, 8})).empty()) << last_.to_json().dump(2);
  EXPECT_TRUE(last_.healthy);
  EXPECT_EQ(summary_["mode"], "ddp");
  EXPECT_EQ(summary_["source"], "PyTorch profiler trace");
  EXPECT_TRUE(summary_["throughput_samples_per_s"].is_null());
  EXPECT_NEAR(summary_["overlap_ratio"].get<double>(), 1.0, 1e-9);
  // A step is the ProfilerStep without its wait for data (0.1 ms), as dpbench measures.
  EXPECT_NEAR(summary_["step_time_s"].get<double>(), 0.0099, 1e-9);
  EXPECT_NEAR(summary_["data_wait_share"].get<double>(), 0.01, 1e-9);
  // The window is the profiled steps: the first four (the last step's work is left out,
  // as HTA does), [0, 40] ms, busy 0.1..9 of every 10 ms.
  EXPECT_NEAR(summary_["devices"][0]["busy_fraction"].get<double>(), 4 * 8.9 / 40, 1e-6);
  const auto j = last_.to_json();
  ASSERT_EQ(j["ranks"].size(), 2u);
  EXPECT_EQ(j["ranks"][1]["rank"], 1);
  EXPECT_NEAR(j["ranks"][0]["window_s"].get<double>(), 0.040, 1e-9);
  EXPECT_NEAR(j["ranks"][0]["idle_share"].get<double>(), 1 - 4 * 8.9 / 40, 1e-6);
  EXPECT_EQ(j["budget"][0]["window"], "profiled steps");
  // HTA's window beside it, to compare with HTA: from the first kernel to the last,
  // [0.1, 39] ms.
  ASSERT_EQ(j["ranks_kernel_span"].size(), 2u);
  EXPECT_NEAR(j["ranks_kernel_span"][0]["window_s"].get<double>(), 0.0389, 1e-9);
  EXPECT_NEAR(j["ranks_kernel_span"][0]["idle_share"].get<double>(), 1 - 4 * 8.9 / 38.9, 1e-6);
  EXPECT_EQ(summary_["parallelism"]["kind"], "data");
}

TEST_F(TorchTrace, ExposedAllReduceIsExposedCommunication) {
  EXPECT_EQ(ids(ddp(2, {6, 6}, {6, 6}, {10, 10})), std::vector<std::string>{"exposed-communication"});
  // 4 ms of each 10 ms step, as a share of the four profiled steps: 16 of 40 ms.
  EXPECT_NEAR(last_.findings[0].evidence["exposed_share"].get<double>(), 16.0 / 40, 1e-3);
  EXPECT_NEAR(last_.findings[0].evidence["exposed_per_step_s"].get<double>(), 0.004, 1e-9);
  EXPECT_NEAR(last_.findings[0].evidence["overlap_ratio"].get<double>(), 0.0, 1e-9);
  EXPECT_EQ(last_.primary, "exposed-communication");
}

TEST_F(TorchTrace, AStragglerIsNamedAndItsWaitIsTheExposedCommunication) {
  // Rank 1 computes 9 ms a step; rank 0 computes 3 ms and waits in its all-reduce: its
  // exposed communication is waiting for rank 1, which straggler-rank names, and why.
  EXPECT_EQ(problems(ddp(2, {3, 9}, {3, 9}, {10, 10})),
            (std::vector<std::string>{"exposed-communication", "straggler-rank"}));
  EXPECT_EQ(finding("straggler-rank").evidence["slow_rank"], 1);
  EXPECT_EQ(finding("straggler-rank").evidence["kind"], "more device work");
  EXPECT_EQ(finding("straggler-rank").evidence["collectives"], 4);
  // Rank 0's 7 ms of communication a step: 6 ms waiting for rank 1, 1 ms the transfer.
  EXPECT_NEAR(finding("exposed-communication").evidence["exposed_share"].get<double>(), 28.0 / 40, 1e-3);
  EXPECT_NEAR(finding("exposed-communication").evidence["waiting_share"].get<double>(), 24.0 / 40, 1e-3);
}

TEST_F(TorchTrace, RanksOnOneGpuShareIt) {
  EXPECT_EQ(problems(ddp(2, {9, 9}, {3, 3}, {8, 8}, {0, 0})), std::vector<std::string>{"ranks-share-device"});
  EXPECT_TRUE(last_.findings[0].evidence.contains("assumption"));
  // 16 ranks cannot all be on the 8 GPUs a process sees: cuda:0 of two ranks may be two
  // nodes' GPUs, and a trace does not say which host a rank ran on.
  EXPECT_TRUE(problems(ddp(16, {9, 9}, {3, 3}, {8, 8}, {0, 0})).empty());
}

TEST_F(TorchTrace, WaitingForTheLoaderIsInputBound) {
  KinetoTrace t(0, 0, 1);
  for (int s = 0; s < 5; ++s) {
    const double o = 10.0 * s;
    t.step(s, o, o + 10);
    t.data_wait(o, o + 6);
    t.kernel(0, o + 6.5, o + 9.5);
  }
  EXPECT_EQ(problems({t.write(path("single.json"))}), std::vector<std::string>{"input-bound"});
  EXPECT_EQ(last_.primary, "input-bound");
  EXPECT_EQ(summary_["mode"], "single");
  EXPECT_NEAR(finding("input-bound").evidence["loop_data_wait_share"].get<double>(), 0.6, 1e-6);
  // The device idles 7 ms a step, 6 of them while the host is in __next__.
  EXPECT_NEAR(finding("input-bound").evidence["share_of_idle"].get<double>(), 6.0 / 7.0, 0.02);
}

TEST_F(TorchTrace, DataParallelPrimaryWorkingAloneIsAHotSpot) {
  // 4 GPUs; per step cuda:0 works alone for 4 ms (scatter, gather, loss, reduction,
  // optimizer), then all four run their replicas for 5 ms.
  KinetoTrace t(0, 0, 4);
  for (int s = 0; s < 5; ++s) {
    const double o = 10.0 * s;
    t.step(s, o, o + 10);
    t.dp_forward(o, o + 6);
    t.kernel(0, o + 0.05, o + 4);  // launched within its step (20 us before it starts)
    for (int d = 0; d < 4; ++d) t.kernel(d, o + 4, o + 9);
  }
  EXPECT_EQ(problems({t.write(path("dp.json"))}), std::vector<std::string>{"primary-device-hotspot"});
  EXPECT_EQ(last_.primary, "primary-device-hotspot");
  EXPECT_EQ(summary_["mode"], "dp");
  EXPECT_NEAR(last_.findings[0].evidence["primary_only_s_per_step"].get<double>(), 0.00395, 1e-9);
  // The same DataParallel without the primary's solo work: healthy.
  KinetoTrace even(0, 0, 4);
  for (int s = 0; s < 5; ++s) {
    even.step(s, 10.0 * s, 10.0 * s + 10);
    even.dp_forward(10.0 * s, 10.0 * s + 6);
    for (int d = 0; d < 4; ++d) even.kernel(d, 10.0 * s + 0.5, 10.0 * s + 9.5);
  }
  EXPECT_TRUE(problems({even.write(path("dp_even.json"))}).empty());
  EXPECT_TRUE(last_.healthy);
}

TEST_F(TorchTrace, GpusTakingTurnsIsNaiveModelParallel) {
  KinetoTrace naive(0, 0, 2), piped(0, 0, 2);
  for (int s = 0; s < 5; ++s) {
    const double o = 10.0 * s;
    naive.step(s, o, o + 10);
    naive.kernel(0, o + 0.5, o + 5);  // stage 0's forward, then stage 1's
    naive.kernel(1, o + 5, o + 9.5);
    piped.step(s, o, o + 10);
    // Micro-batches keep both busy, each step's work queued while the last one ran.
    piped.kernel(0, o + 0.3, o + 9.4, "void cutlass::Kernel<sm90_gemm>", std::max(0.0, o - 2));
    piped.kernel(1, o + 0.8, o + 9.9, "void cutlass::Kernel<sm90_gemm>", std::max(0.0, o - 2));
  }
  EXPECT_EQ(ids({naive.write(path("naive.json"))}), std::vector<std::string>{"naive-model-parallel"});
  EXPECT_EQ(summary_["mode"], "mp");
  EXPECT_TRUE(problems({piped.write(path("piped.json"))}).empty()) << last_.to_json()["findings"].dump(2);
}

TEST_F(TorchTrace, ReadsGzipAndFoldersAndOrdersRanksByTheirInfo) {
  // Written in the reverse of rank order, one of them gzipped: the folder is one job.
  KinetoTrace r1(1, 2, 8), r0(0, 2, 8);
  for (int s = 0; s < 3; ++s) {
    r0.step(s, 10.0 * s, 10.0 * s + 10);
    r0.kernel(0, 10.0 * s + 1, 10.0 * s + 4);
    r1.step(s, 10.0 * s, 10.0 * s + 10);
    r1.kernel(1, 10.0 * s + 1, 10.0 * s + 9);  // the straggler: rank 1
  }
  r1.write(path("node-b_1234.1700000000123.pt.trace.json.gz"), /*gzip=*/true);
  r0.write(path("node-a_1235.1700000000456.pt.trace.json"));
  std::ofstream(path("notes.txt")) << "not a trace";
  const Evidence e = one({dir_.string()});
  ASSERT_EQ(e.ranks.size(), 2u);
  EXPECT_EQ(e.ranks[0].rank, 0);
  EXPECT_EQ(e.ranks[1].device, "cuda:1");
  EXPECT_NEAR(e.ranks[1].compute_s, 0.008, 1e-9);
  EXPECT_EQ(e.ranks[0].host, "node-a");  // from tensorboard_trace_handler's file name
  EXPECT_EQ(e.ranks[1].host, "node-b");
  EXPECT_FALSE(e.samples_known);
  const auto found = problems({dir_.string()});
  EXPECT_NE(std::find(found.begin(), found.end(), "straggler-rank"), found.end());
  EXPECT_EQ(last_.primary, "straggler-rank") << last_.to_json().dump(2);
}

TEST_F(TorchTrace, WithoutProfilerStepsTheGpuSpanIsTheStep) {
  KinetoTrace t(0, 0, 1);
  t.kernel(0, 0, 4);
  t.kernel(0, 6, 10);
  const Evidence e = one({t.write(path("nosteps.json"))});
  EXPECT_EQ(e.steps, 1);
  EXPECT_NEAR(e.step_s, 0.010, 1e-9);
  ASSERT_EQ(e.device.size(), 1u);
  EXPECT_NEAR(e.device[0].busy, 0.8, 1e-9);
}

// PyTorch built without Kineto writes the bare array of events, CPU only, with no cat.
TEST_F(TorchTrace, ReadsTheArrayFormatOfPyTorchWithoutKineto) {
  nlohmann::json events = nlohmann::json::array();
  for (int s = 0; s < 4; ++s) {
    const double o = 1e5 * s + 160;
    events.push_back({{"name", "ProfilerStep#" + std::to_string(s + 1)}, {"ph", "X"}, {"ts", o}, {"dur", 1e5},
                      {"tid", 1}, {"pid", "CPU functions"}, {"args", nlohmann::json::object()}});
    events.push_back({{"name", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"}, {"ph", "X"},
                      {"ts", o + 10}, {"dur", 7e4}, {"tid", 1}, {"pid", "CPU functions"}, {"args", nlohmann::json::object()}});
    events.push_back({{"name", "aten::addmm"}, {"ph", "X"}, {"ts", o + 7e4 + 20}, {"dur", 2e4}, {"tid", 1},
                      {"pid", "CPU functions"}, {"args", nlohmann::json::object()}});
  }
  std::ofstream(path("legacy.json")) << events.dump();
  EXPECT_EQ(ids({path("legacy.json")}), std::vector<std::string>{"input-bound"});
  EXPECT_NEAR(last_.findings[0].evidence["data_wait_share"].get<double>(), 0.7, 1e-6);
}

TEST_F(TorchTrace, BadInputIsAClearError) {
  auto message = [](const std::vector<std::string>& paths) {
    try {
      read_torch_traces(paths);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({path("missing.json")}).find("does not exist"), std::string::npos);
  std::ofstream(path("broken.json")) << "{\"traceEvents\": [";
  EXPECT_NE(message({path("broken.json")}).find("truncated"), std::string::npos);
  std::ofstream(path("report.json")) << "{\"schema\": \"dpbench.report/1\"}";
  EXPECT_NE(message({path("report.json")}).find("has no traceEvents"), std::string::npos);
  std::ofstream(path("binary.json")) << std::string("\x1f\x8b\x08garbage\x00\x01", 13);
  EXPECT_NE(message({path("binary.json")}).find("is corrupt"), std::string::npos);
  KinetoTrace cpu_only(0, 0, 0);
  EXPECT_NE(message({cpu_only.write(path("cpu_only.json"))}).find("neither GPU activity nor profiler steps"),
            std::string::npos);
  fs::create_directories(dir_ / "empty");
  EXPECT_NE(message({(dir_ / "empty").string()}).find("no trace"), std::string::npos);
  // Told to read two files that both say they are rank 0 as one job: which is which
  // cannot be guessed.
  KinetoTrace a(0, 2, 8), b(0, 2, 8);
  a.kernel(0, 0, 1);
  b.kernel(1, 0, 1);
  const std::vector<std::string> both{a.write(path("node-a_1.17.pt.trace.json")), b.write(path("node-b_2.17.pt.trace.json"))};
  try {
    group_traces(read_kineto_traces(both), Grouping::one_job);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("two files say they are rank 0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_grouping("ranks"), Error);
}

TEST_F(TorchTrace, JobsRunsAndRanksAreToldApart) {
  // A profiler schedule with repeat writes a file per cycle and rank: two cycles of two
  // ranks are two jobs of two ranks each, by their times.
  std::vector<std::string> files;
  for (int cycle = 0; cycle < 2; ++cycle)
    for (int r = 0; r < 2; ++r) {
      KinetoTrace t(r, 2, 8, 100 + r);
      const double o = 1000.0 * cycle;
      for (int s = 0; s < 3; ++s) {
        t.step(s + 10 * cycle, o + 10.0 * s, o + 10.0 * s + 10);
        t.kernel(r, o + 10.0 * s + 1, o + 10.0 * s + 9);
      }
      files.push_back(t.write(path(fmt::format("n_{}.{}.pt.trace.json", 100 + r, cycle))));
    }
  auto jobs = read_torch_traces(files);
  ASSERT_EQ(jobs.size(), 2u);
  for (const auto& e : jobs) {
    ASSERT_TRUE(e.job.has_value());
    EXPECT_TRUE(e.job->ranks);
    ASSERT_EQ(e.ranks.size(), 2u);
    EXPECT_EQ(e.ranks[0].rank, 0);
    EXPECT_EQ(e.ranks[1].rank, 1);
    EXPECT_NE(e.job->reason.find("ranks 0, 1 of world size 2"), std::string::npos) << e.job->reason;
    // Each job is one cycle: three steps a rank (HTA's window leaves out the last), not six.
    EXPECT_EQ(e.steps, 2);
  }
  EXPECT_NE(jobs[0].job->files[0].path.find(".0.pt"), std::string::npos);
  // --grouping=runs: each file on its own, one process each.
  EXPECT_EQ(read_torch_traces(files, Grouping::separate).size(), 4u);

  // Single-GPU runs of one script, recorded one after another (separate processes), are
  // runs, not ranks: no straggler between them, whatever their speeds.
  std::vector<std::string> runs;
  for (int k = 0; k < 3; ++k) {
    KinetoTrace t(0, 0, 1, 200 + k);
    const double o = 5000.0 * k;
    for (int s = 0; s < 3; ++s) {
      t.step(s, o + 10.0 * s, o + 10.0 * s + 10);
      t.kernel(0, o + 10.0 * s + 1, o + 10.0 * s + 1 + 3 * (k + 1));
    }
    runs.push_back(t.write(path(fmt::format("run{}.json", k))));
  }
  auto separate = read_torch_traces(runs);
  ASSERT_EQ(separate.size(), 3u);
  for (const auto& e : separate) {
    EXPECT_EQ(e.mode, ParallelMode::single);
    EXPECT_FALSE(e.job->ranks);
    EXPECT_NE(e.job->reason.find("a run of its own"), std::string::npos) << e.job->reason;
    for (const auto& f : diagnose(e).findings) EXPECT_NE(f.id, "straggler-rank");
  }
  // The same process recorded twice, minutes apart: two runs, said so.
  KinetoTrace early(0, 0, 1, 300), late(0, 0, 1, 300);
  for (int s = 0; s < 3; ++s) {
    early.step(s, 10.0 * s, 10.0 * s + 10);
    early.kernel(0, 10.0 * s + 1, 10.0 * s + 9);
    late.step(s + 50, 360e3 + 10.0 * s, 360e3 + 10.0 * s + 10);
    late.kernel(0, 360e3 + 10.0 * s + 1, 360e3 + 10.0 * s + 9);
  }
  auto twice = read_torch_traces({early.write(path("w.1.pt.trace.json")), late.write(path("w.2.pt.trace.json"))});
  ASSERT_EQ(twice.size(), 2u);
  EXPECT_NE(twice[1].job->reason.find("another recording of the same process (360.0 s after an earlier one)"),
            std::string::npos)
      << twice[1].job->reason;
  // Each recording's window is its own: no idle time between them.
  EXPECT_LT(diagnose(twice[1]).budget.at(0).idle_share, 0.25);
  // Forced into one job, the three runs become ranks in file order.
  auto forced = read_torch_traces(runs, Grouping::one_job);
  ASSERT_EQ(forced.size(), 1u);
  EXPECT_EQ(forced[0].mode, ParallelMode::ddp);
  EXPECT_EQ(forced[0].ranks.size(), 3u);
  // Ranks in numerical order: 10 after 2.
  KinetoTrace r10(10, 16, 8), r2(2, 16, 8);
  r10.kernel(2, 0, 1);
  r2.kernel(2, 0, 1);
  const Evidence ordered = one({r10.write(path("r10.json")), r2.write(path("r2.json"))});
  ASSERT_EQ(ordered.ranks.size(), 2u);
  EXPECT_EQ(ordered.ranks[0].rank, 2);
  EXPECT_EQ(ordered.ranks[1].rank, 10);
  EXPECT_FALSE(ordered.notes.empty());  // 14 of the 16 ranks are not in the files
}

// A trace that lost events says so: launch calls whose kernels are missing (Kineto's
// buffers overflowed), unlike kernels queued before the trace began, which are not lost.
TEST_F(TorchTrace, ATraceThatLostEventsSaysSo) {
  KinetoTrace t(0, 0, 1);
  for (int s = 0; s < 5; ++s) {
    t.step(s, 10.0 * s, 10.0 * s + 10);
    t.kernel(0, 10.0 * s + 1, 10.0 * s + 9);
  }
  const std::string whole = t.write(path("whole.json"));
  EXPECT_TRUE(one({whole}).notes.empty());
  // Ten launches whose kernels never made it into the trace.
  nlohmann::json doc = nlohmann::json::parse(std::ifstream(whole));
  for (int k = 0; k < 10; ++k)
    doc["traceEvents"].push_back({{"ph", "X"}, {"cat", "cuda_runtime"}, {"name", "cudaLaunchKernel"}, {"pid", 4242},
                                  {"tid", 4242}, {"ts", 1e6 + 1e3 * (2 + k)}, {"dur", 5}, {"args", {{"correlation", 900 + k}}}});
  std::ofstream(path("lost.json")) << doc.dump();
  const Evidence e = one({path("lost.json")});
  ASSERT_EQ(e.notes.size(), 1u);
  EXPECT_NE(e.notes[0].find("lost events: 10 of"), std::string::npos) << e.notes[0];
  const Diagnosis d = diagnose(e);
  EXPECT_EQ(d.notes, e.notes);
  std::ostringstream text;
  print_diagnosis(d, text);
  EXPECT_NE(text.str().find("note: cuda:0 lost events"), std::string::npos) << text.str();
}

// A sampled trace (steps 0-2 and 10-12 in one file) or a paused one (a stretch between two
// recorded steps longer than a step) says so: the window runs across what was not recorded.
TEST_F(TorchTrace, ASampledOrPausedTraceSaysSo) {
  KinetoTrace sampled(0, 0, 1), paused(0, 0, 1);
  for (int s = 0; s < 6; ++s) {
    const double o = 10.0 * s + (s >= 3 ? 70 : 0);
    sampled.step(s < 3 ? s : s + 7, o, o + 10);
    sampled.kernel(0, o + 1, o + 9);
    paused.step(s, o, o + 10);
    paused.kernel(0, o + 1, o + 9);
  }
  const Evidence e = one({sampled.write(path("sampled.json"))});
  ASSERT_EQ(e.notes.size(), 1u);
  EXPECT_NE(e.notes[0].find("6 profiler step(s) with 1 hole(s) between them (7 step number(s) skipped, 70.0 ms "
                            "unrecorded): a sampled or paused trace"),
            std::string::npos)
      << e.notes[0];
  const Evidence p = one({paused.write(path("paused.json"))});
  ASSERT_EQ(p.notes.size(), 1u);
  EXPECT_NE(p.notes[0].find("(0 step number(s) skipped, 70.0 ms unrecorded)"), std::string::npos) << p.notes[0];
  EXPECT_EQ(diagnose(p).notes, p.notes);
}

TEST_F(TorchTrace, LaunchBoundHostSyncsAndPageableCopies) {
  // Tiny kernels launched one after another by a slow host: the GPU waits for launches.
  KinetoTrace launch_bound(0, 0, 1);
  for (int s = 0; s < 5; ++s) {
    const double o = 10.0 * s;
    launch_bound.step(s, o, o + 10);
    for (int k = 0; k < 20; ++k) launch_bound.kernel(0, o + 0.5 * k + 0.2, o + 0.5 * k + 0.22, "void tiny_kernel",
                                                     o + 0.5 * k + 0.15);
  }
  EXPECT_EQ(problems({launch_bound.write(path("launch.json"))}), std::vector<std::string>{"gpu-starved-by-host"});
  // .item() every step: the host blocks until the GPU drains, then the GPU waits.
  KinetoTrace item(0, 0, 1);
  for (int s = 0; s < 5; ++s) {
    const double o = 10.0 * s;
    item.step(s, o, o + 10);
    item.kernel(0, o + 0.1, o + 5);
    item.item(o + 0.2, o + 5.1);
    item.kernel(0, o + 8, o + 9.5, "void cutlass::Kernel<sm90_gemm>", o + 7.9);
  }
  const auto found = ids({item.write(path("item.json"))});
  ASSERT_FALSE(found.empty());
  EXPECT_EQ(found[0], "host-sync-stalls");
  EXPECT_NE(last_.findings[0].title.find("aten::item"), std::string::npos) << last_.findings[0].title;
  // Input copied from pageable memory, a quarter of every step.
  KinetoTrace pageable(0, 0, 1);
  for (int s = 0; s < 5; ++s) {
    const double o = 10.0 * s;
    pageable.step(s, o, o + 10);
    pageable.memcpy(0, o + 0.1, o + 2.6, "Memcpy HtoD (Pageable -> Device)");
    pageable.kernel(0, o + 2.6, o + 9.8);
  }
  EXPECT_EQ(problems({pageable.write(path("pageable.json"))}), std::vector<std::string>{"pageable-copies"});
}

// Input made on the CPU every iteration (torch.randn on a CPU tensor, ~10 ms), copied
// over, then one 7 ms kernel; no profiler steps. Every gap is inside aten::randn: the
// device waits for its input, not for launches (CUDA graphs would not help).
TEST_F(TorchTrace, InputMadeOnTheCpuIsInputNotLaunchBound) {
  KinetoTrace t(0, 0, 1);
  for (int s = 0; s < 6; ++s) {
    const double b = 10.6 * s;
    t.range("aten::randn", b, b + 10, "cpu_op");
    t.range("aten::normal_", b + 0.1, b + 9.9, "cpu_op");
    t.range("aten::to", b + 10, b + 10.4, "cpu_op");
    t.memcpy(0, b + 10.1, b + 10.3, "Memcpy HtoD (Pinned -> Device)");
    t.kernel(0, b + 10.5, b + 17.5, "void cutlass::Kernel<sm90_gemm>", b + 10.42);
  }
  EXPECT_EQ(problems({t.write(path("randn.json"))}), std::vector<std::string>{"input-bound"}) << last_.to_json().dump(2);
  const auto& f = finding("input-bound");
  EXPECT_EQ(f.evidence["host_ops"][0]["op"], "aten::randn");
  EXPECT_GT(f.evidence["share_of_idle"].get<double>(), 0.6);
  EXPECT_NE(f.fix.find("device=\"cuda\""), std::string::npos) << f.fix;
  EXPECT_EQ(last_.primary, "input-bound");
  // No step recorded: the window is the kernel span, and the diagnosis says so.
  EXPECT_EQ(last_.budget.at(0).window, "kernel span");
  bool said = false;
  for (const auto& n : last_.notes) said = said || n.find("no profiler step") != std::string::npos;
  EXPECT_TRUE(said);
}

// A 1.6 ms copy to the device from pageable memory (aten::to: cudaMemcpyAsync, then the
// synchronize that returns as the copy ends), then 2 ms of host time with nothing recorded:
// the copy and the unrecorded time are the causes, not a host sync.
TEST_F(TorchTrace, ABlockingCopyIsTheCopysCauseNotAHostSync) {
  KinetoTrace t(0, 0, 1);
  for (int s = 0; s < 5; ++s) {
    const double o = 10.0 * s;
    t.step(s, o, o + 10, /*python=*/false);
    t.kernel(0, o + 0.1, o + 3, "void cutlass::Kernel<sm90_gemm>", o + 0.05);
    t.range("aten::to", o + 3, o + 4.7, "cpu_op");
    t.memcpy(0, o + 3.05, o + 4.6, "Memcpy HtoD (Pageable -> Device)");
    t.sync(o + 3.04, o + 4.639);  // returns 39 us after the copy ends
    t.kernel(0, o + 6.75, o + 9.9, "void cutlass::Kernel<sm90_gemm>", o + 6.7);
  }
  const auto found = problems({t.write(path("blocking_copy.json"))});
  for (const auto& x : last_.findings) EXPECT_NE(x.id, "host-sync-stalls") << x.title;
  const auto& copy = finding("pageable-copies");
  EXPECT_GT(copy.evidence["idle_after_blocking_copies_share"].get<double>(), 0.0);
  EXPECT_EQ(copy.evidence["host_ops"][0]["op"], "aten::to");
  // The 2 ms with nothing recorded on any thread: unrecorded, said as such.
  const auto& causes = last_.budget.at(0).idle_causes;
  double unrecorded = 0, host_sync = 0;
  for (const auto& [cause, share] : causes) {
    if (cause == "unrecorded") unrecorded = share;
    if (cause == "host_sync") host_sync = share;
  }
  EXPECT_NEAR(unrecorded, 2.0 / 10, 0.02) << last_.to_json()["budget"].dump(2);
  EXPECT_EQ(host_sync, 0.0);
  EXPECT_FALSE(found.empty());
}

// A rank that loses a third of its window to small launch gaps and exposed communication,
// each under its own warning line: the verdict follows the budget, not the lines.
TEST_F(TorchTrace, SmallLossesThatAddUpToAThirdAreNotHealthy) {
  const auto files = two_ranks("third", [](KinetoTrace& t, int r, double o) {
    t.range("DistributedDataParallel.forward", o + 0.1, o + 0.3);
    for (int k = 0; k < 7; ++k) t.kernel(r, o + 0.2 + k * 0.95, o + 0.95 + k * 0.95);  // 0.2 ms gaps
    t.nccl(r, o + 7.2, o + 9.0);  // 1.8 ms, nothing beside it
  });
  const auto found = problems(files);
  EXPECT_FALSE(last_.healthy) << last_.to_json().dump(2);
  for (const auto& b : last_.budget) {
    EXPECT_GT(b.idle_share + b.exposed_comm_share, 0.25);
    EXPECT_LT(b.unexplained_share, 0.10) << last_.to_json()["budget"].dump(2);
  }
  EXPECT_EQ(found.size(), 1u);
  EXPECT_NE(finding("exposed-communication").explains.size(), 0u);
  EXPECT_NE(finding("gpu-starved-by-host").explains.size(), 0u);
}

// DeepEP's dispatch and combine kernels in a mixture-of-experts job: communication (an
// all-to-all), and the job's parallelism said as expert, from them.
TEST_F(TorchTrace, DeepEpDispatchAndCombineAreExpertParallelCommunication) {
  const auto files = two_ranks("moe", [](KinetoTrace& t, int r, double o) {
    t.kernel(r, o + 0.2, o + 3, "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*)");
    t.kernel(r, o + 3, o + 6.5);
    t.kernel(r, o + 6.5, o + 9.5, "void deep_ep::intranode::combine<__nv_bfloat16, 8, 768>(void*, float*)");
  });
  problems(files);
  EXPECT_EQ(summary_["parallelism"]["kind"], "expert") << summary_.dump(2);
  const auto& f = finding("exposed-communication");
  ASSERT_EQ(f.evidence["by_collective"].size(), 1u);
  EXPECT_EQ(f.evidence["by_collective"][0]["kind"], "all-to-all");
  EXPECT_GT(last_.budget.at(0).exposed_comm_share, 0.5);
}

TEST_F(TorchTrace, DataParallelOnOneOfFourGpusNamesTheIdleOnes) {
  KinetoTrace t(0, 0, 4);
  for (int s = 0; s < 5; ++s) {
    t.step(s, 10.0 * s, 10.0 * s + 10);
    t.dp_forward(10.0 * s, 10.0 * s + 6);
    t.kernel(0, 10.0 * s + 0.5, 10.0 * s + 9.5);
  }
  const auto found = ids({t.write(path("dp_one.json"))});
  ASSERT_FALSE(found.empty());
  EXPECT_EQ(found[0], "dataparallel-idle-gpus");
  EXPECT_NE(last_.findings[0].title.find("cuda:1, cuda:2, cuda:3"), std::string::npos) << last_.findings[0].title;
}

}  // namespace
}  // namespace dpb::doctor
