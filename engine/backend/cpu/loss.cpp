// Losses: softmax cross-entropy (numerically stable, log-sum-exp) and mean squared error.
#include <cmath>

#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/cpu/fast_math.h"

namespace dpb::cpu {

namespace {
DPB_SIMD_INLINE float row_max_body(const float* row, int64_t C) {
  float mx = row[0];
#pragma omp simd reduction(max : mx)
  for (int64_t j = 1; j < C; ++j) mx = row[j] > mx ? row[j] : mx;
  return mx;
}
DPB_SIMD_KERNEL(float, row_max, (const float* row, int64_t C), (row, C))

// log sum_j exp(row[j] - mx), accumulated in double.
DPB_SIMD_INLINE double log_sum_exp_body(const float* row, int64_t C, float mx) {
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < C; ++j) sum += static_cast<double>(fast_exp(row[j] - mx));
  return std::log(sum);
}
DPB_SIMD_KERNEL(double, log_sum_exp, (const float* row, int64_t C, float mx), (row, C, mx))

// drow = softmax(row) * scale, from the row's max and log-sum-exp.
DPB_SIMD_INLINE void softmax_row_body(const float* row, float* drow, int64_t C, float mx, float ls, float scale) {
  for (int64_t j = 0; j < C; ++j) drow[j] = fast_exp((row[j] - mx) - ls) * scale;
}
DPB_SIMD_KERNEL(void, softmax_row, (const float* row, float* drow, int64_t C, float mx, float ls, float scale), (row, drow, C, mx, ls, scale))
}  // namespace

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
    const float mx = row_max(row, C);
    int64_t argmax = 0;
    while (row[argmax] != mx && argmax + 1 < C) ++argmax;  // the first maximum, as argmax
    const double log_sum = log_sum_exp(row, C, mx);
    total += log_sum - static_cast<double>(row[y[i]] - mx);
    hits += argmax == y[i] ? 1 : 0;
    if (dz) {
      float* drow = dz + i * C;
      softmax_row(row, drow, C, mx, static_cast<float>(log_sum), inv_n);
      drow[y[i]] -= inv_n;
    }
  }
  if (correct) *correct = hits;
  return static_cast<float>(total / static_cast<double>(N));
}

void cross_entropy_part_stats(const Tensor& logits, const Tensor& labels, int64_t first, Tensor& stats) {
  const int64_t N = logits.size(0), C = logits.size(1);
  const float* z = logits.data();
  const int32_t* y = labels.data_i32();
  float* st = stats.data();
#pragma omp parallel for schedule(static) if (N * C > (1 << 15))
  for (int64_t i = 0; i < N; ++i) {
    const float* row = z + i * C;
    const float mx = row_max(row, C);
    int64_t argmax = 0;
    while (row[argmax] != mx && argmax + 1 < C) ++argmax;
    const int64_t label = y[i] - first;
    st[i * 4 + 0] = mx;
    st[i * 4 + 1] = static_cast<float>(std::exp(log_sum_exp(row, C, mx)));
    st[i * 4 + 2] = label >= 0 && label < C ? row[label] : 0.0f;
    st[i * 4 + 3] = static_cast<float>(first + argmax);
  }
}

Tensor cross_entropy_part_finish(const Tensor& logits, const Tensor& labels, int64_t first, int64_t classes,
                                 const Tensor& all_stats, Tensor& dlogits) {
  const int64_t N = logits.size(0), C = logits.size(1), W = all_stats.size(0);
  const float* z = logits.data();
  const int32_t* y = labels.data_i32();
  const float* st = all_stats.data();
  float* dz = dlogits.defined() ? dlogits.data() : nullptr;
  double total = 0.0;
  int64_t hits = 0, bad = 0;
  const float inv_n = 1.0f / static_cast<float>(N);
#pragma omp parallel for reduction(+ : total, hits, bad) schedule(static) if (N * C > (1 << 15))
  for (int64_t i = 0; i < N; ++i) {
    // The whole row's max, its first argmax (parts ascend with the rank) and the label's logit.
    float mx = st[i * 4];
    float arg = st[i * 4 + 3];
    double label_logit = 0.0;
    for (int64_t w = 0; w < W; ++w) {
      const float* s = st + (w * N + i) * 4;
      if (s[0] > mx) {
        mx = s[0];
        arg = s[3];
      }
      label_logit += s[2];
    }
    double sum = 0.0;
    for (int64_t w = 0; w < W; ++w) {
      const float* s = st + (w * N + i) * 4;
      sum += static_cast<double>(s[1]) * std::exp(static_cast<double>(s[0]) - mx);
    }
    const double log_sum = std::log(sum);
    const bool valid = y[i] >= 0 && y[i] < classes;
    bad += valid ? 0 : 1;
    if (valid) {
      total += log_sum - (label_logit - mx);
      hits += static_cast<int64_t>(arg) == y[i] ? 1 : 0;
    }
    if (dz) {
      const float* row = z + i * C;
      float* drow = dz + i * C;
      softmax_row(row, drow, C, mx, static_cast<float>(log_sum), inv_n);
      const int64_t label = y[i] - first;
      if (label >= 0 && label < C) drow[label] -= inv_n;
    }
  }
  // Packed as the deferred cross-entropy's totals: summed loss, correct, labels out of range.
  Tensor t = Tensor::empty({3});
  t.data()[0] = static_cast<float>(total);
  t.data_i32()[1] = static_cast<int32_t>(hits);
  t.data_i32()[2] = static_cast<int32_t>(bad);
  return t;
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

// On the CPU the result is there at once; packed the way the GPU leaves it (the summed
// loss, the correct count and the count of labels out of range: ops::read_cross_entropy).
Tensor softmax_cross_entropy_deferred(const Tensor& logits, const Tensor& labels, Tensor& dlogits) {
  int64_t correct = 0;
  const float loss = softmax_cross_entropy(logits, labels, dlogits, &correct);
  Tensor t = Tensor::empty({3});
  t.data()[0] = loss * static_cast<float>(logits.size(0));
  t.data_i32()[1] = static_cast<int32_t>(correct);
  t.data_i32()[2] = 0;
  return t;
}

}  // namespace dpb::cpu
