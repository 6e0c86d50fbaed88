// The engine's kernels one at a time on the CPU backend (oneDNN): convolution forward
// and both backwards at ResNet-18 (CIFAR) shapes, the linear layers of widemlp, mlp and
// GPT-2 (1024 tokens: an MLP projection each way, and the tied head), batch norm and ReLU. items_per_second is FLOP/s for the matrix ops (2 x MACs) and
// elements/s for the others, comparable to torch.nn.functional on the same threads.
//
//   bench_kernels --benchmark_filter=conv
//   bench_kernels --benchmark_format=json --benchmark_out=kernels.json
#include <benchmark/benchmark.h>

#include <optional>

#include "engine/backend/cpu/cpu_context.h"
#include "engine/backend/ops.h"
#include "engine/core/rng.h"

namespace {

using namespace dpb;

Tensor random(const Shape& s, uint64_t seed) {
  Generator g(seed);
  std::vector<float> v(static_cast<size_t>(s.numel()));
  for (auto& x : v) x = static_cast<float>(g.normal());
  return Tensor::from_vector(s, v);
}

struct Scope {
  explicit Scope(int threads) {
    cpu::set_threads_per_device(threads);
    scope.emplace(0);
  }
  std::optional<cpu::CpuDeviceScope> scope;
};

// Args: {batch, channels, size, threads}: a 3x3 stride-1 convolution C -> C on size x size.
void conv3x3(benchmark::State& state, int which) {
  const int64_t n = state.range(0), c = state.range(1), hw = state.range(2);
  Scope s(static_cast<int>(state.range(3)));
  Tensor x = random({n, c, hw, hw}, 1), w = random({c, c, 3, 3}, 2), b;
  ops::Conv2dParams p{1, 1, true};
  Tensor y = ops::conv2d_forward(x, w, b, p);
  Tensor dy = random(y.shape(), 3).to_layout(y.layout());
  Tensor dx = Tensor::empty_like(x.to_layout(y.layout()));
  Tensor dw = Tensor::empty(w.shape());
  for (auto _ : state) {
    if (which == 0) benchmark::DoNotOptimize(ops::conv2d_forward(x, w, b, p));
    if (which == 1) ops::conv2d_backward_data(dy, w, dx, p);
    if (which == 2) ops::conv2d_backward_weights(x, dy, dw, b, p, false);
  }
  const double flops = 2.0 * static_cast<double>(n * c * c * 9 * hw * hw);
  state.SetItemsProcessed(static_cast<int64_t>(static_cast<double>(state.iterations()) * flops));
}

// Args: {batch, in, out, threads}
void linear(benchmark::State& state, int which) {
  const int64_t n = state.range(0), in = state.range(1), out = state.range(2);
  Scope s(static_cast<int>(state.range(3)));
  Tensor x = random({n, in}, 1), w = random({out, in}, 2), b = random({out}, 3);
  Tensor y = Tensor::empty({n, out}), dy = random({n, out}, 4), dx = Tensor::empty({n, in});
  Tensor dw = Tensor::empty({out, in}), db = Tensor::empty({out});
  for (auto _ : state) {
    if (which == 0) ops::linear_forward(x, w, b, y);
    if (which == 1) ops::linear_backward_data(dy, w, dx);
    if (which == 2) ops::linear_backward_weights(x, dy, dw, db, false);
  }
  state.SetItemsProcessed(static_cast<int64_t>(static_cast<double>(state.iterations()) * 2.0 *
                                               static_cast<double>(n * in * out)));
}

// Args: {batch, channels, size, threads}: training-mode batch norm forward, and ReLU.
void batchnorm(benchmark::State& state) {
  const int64_t n = state.range(0), c = state.range(1), hw = state.range(2);
  Scope s(static_cast<int>(state.range(3)));
  Tensor x = random({n, c, hw, hw}, 1), g = Tensor::full({c}, 1.0f), b = Tensor::zeros({c});
  Tensor rm = Tensor::zeros({c}), rv = Tensor::full({c}, 1.0f), y = Tensor::empty_like(x);
  ops::BatchNormSaved saved;
  for (auto _ : state) ops::batchnorm_forward_train(x, g, b, y, saved, rm, rv, 0.1f, 1e-5f);
  state.SetItemsProcessed(state.iterations() * x.numel());
}

void relu(benchmark::State& state) {
  const int64_t n = state.range(0), c = state.range(1), hw = state.range(2);
  Scope s(static_cast<int>(state.range(3)));
  Tensor x = random({n, c, hw, hw}, 1), y = Tensor::empty_like(x);
  for (auto _ : state) ops::relu_forward(x, y);
  state.SetItemsProcessed(state.iterations() * x.numel());
}

}  // namespace

// The first configuration of each is tiny (CTest smoke-runs those: filter /2/).
BENCHMARK_CAPTURE(conv3x3, forward, 0)->Args({2, 16, 8, 1})->Args({16, 64, 32, 1})->Args({16, 128, 16, 1})
    ->Args({16, 256, 8, 1})->Args({16, 512, 4, 1})->Args({16, 64, 32, 2})->UseRealTime();
BENCHMARK_CAPTURE(conv3x3, backward_data, 1)->Args({2, 16, 8, 1})->Args({16, 64, 32, 1})->Args({16, 256, 8, 1})
    ->UseRealTime();
BENCHMARK_CAPTURE(conv3x3, backward_weights, 2)->Args({2, 16, 8, 1})->Args({16, 64, 32, 1})->Args({16, 256, 8, 1})
    ->UseRealTime();
BENCHMARK_CAPTURE(linear, forward, 0)->Args({2, 64, 32, 1})->Args({64, 784, 512, 1})->Args({32, 5000, 10000, 1})
    ->Args({32, 5000, 10000, 2})->Args({1024, 768, 3072, 1})->Args({1024, 3072, 768, 1})
    ->Args({1024, 768, 50304, 1})->UseRealTime();
BENCHMARK_CAPTURE(linear, backward_data, 1)->Args({2, 64, 32, 1})->Args({64, 784, 512, 1})
    ->Args({32, 5000, 10000, 1})->Args({1024, 768, 3072, 1})->Args({1024, 3072, 768, 1})
    ->Args({1024, 768, 50304, 1})->UseRealTime();
BENCHMARK_CAPTURE(linear, backward_weights, 2)->Args({2, 64, 32, 1})->Args({64, 784, 512, 1})
    ->Args({32, 5000, 10000, 1})->Args({1024, 768, 3072, 1})->Args({1024, 3072, 768, 1})
    ->Args({1024, 768, 50304, 1})->UseRealTime();
BENCHMARK(batchnorm)->Args({2, 16, 8, 1})->Args({16, 64, 32, 1})->Args({16, 64, 32, 2})->UseRealTime();
BENCHMARK(relu)->Args({2, 16, 8, 1})->Args({16, 64, 32, 1})->Args({16, 64, 32, 2})->UseRealTime();

BENCHMARK_MAIN();
