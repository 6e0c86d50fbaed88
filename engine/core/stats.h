#pragma once
// Summary statistics of repeated measurements (step times): median, p10, p90,
// mean, standard deviation, coefficient of variation, and outliers by the
// median-absolute-deviation rule (|x - median| > 3.5 * 1.4826 * MAD, the
// modified z-score of Iglewicz and Hoaglin).
#include <cstdint>
#include <vector>

namespace dpb {

struct Summary {
  int64_t count = 0;
  double median = 0, p10 = 0, p90 = 0, mean = 0, stddev = 0, cv = 0, min = 0, max = 0;
  double mad = 0;
  int64_t outliers = 0;
};

// Linear-interpolated percentile (q in [0, 1]) of unsorted values.
double percentile(std::vector<double> values, double q);
Summary summarize(const std::vector<double>& values);

}  // namespace dpb
