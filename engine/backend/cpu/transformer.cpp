// The transformer's ops on the CPU: embeddings, layer norm, GELU and causal
// self-attention. Attention's products run on oneDNN's GEMM, one per sequence, head and
// block of queries, over strided views of the fused (N, T, 3C) projection, so no head is
// ever copied out of it; the causal softmax and its backward are one loop each.
#include <algorithm>
#include <cmath>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/cpu/dnnl_util.h"
#include "engine/backend/cpu/fast_math.h"

namespace dpb::cpu {

namespace {
constexpr int64_t kParallelRows = 64;

// Attention's shape: N sequences of T tokens, H heads of D, C = H D wide.
struct Heads {
  int64_t N, T, H, D, C;
};

Heads heads_of(const Tensor& qkv, int64_t heads) {
  const int64_t C = qkv.size(2) / 3;
  return Heads{qkv.size(0), qkv.size(1), heads, C / heads, C};
}
}  // namespace

void embedding_forward(const Tensor& tokens, const Tensor& table, int64_t first, int64_t vocab, Tensor& y) {
  const int64_t rows = tokens.numel(), V = table.size(0), C = table.size(1);
  const int32_t* tok = tokens.data_i32();
  for (int64_t i = 0; i < rows; ++i)
    DPB_CHECK(tok[i] >= 0 && tok[i] < vocab) << "embedding: token " << tok[i] << " at position " << i
                                             << " outside the vocabulary [0, " << vocab << ")";
  const float* w = table.data();
  float* out = y.data();
#pragma omp parallel for schedule(static) if (rows * C > (1 << 16))
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t t = tok[i] - first;
    if (t >= 0 && t < V) std::copy_n(w + t * C, C, out + i * C);
    else std::fill_n(out + i * C, C, 0.0f);  // another rank's part of the vocabulary
  }
}

void embedding_backward(const Tensor& tokens, const Tensor& dy, int64_t first, Tensor& dtable, bool accumulate) {
  const int64_t rows = tokens.numel(), V = dtable.size(0), C = dtable.size(1);
  const int32_t* tok = tokens.data_i32();
  const float* g = dy.data();
  float* dw = dtable.data();
  if (!accumulate) std::fill_n(dw, dtable.numel(), 0.0f);
  // Rows of one token may repeat: threads split the columns, never the rows.
#pragma omp parallel if (rows * C > (1 << 16))
  {
#ifdef _OPENMP
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
#else
    const int64_t nt = 1, t = 0;
#endif
    const int64_t begin = C * t / nt, end = C * (t + 1) / nt;
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t row = tok[i] - first;
      if (row < 0 || row >= V) continue;
      float* dst = dw + row * C;
      const float* src = g + i * C;
      for (int64_t c = begin; c < end; ++c) dst[c] += src[c];
    }
  }
}

void position_embedding_forward(const Tensor& x, const Tensor& table, Tensor& y) {
  const int64_t N = x.size(0), T = x.size(1), C = x.size(2);
  const float* px = x.data();
  const float* w = table.data();
  float* out = y.data();
#pragma omp parallel for collapse(2) schedule(static) if (N * T * C > (1 << 16))
  for (int64_t n = 0; n < N; ++n)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t o = (n * T + t) * C;
      for (int64_t c = 0; c < C; ++c) out[o + c] = px[o + c] + w[t * C + c];
    }
}

