// Losses: softmax cross-entropy (numerically stable, log-sum-exp) and mean squared error.
#include <cmath>

#include "engine/backend/cpu/cpu_ops.h"

namespace dpb::cpu {

float softmax_cross_entropy(const Tensor& logits, const Tensor& labels, Tensor& dlogits, int64_t* correct) {
  const int64_t N = logits.size(0), C = logits.size(1);
  const float* z = logits.data();
  const int32_t* y = labels.data_i32();
  float* dz = dlogits.defined() ? dlogits.data() : nullptr;
  for (int64_t i = 0; i < N; ++i)
    DPB_CHECK(y[i] >= 0 && y[i] < C) << "label " << y[i] << " at position " << i << " outside [0, " << C << ")";
  double total = 0.0;
  int64_t hits = 0;
  const float inv_n = 1.0f / static_cast<float>(N);
#pragma omp parallel for reduction(+ : total, hits) schedule(static) if (N * C > (1 << 15))
  for (int64_t i = 0; i < N; ++i) {
    const float* row = z + i * C;
    int64_t argmax = 0;
    float mx = row[0];
    for (int64_t j = 1; j < C; ++j)
      if (row[j] > mx) {
        mx = row[j];
        argmax = j;
      }
    double sum = 0.0;
    for (int64_t j = 0; j < C; ++j) sum += std::exp(static_cast<double>(row[j] - mx));
    const double log_sum = std::log(sum);
    total += log_sum - static_cast<double>(row[y[i]] - mx);
    hits += argmax == y[i] ? 1 : 0;
    if (dz) {
      float* drow = dz + i * C;
      for (int64_t j = 0; j < C; ++j)
        drow[j] = static_cast<float>(std::exp(static_cast<double>(row[j] - mx) - log_sum)) * inv_n;
      drow[y[i]] -= inv_n;
    }
  }
  if (correct) *correct = hits;
  return static_cast<float>(total / static_cast<double>(N));
}

float mse_loss(const Tensor& pred, const Tensor& target, Tensor& dpred) {
  const int64_t n = pred.numel();
  const float* p = pred.data();
  const float* t = target.data();
  float* d = dpred.defined() ? dpred.data() : nullptr;
  const float g = 2.0f / static_cast<float>(n);
  double total = 0.0;
#pragma omp parallel for reduction(+ : total) schedule(static) if (n > (1 << 15))
  for (int64_t i = 0; i < n; ++i) {
    const float diff = p[i] - t[i];
    total += static_cast<double>(diff) * diff;
    if (d) d[i] = g * diff;
  }
  return static_cast<float>(total / static_cast<double>(n));
}

}  // namespace dpb::cpu
