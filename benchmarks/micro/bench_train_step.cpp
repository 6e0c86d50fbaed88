// One training step (forward, loss, backward, SGD with momentum) of the CPU models,
// timed by Google Benchmark. items_per_second is samples/s, comparable to
// benchmarks/pytorch_reference/train_step.py run with the same model, batch and threads.
//
//   bench_train_step --benchmark_filter='lenet/64/1$'
//   bench_train_step --benchmark_format=json --benchmark_out=train_step.json
#include <benchmark/benchmark.h>

#include "engine/backend/cpu/cpu_context.h"
#include "engine/data/synthetic.h"
#include "engine/models/model.h"
#include "engine/train/trainer.h"

namespace {

using namespace dpb;

void train_step(benchmark::State& state, const std::string& name) {
  const int64_t batch = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  cpu::set_threads_per_device(threads);
  cpu::CpuDeviceScope scope(0);
  Generator gen(0);
  auto model = build_model(name, gen);
  const ModelSpec& spec = model->spec();
  SyntheticDataset data(spec.input, spec.loss, spec.outputs, 4096, 0);
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < batch; ++i) idx.push_back(i);
  const Batch b = make_batch(data, idx);
  TrainOptions o;
  o.batch = batch;
  o.optim.lr = 0.01f;
  Trainer trainer(*model, data, o);  // the step dpbench times, on one fixed batch
  int64_t step = 0;
  for (auto _ : state) benchmark::DoNotOptimize(trainer.step({b}, step++).loss);
  state.SetItemsProcessed(state.iterations() * batch);
  state.counters["threads"] = threads;
}

}  // namespace

// Args: {batch, threads}. The first of each is tiny (CTest smoke-runs those).
BENCHMARK_CAPTURE(train_step, mlp, std::string("mlp"))->Args({2, 1})->Args({64, 1})->Args({64, 2})
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(train_step, lenet, std::string("lenet"))->Args({2, 1})->Args({64, 1})->Args({64, 2})
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(train_step, resnet18, std::string("resnet18"))->Args({2, 1})->Args({16, 1})->Args({16, 2})
    ->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
