#include "benchmarks/dpbench/collectives.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <ostream>

#include "engine/backend/ops.h"
#include "engine/core/clock.h"
#include "engine/core/error.h"
#include "reports/report.h"

namespace dpb::bench {

namespace {

// Rank r's value at element i: exact in f32, and sums over ranks stay exact.
float pattern(int rank, int64_t i) { return static_cast<float>(rank + 1) * static_cast<float>(i % 13 + 1) * 0.5f; }

Tensor filled(int rank, int64_t n, Device device) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = pattern(rank, i);
  return Tensor::from_vector({n}, v, device);
}

struct Case {
  std::string op;
  int64_t in_count = 0, out_count = 0;  // per rank
  int64_t bytes = 0;                    // nccl-tests' size column
};

Case make_case(const std::string& op, int64_t bytes, int n) {
  Case c;
  c.op = op;
  const int64_t total = std::max<int64_t>(1, bytes / 4);
  if (op == "allgather") {
    c.in_count = std::max<int64_t>(1, total / n);
    c.out_count = c.in_count * n;
    c.bytes = c.out_count * 4;
  } else if (op == "reduce_scatter") {
    c.out_count = std::max<int64_t>(1, total / n);
    c.in_count = c.out_count * n;
    c.bytes = c.in_count * 4;
  } else {
    c.in_count = c.out_count = total;
    c.bytes = total * 4;
  }
  return c;
}

// One call of the case's collective; returns its work.
std::shared_ptr<comm::Work> issue(comm::ProcessGroup& pg, const Case& c, Tensor& in, Tensor& out) {
  if (c.op == "allreduce") return pg.allreduce(in, comm::ReduceOp::sum);
  if (c.op == "broadcast") return pg.broadcast(in, 0);
  if (c.op == "allgather") return pg.allgather(out, in);
  if (c.op == "reduce_scatter") return pg.reduce_scatter(out, in, comm::ReduceOp::sum);
  DPB_FAIL() << "unknown collective '" << c.op << "'";
}

// Elements of this rank's result that differ from what the op must produce.
int64_t count_wrong(const Case& c, int rank, int n, const Tensor& in, const Tensor& out) {
  const float ranks_sum = static_cast<float>(n * (n + 1)) / 2.0f;
  int64_t wrong = 0;
  if (c.op == "allreduce" || c.op == "broadcast") {
    const auto v = in.to_vector();
    for (int64_t i = 0; i < c.in_count; ++i) {
      const float want = c.op == "allreduce" ? ranks_sum * pattern(0, i) : pattern(0, i);
      wrong += v[static_cast<size_t>(i)] != want;
    }
  } else if (c.op == "allgather") {
    const auto v = out.to_vector();
    for (int q = 0; q < n; ++q)
      for (int64_t i = 0; i < c.in_count; ++i)
        wrong += v[static_cast<size_t>(q * c.in_count + i)] != pattern(q, i);
  } else {
    const auto v = out.to_vector();
    for (int64_t i = 0; i < c.out_count; ++i)
      wrong += v[static_cast<size_t>(i)] != ranks_sum * pattern(0, rank * c.out_count + i);
  }
  return wrong;
}

}  // namespace

const std::vector<std::string>& collective_names() {
  static const std::vector<std::string> names{"allreduce", "allgather", "reduce_scatter", "broadcast"};
  return names;
}

double bus_factor(const std::string& op, int n) {
  if (op == "allreduce") return n > 1 ? 2.0 * (n - 1) / n : 0.0;
  if (op == "allgather" || op == "reduce_scatter") return n > 1 ? static_cast<double>(n - 1) / n : 0.0;
  return 1.0;
}

nlohmann::json run_collectives(comm::ProcessGroup& pg, Device device, const CollectiveOptions& o, std::ostream& out) {
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
  nlohmann::json rows = nlohmann::json::array();
  if (rank == 0)
    out << fmt::format("{:<15} {:>12} {:>11} {:>6} {:>12} {:>12} {:>12} {:>8}\n", "# op", "size (B)", "count",
                       "type", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "#wrong");
  for (const auto& op : o.ops) {
    for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.factor) {
      const Case c = make_case(op, bytes, n);
      Tensor in = filled(rank, c.in_count, device);
      Tensor outbuf = Tensor::zeros({c.out_count}, device);
      for (int i = 0; i < o.warmup; ++i) {
        maybe_die();
        issue(pg, c, in, outbuf)->wait();
        ++issued;
      }
      pg.barrier()->wait();
      const int64_t t0 = now_ns();
      for (int i = 0; i < o.iters; ++i) {
        maybe_die();
        issue(pg, c, in, outbuf)->wait();
        ++issued;
      }
      ops::synchronize(device);
      const double mine = static_cast<double>(now_ns() - t0) * 1e-9 / o.iters;
      Tensor t = Tensor::full({1}, static_cast<float>(mine), device);
      pg.allreduce(t, comm::ReduceOp::max)->wait();
      const double seconds = t.to_vector()[0];
      // Verify on fresh inputs.
      in = filled(rank, c.in_count, device);
      outbuf = Tensor::zeros({c.out_count}, device);
      issue(pg, c, in, outbuf)->wait();
      ops::synchronize(device);
      Tensor wrong = Tensor::full({1}, static_cast<float>(count_wrong(c, rank, n, in, outbuf)), device);
      pg.allreduce(wrong, comm::ReduceOp::sum)->wait();
      const auto bad = static_cast<int64_t>(wrong.to_vector()[0]);
      const double algbw = static_cast<double>(c.bytes) / seconds / 1e9;
      const double busbw = algbw * bus_factor(op, n);
      if (rank == 0) {
        out << fmt::format("{:<15} {:>12} {:>11} {:>6} {:>12.1f} {:>12.3f} {:>12.3f} {:>8}\n", op, c.bytes,
                           c.bytes / 4, "float", seconds * 1e6, algbw, busbw, bad)
            << std::flush;
        rows.push_back({{"op", op},
                        {"bytes", c.bytes},
                        {"count", c.bytes / 4},
                        {"dtype", "float32"},
                        {"time_us", reports::number(seconds * 1e6)},
                        {"algbw_gbps", reports::number(algbw)},
                        {"busbw_gbps", reports::number(busbw)},
                        {"wrong", bad}});
      }
    }
  }
  return rows;
}

}  // namespace dpb::bench
