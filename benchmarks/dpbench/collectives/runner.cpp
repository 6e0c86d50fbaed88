#include "benchmarks/dpbench/collectives/runner.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <ostream>
#include <thread>

#include "engine/backend/ops.h"
#include "engine/core/clock.h"
#include "engine/core/error.h"
#include "engine/core/stats.h"

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

namespace {

// --load: one thread of steady compute (fused multiply-adds on a buffer that stays in L1)
// counting its rounds, so that its rate alone and while collectives run can be compared.
class ComputeLoad {
 public:
  ComputeLoad() : thread_([this] { run(); }) {}
  ~ComputeLoad() {
    stop_.store(true, std::memory_order_relaxed);
    thread_.join();
  }
  ComputeLoad(const ComputeLoad&) = delete;
  ComputeLoad& operator=(const ComputeLoad&) = delete;
  int64_t rounds() const { return rounds_.load(std::memory_order_relaxed); }
  // Rounds per second over `ms` milliseconds while the calling thread sleeps.
  double rate_alone(int ms) const {
    const int64_t c0 = rounds(), t0 = now_ns();
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    return static_cast<double>(rounds() - c0) / (static_cast<double>(now_ns() - t0) * 1e-9);
  }

 private:
  void run() {
    float a[256];
    for (int i = 0; i < 256; ++i) a[i] = static_cast<float>(i) * 1e-3f;
    while (!stop_.load(std::memory_order_relaxed)) {
      for (int r = 0; r < 16; ++r)
        for (float& x : a) x = x * 0.999f + 1e-3f;
      sink_ = a[r_++ & 255];
      rounds_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> rounds_{0};
  volatile float sink_ = 0;
  unsigned r_ = 0;
  std::thread thread_;
};

// How long the load runs alone before each size's timed collectives, and again after
// them: as long as they are expected to take (the warm-up's time per call times the
// iterations), within these bounds. A fixed 40 ms made the rate alone the noisiest figure
// in the slowdown: across two nodes of a 2-vCPU VM one rank's slowdown at 64 MiB, over
// 2.9 s of all-reduces, came out -0.33 beside the other's +0.66. The rate alone is the
// mean of the windows before and after, so that a machine whose core speeds up or slows
// down steadily over the seconds of a size does not read as the collectives' doing.
constexpr double kAloneMinMs = 40, kAloneMaxMs = 1000;

// All-reduces run on the buffers DDP's buckets live in: where the group reduces memory
// in place (ranks on one host), its shared buffer, so that the figure is what a DDP step
// pays (and what --simulate reads); elsewhere the tensor as made.
void place_as_ddp(comm::ProcessGroup& pg, const CollectiveSpec& spec, Device device, CollectiveBuffers& b) {
  if (&spec != &allreduce_spec() || !device.is_cpu()) return;
  Tensor shared = pg.shared_buffer(b.in_count, device);
  if (!shared.defined()) return;
  shared.copy_from(b.in);
  b.in = shared;
}

}  // namespace

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
  std::optional<ComputeLoad> load;
  if (o.load) load.emplace();
  if (rank == 0)
    out << fmt::format("{:<15} {:>12} {:>11} {:>6} {:>12} {:>12} {:>12} {:>8}{}{}\n", "# op", "size (B)", "count",
                       "type", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "#wrong", load ? "  load slowdown" : "",
                       o.isolated > 0 ? "  isolated (us)" : "");
  for (const auto& name : o.ops) {
    const CollectiveSpec& spec = collective_spec(name);
    for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.factor) {
      CollectiveBuffers b = spec.make(bytes, rank, n, device);
      place_as_ddp(pg, spec, device, b);
      const int64_t w0 = now_ns();
      for (int i = 0; i < o.warmup; ++i) {
        maybe_die();
        spec.issue(pg, b)->wait();
        ++issued;
      }
      const double warm_ms = o.warmup > 0 ? static_cast<double>(now_ns() - w0) * 1e-6 / o.warmup : 0.0;
      pg.barrier()->wait();
      double alone = 0;
      const int alone_ms = static_cast<int>(std::clamp(warm_ms * o.iters, kAloneMinMs, kAloneMaxMs));
      if (load) {
        alone = load->rate_alone(alone_ms);
        pg.barrier()->wait();
      }
      const int64_t t0 = now_ns(), r0 = load ? load->rounds() : 0;
      for (int i = 0; i < o.iters; ++i) {
        maybe_die();
        spec.issue(pg, b)->wait();
        ++issued;
      }
      ops::synchronize(device);
      const double elapsed = static_cast<double>(now_ns() - t0) * 1e-9;
      const double during = load ? static_cast<double>(load->rounds() - r0) / elapsed : 0;
      const double mine = elapsed / o.iters;
      Tensor t = Tensor::full({1}, static_cast<float>(mine), device);
      pg.allreduce(t, comm::ReduceOp::max)->wait();
      const double seconds = t.to_vector()[0];
      // The window after: every rank has left the timed collectives (the max above).
      double alone_after = 0;
      if (load) alone_after = load->rate_alone(alone_ms);
      // The ranks' mean slowdown of their compute thread; not measured (null) where a
      // rank's thread made no round at all in one of the windows.
      reports::Num slowdown;
      if (load) {
        const bool measured = alone > 0 && alone_after > 0 && during > 0;
        const float mine = measured ? static_cast<float>(0.5 * (alone + alone_after) / during - 1) : 0.0f;
        Tensor s = Tensor::from_vector({2}, {mine, measured ? 0.0f : 1.0f}, device);
        pg.allreduce(s, comm::ReduceOp::sum)->wait();
        const std::vector<float> sums = s.to_vector();
        if (sums[1] == 0) slowdown = static_cast<double>(sums[0]) / n;
      }
      // Alone, each after a pause with the link idle: the slowest rank's time of each, and
      // their median.
      reports::Num isolated;
      if (o.isolated > 0) {
        std::vector<double> alone_s;
        for (int k = 0; k < o.isolated; ++k) {
          pg.barrier()->wait();
          std::this_thread::sleep_for(std::chrono::microseconds(o.isolated_pause_us));
          maybe_die();
          const int64_t s0 = now_ns();
          spec.issue(pg, b)->wait();
          ops::synchronize(device);
          ++issued;
          Tensor one = Tensor::full({1}, static_cast<float>(static_cast<double>(now_ns() - s0) * 1e-9), device);
          pg.allreduce(one, comm::ReduceOp::max)->wait();
          alone_s.push_back(one.to_vector()[0]);
        }
        isolated = percentile(std::move(alone_s), 0.5) * 1e6;
      }
      // Verify on fresh inputs.
      b = spec.make(bytes, rank, n, device);
      place_as_ddp(pg, spec, device, b);
      spec.issue(pg, b)->wait();
      ops::synchronize(device);
      Tensor wrong = Tensor::full({1}, static_cast<float>(spec.count_wrong(b, rank, n)), device);
      pg.allreduce(wrong, comm::ReduceOp::sum)->wait();
      const auto bad = static_cast<int64_t>(wrong.to_vector()[0]);
      const double algbw = static_cast<double>(b.bytes) / seconds / 1e9;
      const double busbw = algbw * spec.bus_factor(n);
      if (rank == 0) {
        out << fmt::format("{:<15} {:>12} {:>11} {:>6} {:>12.1f} {:>12.3f} {:>12.3f} {:>8}{}{}\n", name, b.bytes,
                           b.bytes / 4, "float", seconds * 1e6, algbw, busbw, bad,
                           slowdown ? fmt::format("  {:>13.1f}%", 100 * *slowdown) : "",
                           isolated ? fmt::format("  {:>12.1f}", *isolated) : "")
            << std::flush;
        rows.push_back({name, b.bytes, b.bytes / 4, "float32", seconds * 1e6, algbw, busbw, bad, slowdown, isolated});
      }
    }
  }
  return rows;
}

}  // namespace dpb::bench
