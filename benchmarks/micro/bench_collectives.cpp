// Collectives over the Gloo process group with ranks as threads of one process
// (loopback TCP), and memcpy as the machine's ceiling for moving bytes.
// bytes_per_second is algbw; the busbw counter is algbw x F (nccl-tests' factors).
//
//   bench_collectives --benchmark_filter='Allreduce/1048576'
//   bench_collectives --benchmark_format=json --benchmark_out=collectives.json
#include <benchmark/benchmark.h>

#include <array>
#include <cstring>
#include <map>
#include <mutex>

#include "engine/comm/gloo/process_group_gloo.h"

namespace {

using namespace dpb;
using namespace dpb::comm;

void memcpy_bandwidth(benchmark::State& state) {
  const auto bytes = static_cast<size_t>(state.range(0));
  std::vector<char> a(bytes, 1), b(bytes, 0);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), bytes);
    benchmark::DoNotOptimize(b.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

// Both ranks (the benchmark's threads) must meet in the same store namespace for each
// run; each thread counts its own runs, which happen in the same order.
std::string run_prefix(int thread, int64_t bytes, const char* op) {
  static std::mutex mu;
  static std::map<std::tuple<int, int64_t, std::string>, int> runs;
  std::lock_guard<std::mutex> lock(mu);
  return std::string(op) + "/" + std::to_string(bytes) + "/" + std::to_string(runs[{thread, bytes, op}]++) + "/";
}

std::shared_ptr<Store> shared_store() {
  static auto store = std::make_shared<MemoryStore>();
  return store;
}

void collective(benchmark::State& state, const char* op) {
  const int rank = static_cast<int>(state.thread_index()), n = static_cast<int>(state.threads());
  const int64_t bytes = state.range(0);
  GroupOptions o;
  o.timeout = Millis(60000);
  ProcessGroupGloo group(std::make_shared<PrefixStore>(run_prefix(rank, bytes, op), shared_store()), rank, n, o);
  ProcessGroup& pg = group;
  const int64_t count = std::max<int64_t>(1, bytes / 4);
  Tensor in = Tensor::full({count}, 1.0f), out = Tensor::empty({count * n});
  Tensor chunk = Tensor::empty({std::max<int64_t>(1, count / n)}), scatter_in = Tensor::full({chunk.numel() * n}, 1.0f);
  double factor = 1.0;
  for (auto _ : state) {
    if (std::strcmp(op, "allreduce") == 0) {
      pg.allreduce(in)->wait();
      factor = 2.0 * (n - 1) / n;
    } else if (std::strcmp(op, "allgather") == 0) {
      pg.allgather(out, in)->wait();
      factor = static_cast<double>(n - 1) / n;
    } else {
      pg.broadcast(in, 0)->wait();
    }
  }
  const int64_t moved = std::strcmp(op, "allgather") == 0 ? count * n * 4 : count * 4;
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * moved);
  state.counters["busbw"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * static_cast<double>(moved) * factor,
                         benchmark::Counter::kIsRate);
}

BENCHMARK(memcpy_bandwidth)->RangeMultiplier(4)->Range(1 << 10, 64 << 20);
BENCHMARK_CAPTURE(collective, Allreduce, "allreduce")->RangeMultiplier(4)->Range(1 << 10, 64 << 20)->Threads(2)->UseRealTime();
BENCHMARK_CAPTURE(collective, Allgather, "allgather")->RangeMultiplier(4)->Range(1 << 10, 16 << 20)->Threads(2)->UseRealTime();
BENCHMARK_CAPTURE(collective, Broadcast, "broadcast")->RangeMultiplier(4)->Range(1 << 10, 16 << 20)->Threads(2)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