void position_embedding_backward(const Tensor& dy, Tensor& dtable, bool accumulate) {
  const int64_t N = dy.size(0), T = dy.size(1), C = dy.size(2), P = dtable.size(0);
  const float* g = dy.data();
  float* dw = dtable.data();
  if (!accumulate) std::fill_n(dw + T * C, (P - T) * C, 0.0f);
#pragma omp parallel for schedule(static) if (N * T * C > (1 << 16))
  for (int64_t t = 0; t < T; ++t) {
    float* row = dw + t * C;
    if (!accumulate) std::fill_n(row, C, 0.0f);
    for (int64_t n = 0; n < N; ++n) {
      const float* src = g + (n * T + t) * C;
      for (int64_t c = 0; c < C; ++c) row[c] += src[c];
    }
  }
}

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& mean,
                       Tensor& rstd, float eps) {
  const int64_t C = x.size(x.ndim() - 1), M = x.numel() / C;
  const float* px = x.data();
  const float* w = gamma.data();
  const float* b = beta.data();
  float* out = y.data();
  float* pm = mean.data();
  float* pr = rstd.data();
#pragma omp parallel for schedule(static) if (M > kParallelRows)
  for (int64_t i = 0; i < M; ++i) {
    const float* row = px + i * C;
    float s = 0.0f;
    for (int64_t c = 0; c < C; ++c) s += row[c];
    const float mu = s / static_cast<float>(C);
    float v = 0.0f;
    for (int64_t c = 0; c < C; ++c) v += (row[c] - mu) * (row[c] - mu);
    const float r = 1.0f / std::sqrt(v / static_cast<float>(C) + eps);
    float* o = out + i * C;
    for (int64_t c = 0; c < C; ++c) o[c] = (row[c] - mu) * r * w[c] + b[c];
    pm[i] = mu;
    pr[i] = r;
  }
}

void layernorm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta, bool accumulate) {
  const int64_t C = x.size(x.ndim() - 1), M = x.numel() / C;
  const float* px = x.data();
  const float* g = dy.data();
  const float* w = gamma.data();
  const float* pm = mean.data();
  const float* pr = rstd.data();
  float* pdx = dx.defined() ? dx.data() : nullptr;
  float* dw = dgamma.data();
  float* db = dbeta.data();
  if (!accumulate) {
    std::fill_n(dw, C, 0.0f);
    std::fill_n(db, C, 0.0f);
  }
#pragma omp parallel if (M > kParallelRows)
  {
    std::vector<float> lw(static_cast<size_t>(C), 0.0f), lb(static_cast<size_t>(C), 0.0f);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < M; ++i) {
      const float* row = px + i * C;
      const float* grow = g + i * C;
      const float mu = pm[i], r = pr[i];
      float sum_d = 0.0f, sum_dx = 0.0f;  // mean of dnorm and of dnorm * xhat
      for (int64_t c = 0; c < C; ++c) {
        const float xhat = (row[c] - mu) * r;
        const float dn = grow[c] * w[c];
        sum_d += dn;
        sum_dx += dn * xhat;
        lw[static_cast<size_t>(c)] += grow[c] * xhat;
        lb[static_cast<size_t>(c)] += grow[c];
      }
      if (pdx) {
        sum_d /= static_cast<float>(C);
        sum_dx /= static_cast<float>(C);
        float* o = pdx + i * C;
        for (int64_t c = 0; c < C; ++c) {
          const float xhat = (row[c] - mu) * r;
          o[c] = (grow[c] * w[c] - sum_d - xhat * sum_dx) * r;
        }
      }
    }
#pragma omp critical
    for (int64_t c = 0; c < C; ++c) {
      dw[c] += lw[static_cast<size_t>(c)];
      db[c] += lb[static_cast<size_t>(c)];
    }
  }
}

namespace {
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCube = 0.044715f;
}  // namespace

namespace {
constexpr int64_t kChunk = 4096;  // elements per OpenMP work item

DPB_SIMD_INLINE void gelu_span_body(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + fast_tanh(kGeluScale * (v + kGeluCube * v * v * v)));
  }
}
DPB_SIMD_KERNEL(void, gelu_span, (const float* x, float* y, int64_t n), (x, y, n))

DPB_SIMD_INLINE void gelu_backward_span_body(const float* x, const float* g, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float th = fast_tanh(kGeluScale * (v + kGeluCube * v * v * v));
    const float d = 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * kGeluScale * (1.0f + 3.0f * kGeluCube * v * v);
    dx[i] = g[i] * d;
  }
}
DPB_SIMD_KERNEL(void, gelu_backward_span, (const float* x, const float* g, float* dx, int64_t n), (x, g, dx, n))

