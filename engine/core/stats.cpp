#include "engine/core/stats.h"

#include <algorithm>
#include <cmath>

#include "engine/core/error.h"

namespace dpb {

double percentile(std::vector<double> v, double q) {
  DPB_CHECK(!v.empty()) << "percentile of no values";
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

Summary summarize(const std::vector<double>& v) {
  Summary s;
  if (v.empty()) return s;
  s.count = static_cast<int64_t>(v.size());
  s.median = percentile(v, 0.5);
  s.p10 = percentile(v, 0.1);
  s.p90 = percentile(v, 0.9);
  s.min = *std::min_element(v.begin(), v.end());
  s.max = *std::max_element(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  double ss = 0;
  for (double x : v) ss += (x - s.mean) * (x - s.mean);
  s.stddev = v.size() > 1 ? std::sqrt(ss / static_cast<double>(v.size() - 1)) : 0.0;
  s.cv = s.mean > 0 ? s.stddev / s.mean : 0.0;
  std::vector<double> dev;
  dev.reserve(v.size());
  for (double x : v) dev.push_back(std::fabs(x - s.median));
  s.mad = percentile(dev, 0.5);
  const double scale = 1.4826 * s.mad;
  for (double x : v)
    if (scale > 0 && std::fabs(x - s.median) / scale > 3.5) ++s.outliers;
  return s;
}

}  // namespace dpb
