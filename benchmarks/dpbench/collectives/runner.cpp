#include "benchmarks/dpbench/collectives/runner.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <ostream>

#include "engine/backend/ops.h"
#include "engine/core/clock.h"
#include "engine/core/error.h"

namespace dpb::bench {

float collective_pattern(int rank, int64_t i) {
  return static_cast<float>(rank + 1) * static_cast<float>(i % 13 + 1) * 0.5f;
}

Tensor collective_filled(int rank, int64_t n, Device device) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = collective_pattern(rank, i);
  return Tensor::from_vector({n}, v, device);
}

CollectiveBuffers in_place_buffers(int64_t bytes, int rank, int, Device device) {
  CollectiveBuffers b;
  b.in_count = b.out_count = std::max<int64_t>(1, bytes / 4);
  b.bytes = b.in_count * 4;
  b.in = collective_filled(rank, b.in_count, device);
  return b;
}

const std::vector<const CollectiveSpec*>& collective_specs() {
  static const std::vector<const CollectiveSpec*> all{&allreduce_spec(), &allgather_spec(), &reduce_scatter_spec(),
                                                      &broadcast_spec()};
  return all;
}

const CollectiveSpec& collective_spec(const std::string& name) {
  for (const auto* s : collective_specs())
    if (name == s->name) return *s;
  DPB_FAIL() << "unknown collective '" << name << "' in --ops (valid: allreduce, allgather, reduce_scatter, broadcast)";
}

std::vector<reports::CollectiveRow> run_collectives(comm::ProcessGroup& pg, Device device, const CollectiveOptions& o,
                                                     std::ostream& out) {
  DPB_CHECK(o.min_bytes >= 1 && o.max_bytes >= o.min_bytes && o.factor >= 2)
      << "collective sizes: from " << o.min_bytes << " to " << o.max_bytes << " bytes by a factor " << o.factor
      << " (need 1 <= min <= max and a factor >= 2)";
  DPB_CHECK(o.iters >= 1 && o.warmup >= 0) << "collectives: " << o.iters << " iterations, " << o.warmup << " warm-up";
  const int rank = pg.rank(), n = pg.size();
  int64_t issued = 0;
  auto maybe_die = [&] {
    if (o.kill_rank == rank && issued >= o.kill_after) {
      std::fprintf(stderr, "rank %d: --kill-rank: killing itself after %lld collectives\n", rank,
                   static_cast<long long>(issued));
      std::fflush(stderr);
      ::kill(::getpid(), SIGKILL);
    }
  };
  std::vector<reports::CollectiveRow> rows;
  if (rank == 0)
    out << fmt::format("{:<15} {:>12} {:>11} {:>6} {:>12} {:>12} {:>12} {:>8}\n", "# op", "size (B)", "count",
                       "type", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "#wrong");
  for (const auto& name : o.ops) {
    const CollectiveSpec& spec = collective_spec(name);
    for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.factor) {
      CollectiveBuffers b = spec.make(bytes, rank, n, device);
      for (int i = 0; i < o.warmup; ++i) {
        maybe_die();
        spec.issue(pg, b)->wait();
        ++issued;
      }
      pg.barrier()->wait();
      const int64_t t0 = now_ns();
      for (int i = 0; i < o.iters; ++i) {
        maybe_die();
        spec.issue(pg, b)->wait();
        ++issued;
      }
      ops::synchronize(device);
      const double mine = static_cast<double>(now_ns() - t0) * 1e-9 / o.iters;
      Tensor t = Tensor::full({1}, static_cast<float>(mine), device);
      pg.allreduce(t, comm::ReduceOp::max)->wait();
      const double seconds = t.to_vector()[0];
      // Verify on fresh inputs.
      b = spec.make(bytes, rank, n, device);
      spec.issue(pg, b)->wait();
      ops::synchronize(device);
      Tensor wrong = Tensor::full({1}, static_cast<float>(spec.count_wrong(b, rank, n)), device);
      pg.allreduce(wrong, comm::ReduceOp::sum)->wait();
      const auto bad = static_cast<int64_t>(wrong.to_vector()[0]);
      const double algbw = static_cast<double>(b.bytes) / seconds / 1e9;
      const double busbw = algbw * spec.bus_factor(n);
      if (rank == 0) {
        out << fmt::format("{:<15} {:>12} {:>11} {:>6} {:>12.1f} {:>12.3f} {:>12.3f} {:>8}\n", name, b.bytes,
                           b.bytes / 4, "float", seconds * 1e6, algbw, busbw, bad)
            << std::flush;
        rows.push_back({name, b.bytes, b.bytes / 4, "float32", seconds * 1e6, algbw, busbw, bad});
      }
    }
  }
  return rows;
}

}  // namespace dpb::bench
