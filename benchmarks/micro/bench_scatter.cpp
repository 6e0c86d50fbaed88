// DataParallel's data movement between logical CPU devices: scattering a batch in
// torch.chunk pieces, gathering the outputs, and a whole DataParallel forward + backward
// (broadcast of parameters, scatter, replicas, gather, gradient reduction) against the
// same model on one device. bytes_per_second counts the batch moved.
//
//   bench_scatter --benchmark_filter=scatter_gather
#include <benchmark/benchmark.h>

#include "engine/backend/cpu/cpu_context.h"
#include "engine/data/synthetic.h"
#include "engine/models/model.h"
#include "engine/parallel/data_parallel.h"

namespace {

using namespace dpb;

// Args: {devices, batch}: lenet-sized inputs (1 x 28 x 28) scattered and gathered.
void scatter_gather(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const int64_t batch = state.range(1);
  cpu::set_threads_per_device(1);
  cpu::CpuDeviceScope scope(0);
  Tensor x = Tensor::full({batch, 1, 28, 28}, 0.5f);
  const auto chunks = DataParallel::chunk_sizes(batch, n);
  std::vector<Tensor> parts(chunks.size());
  Tensor gathered = Tensor::empty(x.shape());
  for (auto _ : state) {
    int64_t begin = 0;
    for (size_t r = 0; r < chunks.size(); ++r) {
      parts[r] = x.slice(begin, begin + chunks[r]).to(Device::cpu(static_cast<int>(r)));
      begin += chunks[r];
    }
    begin = 0;
    for (size_t r = 0; r < chunks.size(); ++r) {
      gathered.slice(begin, begin + chunks[r]).copy_from(parts[r]);
      begin += chunks[r];
    }
  }
  state.SetBytesProcessed(state.iterations() * 2 * x.numel() * static_cast<int64_t>(sizeof(float)));
}

// Args: {devices, batch}: one DataParallel forward + backward of mlp (devices 1: the
// plain model).
void dp_step(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const int64_t batch = state.range(1);
  cpu::set_threads_per_device(1);
  cpu::CpuDeviceScope scope(0);
  Generator g(0);
  auto model = build_model("mlp", g);
  SyntheticDataset data(model->spec().input, model->spec().loss, model->spec().outputs, 512, 0);
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < batch; ++i) idx.push_back(i);
  const Batch b = make_batch(data, idx);
  std::vector<Device> devices;
  for (int d = 0; d < n; ++d) devices.push_back(Device::cpu(d));
  std::unique_ptr<DataParallel> dp;
  if (n > 1) dp = std::make_unique<DataParallel>(*model, devices);
  for (auto _ : state) {
    Tensor out = dp ? dp->forward(b.x) : model->forward(b.x);
    LossResult l = compute_loss(model->spec().loss, out, b.target, true);
    if (dp) dp->backward(l.grad);
    else model->backward(l.grad);
    model->zero_grad();
  }
  state.SetItemsProcessed(state.iterations() * batch);
}

}  // namespace

BENCHMARK(scatter_gather)->Args({2, 2})->Args({2, 256})->Args({4, 256})->Args({2, 4096})->UseRealTime();
BENCHMARK(dp_step)->Args({2, 2})->Args({1, 128})->Args({2, 128})->UseRealTime()->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
