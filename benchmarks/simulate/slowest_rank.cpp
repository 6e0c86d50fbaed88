// Waiting for the slowest rank: how much longer the ranks' compute takes at N ranks
// because each collective waits for the slowest (simulator.h, rank_stretch).
#include "benchmarks/simulate/simulator.h"

#include <cmath>

namespace dpb::sim {

double expected_max_normal(int n) {
  if (n <= 1) return 0;
  // E[max] = integral of x * n * phi(x) * Phi(x)^(n-1), by the midpoint rule on [-9, 9].
  const int steps = 4000;
  const double lo = -9, h = 18.0 / steps;
  double sum = 0;
  for (int i = 0; i < steps; ++i) {
    const double x = lo + (i + 0.5) * h;
    const double phi = std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
    const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
    sum += x * n * phi * std::pow(cdf, n - 1);
  }
  return sum * h;
}

double median_max_normal(int n) {
  if (n <= 1) return 0;
  const double target = std::pow(0.5, 1.0 / n);
  double lo = 0, hi = 12;  // Phi(0) = 0.5 <= target
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (0.5 * std::erfc(-mid / std::sqrt(2.0)) < target ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

double rank_stretch(const StepProfile& p, const SimOptions& o, int ranks) {
  if (ranks <= 1) return 1;
  if (o.rank_lag.empty()) return 1 + o.jitter * expected_max_normal(ranks);
  // The lag at `ranks`: measured; between two measured counts (or 1 rank, no lag, and the
  // first), linear in log N; past the last, grown as a normal distribution's would.
  double lag = 0;
  const reports::RankLag& last = o.rank_lag.back();
  if (ranks >= last.ranks) {
    lag = last.relative * median_max_normal(ranks) / median_max_normal(last.ranks);
  } else {
    reports::RankLag below{1, 0};
    for (const auto& l : o.rank_lag) {
      if (l.ranks >= ranks) {
        const double f = std::log(static_cast<double>(ranks) / below.ranks) /
                         std::log(static_cast<double>(l.ranks) / below.ranks);
        lag = below.relative + f * (l.relative - below.relative);
        break;
      }
      below = l;
    }
  }
  // The whole step is longer by the lag; it falls on compute.
  const double compute = p.compute_s();
  return compute > 0 ? 1 + lag * p.step_s() / compute : 1;
}

}  // namespace dpb::sim
