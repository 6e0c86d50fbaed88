// The DataLoader alone: batches per second delivered to a consumer that does nothing
// else, for Fashion-MNIST (when installed; synthetic data of its shape otherwise) and
// CIFAR-shaped synthetic data with crop/flip augmentation. items_per_second is
// samples/s, to compare with bench_train_step: the loader must never be the
// bottleneck by accident.
//
//   bench_data_loader --benchmark_filter='fashion/64/0/'
#include <benchmark/benchmark.h>

#include <filesystem>

#include "engine/data/idx.h"
#include "engine/data/loader.h"
#include "engine/data/synthetic.h"

namespace {

using namespace dpb;

std::unique_ptr<Dataset> fashion_or_synthetic(benchmark::State& state) {
  if (std::filesystem::exists(std::string(kFashionMnistDir) + "/train-images-idx3-ubyte.gz")) {
    state.SetLabel("fashion-mnist");
    return load_mnist_like("fashion-mnist", kFashionMnistDir, true);
  }
  state.SetLabel("synthetic 1x28x28 (fashion-mnist not installed)");
  return std::make_unique<SyntheticDataset>(Shape{1, 28, 28}, LossKind::cross_entropy, 10, 60000, 0);
}

void drain(benchmark::State& state, const Dataset& ds, const Transform* aug) {
  DistributedSampler sampler(ds.size(), 1, 0, true, 0);
  LoaderOptions o;
  o.batch = state.range(0);
  o.workers = static_cast<int>(state.range(1));
  DataLoader loader(ds, sampler, o, aug);
  int64_t epoch = 0, samples = 0;
  loader.start_epoch(epoch);
  for (auto _ : state) {
    auto b = loader.next();
    if (!b) {
      loader.start_epoch(++epoch);
      b = loader.next();
    }
    samples += b->size();
    benchmark::DoNotOptimize(b->x.data());
  }
  state.SetItemsProcessed(samples);
}

void fashion(benchmark::State& state) {
  static std::unique_ptr<Dataset> ds = fashion_or_synthetic(state);
  drain(state, *ds, nullptr);
}

void cifar_augmented(benchmark::State& state) {
  static SyntheticDataset ds(Shape{3, 32, 32}, LossKind::cross_entropy, 10, 50000, 0);
  static RandomCropFlip aug(4, {0.0f, 0.0f, 0.0f});
  drain(state, ds, &aug);
}

}  // namespace

// Args: {batch, workers}; the first of each is tiny (CTest smoke-runs those).
BENCHMARK(fashion)->Args({2, 0})->Args({64, 0})->Args({64, 1})->Args({64, 2})->UseRealTime();
BENCHMARK(cifar_augmented)->Args({2, 0})->Args({256, 0})->Args({256, 2})->UseRealTime();

BENCHMARK_MAIN();
