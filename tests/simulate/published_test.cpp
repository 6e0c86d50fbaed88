// `dpbench --simulate` against published DDP scaling: NVIDIA's ResNet-50 v1.5 figures on
// DGX-1 in FP32 and mixed precision (the last test), and PyTorch's published DDP benchmark
// (pytorch/pytorch benchmarks/distributed/ddp/README.md, PyTorch 1.4, CUDA 10.0): 8 DGX-1
// machines, V100, 4 x 100 Gb/s InfiniBand each, NCCL, batch 32 per GPU. Its first table:
// p50 seconds per iteration without DDP on one GPU, with DDP on 1 GPU ("1M/1G") and on 2 to
// 16 GPUs, bucket_cap_mb 25. Its second (diff.py's example): p75 seconds per iteration
// with bucket_cap_mb 1 on 1 to 16 GPUs, where many small all-reduces make communication
// matter more as GPUs are added.
//
// Three figures of the preset are fitted to four of these points: the reducer's cost per
// gradient to ResNet-50's 1-GPU DDP row, the contention while all-reduces are in flight to
// the two 2-GPU rows (25 MiB), and the contention while a communication kernel runs to
// ResNet-50's 16-GPU row with 1 MiB buckets. Every other point (16) is a prediction, and
// it must be within 3 % and, over all of them, closer than two baselines that know nothing
// of communication: the step without DDP, and the 2-GPU time reused for every GPU count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "benchmarks/simulate/simulator.h"