// Row t of causal scores in place: softmax over keys 0..t, zero after.
DPB_SIMD_INLINE void causal_softmax_row_body(float* row, int64_t t, int64_t T) {
  float mx = row[0];
#pragma omp simd reduction(max : mx)
  for (int64_t j = 1; j <= t; ++j) mx = row[j] > mx ? row[j] : mx;
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j <= t; ++j) {
    row[j] = fast_exp(row[j] - mx);
    sum += row[j];
  }
  const float inv = 1.0f / sum;
  for (int64_t j = 0; j <= t; ++j) row[j] *= inv;
  for (int64_t j = t + 1; j < T; ++j) row[j] = 0.0f;
}
DPB_SIMD_KERNEL(void, causal_softmax_row, (float* row, int64_t t, int64_t T), (row, t, T))

DPB_SIMD_INLINE void causal_softmax_backward_row_body(const float* prow, float* drow, int64_t t, int64_t T) {
  float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
  for (int64_t j = 0; j <= t; ++j) dot += prow[j] * drow[j];
  for (int64_t j = 0; j <= t; ++j) drow[j] = prow[j] * (drow[j] - dot);
  for (int64_t j = t + 1; j < T; ++j) drow[j] = 0.0f;
}
DPB_SIMD_KERNEL(void, causal_softmax_backward_row, (const float* prow, float* drow, int64_t t, int64_t T), (prow, drow, t, T))
}  // namespace

void gelu_forward(const Tensor& x, Tensor& y) {
  const int64_t n = x.numel();
  const float* px = x.data();
  float* out = y.data();
#pragma omp parallel for schedule(static) if (n > (1 << 15))
  for (int64_t b = 0; b < n; b += kChunk) gelu_span(px + b, out + b, std::min(kChunk, n - b));
}

void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  const int64_t n = x.numel();
  const float* px = x.data();
  const float* g = dy.data();
  float* out = dx.data();
#pragma omp parallel for schedule(static) if (n > (1 << 15))
  for (int64_t b = 0; b < n; b += kChunk) gelu_backward_span(px + b, g + b, out + b, std::min(kChunk, n - b));
}

namespace {
// The causal mask leaves the upper triangle of every T x T product zero, so the products
// run in blocks of query rows [r0, r1) against keys [0, r1) (and, for the products that
// run over queries, key rows [c0, c1) against queries [c0, T)): 4 blocks do 62.5 % of the
// full products' work. Entries right of a block's keys are never read: the softmax and
// its backward stop at the diagonal and write the zeros.
int64_t attention_blocks(int64_t T) { return T >= 128 ? 4 : T >= 32 ? 2 : 1; }
int64_t block_edge(int64_t T, int64_t b, int64_t blocks) { return T * b / blocks; }

}  // namespace

// Each (sequence, head) pair's products are GEMMs over strided views: q, k and v are
// columns [hD, hD + D) of the fused (N, T, 3C) projection (leading dimension 3C), y and
// dy those of (N, T, C), the scores and probabilities (N, H, T, T) row-major. One GEMM per
// pair and block, faster than oneDNN's strided batched matmul over all heads on GPT-2's
// attention (reports/results/cpu-gemm-simulate-2026-11-25.md).
// Pair nh = n H + head: its sequence, its columns' offset, and its q, k and v (rows of 3C).
struct HeadView {
  int64_t n, hd;
  const float *q, *k, *v;
};

HeadView head_view(const Heads& h, const float* base, int64_t nh) {
  const int64_t n = nh / h.H, hd = (nh % h.H) * h.D;
  const float* q = base + n * h.T * 3 * h.C + hd;
  return {n, hd, q, q + h.C, q + 2 * h.C};
}

