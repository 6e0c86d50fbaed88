// The parallel modes on a GPU against single-device training on the CPU (docs/ARCHITECTURE.md §3, §7):
// DataParallel and pipeline stages over logical CUDA devices placed on the GPU(s) there
// are, each with its own streams and memory pool; DDP with ranks that share one GPU over
// Gloo. Same seed, weights and global batch: the same parameters within fp32's
// CPU-vs-GPU tolerance (the one MatchesCpuAfterKSteps uses).
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <thread>

#include "engine/backend/cuda/device_context.h"
#include "engine/backend/device_info.h"
#include "engine/comm/process_group.h"
#include "engine/comm/store.h"
#include "engine/data/synthetic.h"
#include "engine/models/model.h"
#include "engine/parallel/pipeline.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/cuda_train_util.h"

namespace dpb {
namespace {

using test::TrainedRun;

// Places `n` logical CUDA devices for the scope of a test.
struct LogicalGpus {
  explicit LogicalGpus(int n) { place_cuda_devices(n); }
  ~LogicalGpus() { place_cuda_devices(0); }
};

// `world` ranks as threads of this process sharing the GPU, each on a logical device of
// its own, given one store to meet at; each rank's error ("" where it ran through).
std::vector<std::string> ranks_on_gpu(int world,
                                      const std::function<void(int, const std::shared_ptr<comm::Store>&)>& body) {
  LogicalGpus placed(world);
  std::shared_ptr<comm::Store> store = std::make_shared<comm::MemoryStore>();
  std::vector<std::string> errors(static_cast<size_t>(world));
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r)
    ranks.emplace_back([&, r] {
      try {
        body(r, store);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  return errors;
}

comm::GroupOptions gpu_group_options() {
  comm::GroupOptions go;
  go.timeout = comm::Millis(60000);
  return go;
}

// The same, each rank with its Gloo process group.
std::vector<std::string> gloo_ranks_on_gpu(int world, const std::function<void(int, comm::ProcessGroup&)>& body) {
  return ranks_on_gpu(world, [&](int r, const std::shared_ptr<comm::Store>& store) {
    auto pg = comm::make_process_group("gloo", store, r, world, gpu_group_options(), Device::cuda(r));
    body(r, *pg);
  });
}

std::vector<Device> cudas(int n) {
  std::vector<Device> d;
  for (int i = 0; i < n; ++i) d.push_back(Device::cuda(i));
  return d;
}

void expect_same_training(const TrainedRun& got, const TrainedRun& cpu, const std::string& what) {
  std::string worst;
  const double err = test::trajectory_error(got, cpu, &worst);
  EXPECT_LT(err, 1e-2) << what << ": parameters apart by " << err << " of the distance training moved them; most: "
                       << worst;
  ASSERT_EQ(got.losses.size(), cpu.losses.size());
  for (size_t i = 0; i < cpu.losses.size(); ++i)
    EXPECT_NEAR(got.losses[i], cpu.losses[i], 1e-3 * std::fabs(cpu.losses[i]) + 1e-4) << what << ", step " << i;
}

TEST(CudaLogicalDevices, ShareAGpuWithStreamsOfTheirOwn) {
  DPB_REQUIRE_GPU();
  const int gpus = cuda_device_count();
  LogicalGpus placed(gpus + 2);
  EXPECT_EQ(cuda_logical_device_count(), gpus + 2);
  EXPECT_EQ(cuda_physical_device(gpus), 0);
  EXPECT_EQ(cuda_physical_device(gpus + 1), gpus > 1 ? 1 : 0);
#if DPB_WITH_CUDA
  EXPECT_NE(cuda::DeviceContext::get(0).compute_stream(), cuda::DeviceContext::get(gpus).compute_stream());
#endif
  // Values cross between logical devices on one GPU.
  const Tensor host = test::random_tensor(Shape{3, 257}, 5);
  const Tensor there = host.to(Device::cuda(gpus)).to(Device::cuda(0)).to(Device::cuda(gpus + 1));
  EXPECT_EQ(there.to_vector(), host.to_vector());
}

TEST(CudaLogicalDevices, PlacingWithoutAGpuIsAClearError) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is present";
  EXPECT_THROW(place_cuda_devices(2), Error);
}

class CudaDataParallel : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(CudaDataParallel, OnLogicalGpusMatchesCpuSingleDevice) {
  DPB_REQUIRE_GPU();
  const auto& [name, n] = GetParam();
  const int64_t batch = name == "resnet18" ? 8 : 16, steps = 3;
  cpu::set_threads_per_device(2);
  const TrainedRun cpu_run = test::train_steps(name, Device::cpu(), batch, steps);
  LogicalGpus placed(n);
  test::PrecisionScope fp32(Precision::fp32);
  const TrainedRun dp = test::train_steps(name, batch, steps, [&](TrainOptions& o) {
    o.mode = ParallelMode::dp;
    o.devices = cudas(n);
  });
  expect_same_training(dp, cpu_run, name + " dp over " + std::to_string(n) + " logical GPUs");
}

INSTANTIATE_TEST_SUITE_P(Models, CudaDataParallel,
                         ::testing::Combine(::testing::Values("mlp", "lenet", "resnet18"), ::testing::Values(2, 3)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_N" + std::to_string(std::get<1>(info.param));
                         });

class CudaPipeline : public ::testing::TestWithParam<std::tuple<std::string, PipelineSchedule>> {};

TEST_P(CudaPipeline, OnLogicalGpusMatchesCpuSingleDevice) {
  DPB_REQUIRE_GPU();
  const auto& [name, schedule] = GetParam();
  const int64_t batch = 8, steps = 3;
  cpu::set_threads_per_device(2);
  const TrainedRun cpu_run = test::train_steps(name, Device::cpu(), batch, steps);
  LogicalGpus placed(2);
  test::PrecisionScope fp32(Precision::fp32);
  const TrainedRun mp = test::train_steps(name, batch, steps, [&](TrainOptions& o) {
    o.mode = ParallelMode::pipeline;
    o.devices = cudas(2);
    o.pipeline.schedule = schedule;
    o.pipeline.micro_batches = schedule == PipelineSchedule::naive ? 1 : 4;
  });
  expect_same_training(mp, cpu_run, name + " " + pipeline_schedule_name(schedule) + " on 2 logical GPUs");
}

// The stage events come from each device's own clock (timing events, no wait after each
// op), put onto the host clock from an anchor at each stage's start: with the naive
// schedule only one stage works at a time, so on one timeline the four ops follow each
// other (within what the anchors can be off by), and each stage idles about half the step.
TEST(CudaPipelineEvents, StageEventsOnTheDeviceClockKeepTheirOrderAcrossDevices) {
  DPB_REQUIRE_GPU();
  LogicalGpus placed(2);
  test::PrecisionScope fp32(Precision::fp32);
  Generator g(33);
  auto m = build_model("resnet18", g);
  PipelineOptions o;
  o.devices = cudas(2);
  o.split = {6};
  o.schedule = PipelineSchedule::naive;
  PipelineParallel pp(*m, o);
  SyntheticDataset ds(m->spec().input, m->spec().loss, m->spec().outputs, 64, 5);
  Batch b = make_batch(ds, {0, 1, 2, 3, 4, 5, 6, 7});
  const Tensor x = b.x.to(o.devices.front());
  for (int step = 0; step < 3; ++step) pp.train_step(x, b.target);
  auto events = pp.last_step().events;
  ASSERT_EQ(events.size(), 4u);
  std::sort(events.begin(), events.end(), [](auto& a, auto& c) { return a.begin_ns < c.begin_ns; });
  const std::string order = [&] {
    std::string s;
    for (const auto& e : events) s += std::to_string(e.stage) + e.kind + " ";
    return s;
  }();
  EXPECT_EQ(order, "0F 1F 1B 0B ") << "the naive schedule's ops out of order on the device clock";
  constexpr int64_t kAnchorSlack = 50'000;  // 50 us: the anchors' launch latency, and more
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_LT(events[i].begin_ns, events[i].end_ns) << order;
    if (i > 0) {
      EXPECT_GE(events[i].begin_ns + kAnchorSlack, events[i - 1].end_ns) << order;
    }
  }
  EXPECT_DOUBLE_EQ(pp.last_step().theory, 0.5);
  EXPECT_GT(pp.last_step().bubble, 0.3);
  EXPECT_LT(pp.last_step().bubble, 0.7);
}

INSTANTIATE_TEST_SUITE_P(Schedules, CudaPipeline,
                         ::testing::Combine(::testing::Values("mlp", "lenet", "resnet18", "widemlp"),
                                            ::testing::Values(PipelineSchedule::naive, PipelineSchedule::gpipe,
                                                              PipelineSchedule::one_f_one_b)),
                         [](const auto& info) {
                           std::string s = pipeline_schedule_name(std::get<1>(info.param));
                           return std::get<0>(info.param) + "_" + (s == "1f1b" ? "onefoneb" : s);
                         });

// DDP and FSDP with two ranks (threads of this process) sharing one GPU over Gloo, each
// rank on a logical device of its own (its own streams and library handles, as two
// processes on one GPU have), against one CPU device on the ranks' global batch.
class CudaRanks : public ::testing::TestWithParam<ParallelMode> {};

TEST_P(CudaRanks, GlooRanksSharingOneGpuMatchCpuSingleDevice) {
  DPB_REQUIRE_GPU();
  const ParallelMode mode = GetParam();
  const std::string name = "lenet";
  const int world = 2;
  const int64_t per_rank = 8, steps = 3;
  cpu::set_threads_per_device(2);
  const TrainedRun cpu_run = test::train_steps(name, Device::cpu(), per_rank * world, steps);
  std::vector<TrainedRun> runs(world);
  const auto errors = gloo_ranks_on_gpu(world, [&](int r, comm::ProcessGroup& pg) {
    test::PrecisionScope fp32(Precision::fp32);
    runs[static_cast<size_t>(r)] = test::train_steps(name, per_rank, steps, [&](TrainOptions& o) {
      o.device = Device::cuda(r);
      o.mode = mode;
      o.ddp.group = &pg;
      o.workers = 0;
    });
  });
  for (int r = 0; r < world; ++r) ASSERT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
  // The ranks hold the same parameters, and they are single-device training's. (The
  // loss each rank reports is its own shard's, so only parameters are compared.)
  EXPECT_EQ(runs[0].params, runs[1].params);
  std::string worst;
  EXPECT_LT(test::trajectory_error(runs[0], cpu_run, &worst), 1e-2) << "most: " << worst;
}

INSTANTIATE_TEST_SUITE_P(Modes, CudaRanks, ::testing::Values(ParallelMode::ddp, ParallelMode::fsdp),
                         [](const auto& info) { return std::string(parallel_mode_name(info.param)); });

// FSDP under --precision=bf16: parameters all-gathered in bf16 (half the bytes of the
// same run in fp32), two ranks sharing the GPU over Gloo, training gpt2-tiny as one CPU
// device does in fp32 (held to bf16's tolerance, as single-device bf16 training is).
TEST(CudaFsdp, Bf16PolicyGathersHalfTheBytesAndTrainsLikeTheCpu) {
  DPB_REQUIRE_GPU();
  const std::string name = "gpt2-tiny";
  const int world = 2;
  const int64_t per_rank = 8, steps = 3;
  cpu::set_threads_per_device(2);
  const TrainedRun cpu_run = test::train_steps(name, Device::cpu(), per_rank * world, steps);
  std::map<Precision, std::vector<TrainedRun>> runs;
  for (Precision prec : {Precision::fp32, Precision::bf16}) {
    runs[prec].resize(world);
    const auto errors = gloo_ranks_on_gpu(world, [&](int r, comm::ProcessGroup& pg) {
      test::PrecisionScope scope(prec);
      runs[prec][static_cast<size_t>(r)] = test::train_steps(name, per_rank, steps, [&](TrainOptions& o) {
        o.device = Device::cuda(r);
        o.mode = ParallelMode::fsdp;
        o.ddp.group = &pg;
        o.workers = 0;
      });
    });
    for (int r = 0; r < world; ++r) ASSERT_EQ(errors[static_cast<size_t>(r)], "") << precision_name(prec) << " rank " << r;
  }
  const auto& f32 = runs[Precision::fp32];
  const auto& bf16 = runs[Precision::bf16];
  EXPECT_EQ(bf16[0].params, bf16[1].params);
  ASSERT_EQ(f32[0].all_gather_bytes.size(), bf16[0].all_gather_bytes.size());
  for (size_t s = 0; s < f32[0].all_gather_bytes.size(); ++s) {
    EXPECT_GT(bf16[0].all_gather_bytes[s], 0) << "step " << s;
    EXPECT_EQ(2 * bf16[0].all_gather_bytes[s], f32[0].all_gather_bytes[s]) << "step " << s;
  }
  std::string worst;
  EXPECT_LT(test::trajectory_error(f32[0], cpu_run, &worst), 1e-2) << "fp32, most: " << worst;
  EXPECT_LT(test::trajectory_error(bf16[0], cpu_run, &worst), 0.15) << "bf16, most: " << worst;
}

// Tensor parallelism with two ranks sharing one GPU over Gloo (each the whole batch, its
// part of every cut layer; the vocabulary-parallel embedding and cross-entropy on the
// GPU), and 2D (two tensor-parallel pairs, DDP across them) on 4 ranks, against one CPU
// device.
class CudaTensorParallel : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaTensorParallel, GlooRanksSharingOneGpuMatchCpuSingleDevice) {
  DPB_REQUIRE_GPU();
  const std::string name = GetParam();
  const int64_t batch = 8, steps = 3;
  cpu::set_threads_per_device(2);
  const TrainedRun cpu_run = test::train_steps(name, Device::cpu(), batch, steps);
  for (int tp : {2, 0}) {  // 0: 2D, 4 ranks as 2 x 2
    const int world = tp == 2 ? 2 : 4;
    std::vector<TrainedRun> runs(static_cast<size_t>(world));
    const auto errors = ranks_on_gpu(world, [&](int r, const std::shared_ptr<comm::Store>& store) {
      test::PrecisionScope fp32(Precision::fp32);
      std::unique_ptr<comm::ProcessGroup> pg;
      comm::MeshGroups mesh;
      if (tp == 2) pg = comm::make_process_group("gloo", store, r, world, gpu_group_options(), Device::cuda(r));
      else mesh = comm::make_mesh_groups("gloo", store, r, world, 2, gpu_group_options(), Device::cuda(r));
      runs[static_cast<size_t>(r)] = test::train_steps(name, tp == 2 ? batch : batch / 2, steps, [&](TrainOptions& o) {
        o.device = Device::cuda(r);
        o.workers = 0;
        if (tp == 2) {
          o.mode = ParallelMode::tp;
          o.ddp.group = pg.get();
        } else {
          o.mode = ParallelMode::ddp;
          o.ddp.group = mesh.data.get();
          o.tp_group = mesh.tensor.get();
        }
      });
    });
    for (int r = 0; r < world; ++r) ASSERT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
    for (int r = 1; r < world; ++r) EXPECT_EQ(runs[0].params, runs[static_cast<size_t>(r)].params) << "rank " << r;
    std::string worst;
    EXPECT_LT(test::trajectory_error(runs[0], cpu_run, &worst), 1e-2) << (tp == 2 ? "tp" : "2D") << ", most: " << worst;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, CudaTensorParallel, ::testing::Values("mlp", "gpt2-tiny"),
                         [](const auto& info) { return info.param == "gpt2-tiny" ? std::string("gpt2_tiny") : info.param; });

}  // namespace
}  // namespace dpb