namespace dpb::sim {
namespace {

struct Series {
  double bucket_mb;
  std::vector<std::pair<int, double>> points;  // GPUs (1: DDP on one GPU), seconds per iteration
};

struct Published {
  const char* model;
  double no_ddp;  // one GPU, no DDP
  std::vector<Series> series;
};

const std::vector<Published>& published() {
  static const std::vector<Published> p{
      {"resnet50",
       0.097,
       {{25, {{1, 0.100}, {2, 0.103}, {4, 0.103}, {8, 0.104}, {16, 0.104}}},
        {1, {{1, 0.101}, {2, 0.104}, {4, 0.105}, {8, 0.107}, {16, 0.108}}}}},
      {"resnet101",
       0.162,
       {{25, {{1, 0.171}, {2, 0.176}, {4, 0.176}, {8, 0.179}, {16, 0.179}}},
        {1, {{1, 0.172}, {2, 0.179}, {4, 0.180}, {8, 0.184}, {16, 0.187}}}}},
  };
  return p;
}

bool fitted_point(const Published& m, const Series& s, int gpus) {
  const bool r50 = std::string(m.model) == "resnet50";
  if (s.bucket_mb == 25) return gpus == 2 || (gpus == 1 && r50);
  return gpus == 16 && r50;
}

StepProfile profile_of(const Published& m, const LinkModel& link) {
  ModelOptions imagenet;
  imagenet.classes = 1000;
  return analytic_profile(m.model, 32, m.no_ddp, link.hardware, imagenet);
}

SimOptions options(double bucket_mb) {
  SimOptions o;
  o.bucket_bytes = bucket_mb * (1 << 20);
  o.first_bucket_bytes = std::min(o.bucket_bytes, 1.0 * (1 << 20));
  o.reducer_on_one_rank = true;
  return o;
}

size_t gradients(const StepProfile& p) {
  size_t n = 0;
  for (const auto& l : p.layers) n += l.params.size();
  return n;
}

// The value of `field` in [0, 10] that makes the simulated step of `m` at `gpus` GPUs with
// `bucket_mb` buckets take `want` seconds (bisection; the step grows with it).
double fit_field(LinkModel link, double LinkModel::*field, const Published& m, int gpus, double bucket_mb,
                 double want) {
  const StepProfile p = profile_of(m, link);
  double lo = 0, hi = 10;
  for (int it = 0; it < 60; ++it) {
    link.*field = (lo + hi) / 2;
    (simulate_point(p, link, gpus, options(bucket_mb)).step_s < want ? lo : hi) = link.*field;
  }
  return (lo + hi) / 2;
}

TEST(Published, ThreeFiguresAreFittedOnFourPoints) {
  const LinkModel preset = load_preset("dgx1-v100");
  // The reducer's cost per gradient: ResNet-50's 1-GPU DDP step over its no-DDP step.
  const Published& r50 = published()[0];
  const double per_gradient =
      (r50.series[0].points[0].second - r50.no_ddp) / static_cast<double>(gradients(profile_of(r50, preset)));
  std::printf("reducer: %.2f us per gradient\n", per_gradient * 1e6);
  EXPECT_NEAR(preset.reducer_per_gradient_s, per_gradient, 0.05e-6);
  // The two contentions depend on each other: the in-flight one is the mean of the values
  // that reproduce each model's 2-GPU point (25 MiB buckets), the kernel one reproduces
  // ResNet-50's 16-GPU point with 1 MiB buckets; iterated to their fixed point.
  LinkModel link = preset;
  for (int round = 0; round < 30; ++round) {
    double sum = 0;
    for (const Published& m : published())
      sum += fit_field(link, &LinkModel::contention, m, 2, 25, m.series[0].points[1].second);
    link.contention = sum / published().size();
    link.kernel_contention = fit_field(link, &LinkModel::kernel_contention, r50, 16, 1, r50.series[1].points[4].second);
  }
  std::printf("contention %.4f while all-reduces are in flight, %.4f more while one runs\n", link.contention,
              link.kernel_contention);
  EXPECT_NEAR(preset.contention, link.contention, 0.002);
  EXPECT_NEAR(preset.kernel_contention, link.kernel_contention, 0.002);
}

TEST(Published, DgxOneV100PredictionsBeatBothBaselines) {
  const LinkModel link = load_preset("dgx1-v100");
  double sim_err = 0, no_comm_err = 0, reuse_err = 0;
  int n = 0;
  for (const Published& m : published()) {
    const StepProfile p = profile_of(m, link);
    for (const Series& s : m.series) {
      const double two_gpus = s.points[1].second;
      for (const auto& [gpus, want] : s.points) {
        const SimPoint got = simulate_point(p, link, gpus, options(s.bucket_mb));
        const double e = got.step_s / want - 1;
        std::printf("%-9s bucket %2g MiB %2d GPUs: published %.3f s, predicted %.4f s (%+.1f %%), without DDP %+.1f %%, "
                    "2-GPU time %+.1f %%%s; %s\n",
                    m.model, s.bucket_mb, gpus, want, got.step_s, 100 * e, 100 * (m.no_ddp / want - 1),
                    100 * (two_gpus / want - 1), fitted_point(m, s, gpus) ? " (fitted)" : "",
                    got.critical_path.c_str());
        if (fitted_point(m, s, gpus)) continue;
        EXPECT_LT(std::fabs(e), 0.03) << m.model << " bucket " << s.bucket_mb << " MiB at " << gpus << " GPUs";
        sim_err += std::fabs(e);
        no_comm_err += std::fabs(m.no_ddp / want - 1);
        reuse_err += std::fabs(two_gpus / want - 1);
        ++n;
      }
    }
  }
  ASSERT_EQ(n, 16);
  std::printf("mean error over %d predicted points: simulator %.2f %%, without DDP %.2f %%, 2-GPU time reused %.2f %%\n",
              n, 100 * sim_err / n, 100 * no_comm_err / n, 100 * reuse_err / n);
  EXPECT_LT(sim_err, no_comm_err) << "the simulator is no closer than a step without communication";
  EXPECT_LT(sim_err, reuse_err) << "the simulator is no closer than the 2-GPU time reused";
}

// Bucket size moves the published steps (1 MiB buckets are 1-4 % slower than 25 MiB from 2
// GPUs on); the simulation must move the same way.
TEST(Published, SmallBucketsCostMoreAsGpusAreAdded) {
  const LinkModel link = load_preset("dgx1-v100");
  for (const Published& m : published()) {
    const StepProfile p = profile_of(m, link);
    for (int gpus : {4, 8, 16}) {
      const double big = simulate_point(p, link, gpus, options(25)).step_s;
      const double small = simulate_point(p, link, gpus, options(1)).step_s;
      EXPECT_GT(small, big) << m.model << " at " << gpus << " GPUs";
    }
  }
}

// Where communication matters more: NVIDIA's published ResNet-50 v1.5 training throughput
// with PyTorch DDP on DGX-1 machines (8 x V100, NVLink, NCCL), in the README of
// NVIDIA/DeepLearningExamples PyTorch/Classification/ConvNets/resnet50v1.5 ("Training
// performance: NVIDIA DGX-1 16GB" and "... 32GB", pytorch-21.03 NGC container), images/s on
// 1 and 8 GPUs; batch per GPU from that directory's configs.yml (DGX1V: FP32 112, AMP 256,
// 25 MiB buckets, PyTorch's default). Mixed precision makes the compute 3.3x faster while
// the gradients (fp32, 97.5 MB) and their all-reduce stay, and the published E(8) falls
// from 0.97 to 0.87. Every point is a prediction: the dgx1-v100 preset was fitted on
// PyTorch's benchmark above, nothing here; the one-GPU runs are without DDP. Each 8-GPU step
// must be predicted closer than the step without communication (E(8) = 1), FP32 within
// 3 %. Mixed precision is predicted 8-9 % short (E(8) 0.95 against 0.87): the preset's
// contention, fitted on fp32 steps of 0.1 s, underrates what NCCL's kernels take from a
// compute that is 3.3x denser; the bound below holds that figure, so a change that makes
// it worse fails.
TEST(Published, NvidiaResNet50OnDgx1) {
  struct Point {
    const char* machine;
    const char* precision;
    int batch;
    double one_gpu, eight_gpus;  // images/s
    double bound;                // largest |error| of the 8-GPU step allowed
  };
  const Point points[] = {
      {"DGX-1 16GB", "FP32", 112, 367, 2855, 0.03},  {"DGX-1 16GB", "AMP", 256, 1200, 8322, 0.10},
      {"DGX-1 32GB", "FP32", 112, 356, 2766, 0.03},  {"DGX-1 32GB", "AMP", 256, 1156, 8056, 0.10},
  };
  const LinkModel link = load_preset("dgx1-v100");
  ModelOptions imagenet;
  imagenet.classes = 1000;
  SimOptions o = options(25);
  o.reducer_on_one_rank = false;
  for (const Point& pt : points) {
    const double one = pt.batch / pt.one_gpu, eight = 8.0 * pt.batch / pt.eight_gpus;  // seconds a step
    const StepProfile p = analytic_profile("resnet50", pt.batch, one, link.hardware, imagenet);
    EXPECT_NEAR(simulate_point(p, link, 1, o).step_s, one, 1e-9);
    const SimPoint got = simulate_point(p, link, 8, o);
    const double e = got.step_s / eight - 1, baseline = one / eight - 1;
    std::printf("%s %s batch %d: 8 GPUs %.4f s published, %.4f s predicted (%+.1f %%, E(8) %.3f against %.3f), "
                "without communication %+.1f %%; %s\n",
                pt.machine, pt.precision, pt.batch, eight, got.step_s, 100 * e, one / got.step_s,
                pt.eight_gpus / (8 * pt.one_gpu), 100 * baseline, got.critical_path.c_str());
    EXPECT_LT(std::fabs(e), std::fabs(baseline)) << pt.machine << " " << pt.precision;
    EXPECT_LT(std::fabs(e), pt.bound) << pt.machine << " " << pt.precision;
  }
}

}  // namespace
}  // namespace dpb::sim