void attention_forward(const Tensor& qkv, int64_t heads, Tensor& y, Tensor& probs) {
  const Heads h = heads_of(qkv, heads);
  const float* base = qkv.data();
  float* p = probs.data();
  float* out = y.data();
  const int64_t T = h.T, C = h.C, D = h.D, H = h.H, blocks = attention_blocks(T);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int64_t pairs = h.N * H;
#pragma omp parallel for schedule(static) if (pairs > 1 && omp_get_max_threads() > 1)
  for (int64_t nh = 0; nh < pairs; ++nh) {
    const HeadView hv = head_view(h, base, nh);
    const float *q = hv.q, *k = hv.k, *v = hv.v;
    float* s = p + nh * T * T;
    float* o = out + hv.n * T * C + hv.hd;
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t r0 = block_edge(T, b, blocks), r1 = block_edge(T, b + 1, blocks);
      // scores[r0:r1, 0:r1] = q[r0:r1] k[0:r1]^T / sqrt(D), then the causal softmax of
      // those rows (row t sees keys 0..t), then y[r0:r1] = probs[r0:r1, 0:r1] v[0:r1]
      sgemm('N', 'T', r1 - r0, r1, D, scale, q + r0 * 3 * C, 3 * C, k, 3 * C, 0.0f, s + r0 * T, T);
      for (int64_t t = r0; t < r1; ++t) causal_softmax_row(s + t * T, t, T);
      sgemm('N', 'N', r1 - r0, D, r1, 1.0f, s + r0 * T, T, v, 3 * C, 0.0f, o + r0 * C, C);
    }
  }
}

void attention_backward(const Tensor& qkv, const Tensor& probs, const Tensor& dy, int64_t heads, Tensor& dqkv) {
  const Heads h = heads_of(qkv, heads);
  const float* base = qkv.data();
  const float* p = probs.data();
  const float* g = dy.data();
  float* d = dqkv.data();
  const int64_t T = h.T, C = h.C, D = h.D, H = h.H, blocks = attention_blocks(T);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  Tensor dprobs = Tensor::empty(probs.shape(), probs.device());
  float* dp = dprobs.data();
  const int64_t pairs = h.N * H;
#pragma omp parallel for schedule(static) if (pairs > 1 && omp_get_max_threads() > 1)
  for (int64_t nh = 0; nh < pairs; ++nh) {
    const HeadView hv = head_view(h, base, nh);
    const float *q = hv.q, *k = hv.k, *v = hv.v;
    const float* pr = p + nh * T * T;
    const float* gy = g + hv.n * T * C + hv.hd;
    float* ds = dp + nh * T * T;
    float* dq = d + hv.n * T * 3 * C + hv.hd;
    float* dk = dq + C;
    float* dv = dq + 2 * C;
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t r0 = block_edge(T, b, blocks), r1 = block_edge(T, b + 1, blocks);
      // dprobs[r0:r1, 0:r1] = dy[r0:r1] v[0:r1]^T, then dscores = probs * (dprobs -
      // sum_j dprobs * probs) in place (zero above the diagonal)
      sgemm('N', 'T', r1 - r0, r1, D, 1.0f, gy + r0 * C, C, v, 3 * C, 0.0f, ds + r0 * T, T);
      for (int64_t t = r0; t < r1; ++t) causal_softmax_backward_row(pr + t * T, ds + t * T, t, T);
    }
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t r0 = block_edge(T, b, blocks), r1 = block_edge(T, b + 1, blocks);
      // dv[r0:r1] = probs[r0:T, r0:r1]^T dy[r0:T]; dq[r0:r1] = dscores[r0:r1, 0:r1] k[0:r1]
      // / sqrt(D); dk[r0:r1] = dscores[r0:T, r0:r1]^T q[r0:T] / sqrt(D) (rows above r0 of
      // those columns are zero)
      sgemm('T', 'N', r1 - r0, D, T - r0, 1.0f, pr + r0 * T + r0, T, gy + r0 * C, C, 0.0f, dv + r0 * 3 * C, 3 * C);
      sgemm('N', 'N', r1 - r0, D, r1, scale, ds + r0 * T, T, k, 3 * C, 0.0f, dq + r0 * 3 * C, 3 * C);
      sgemm('T', 'N', r1 - r0, D, T - r0, scale, ds + r0 * T + r0, T, q + r0 * 3 * C, 3 * C, 0.0f, dk + r0 * 3 * C,
            3 * C);
    }
  }
}

}  // namespace dpb::cpu
