// The transformer's ops on the CPU: embeddings, layer norm, GELU and causal
// self-attention. Attention's four products run on oneDNN's batched matmul over the
// heads as strided views of the fused (N, T, 3C) projection, so no head is ever
// copied out of it; the causal softmax and its backward are one loop each.
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

// A 4-d batched matmul over (N, H): dst (N, H, M, P) = scale * src (N, H, M, K) x wei (N, H, K, P)
// [+ dst], each operand given by its strides in elements.
struct BatchedMatmul {
  dnnl::matmul prim;
};

struct Operand {
  dims shape;
  dims strides;
  float* data;
};

void batched_matmul(CpuContext& ctx, const char* name, const Operand& src, const Operand& wei, const Operand& dst,
                    float scale, bool accumulate) {
  std::string k = key(name, accumulate ? 1 : 0, static_cast<int64_t>(scale * 1e6f));
  for (const Operand* o : {&src, &wei, &dst}) {
    for (auto d : o->shape) k += ':' + std::to_string(d);
    for (auto s : o->strides) k += ',' + std::to_string(s);
  }
  auto mm = ctx.cached<BatchedMatmul>(k, [&] {
    dnnl::primitive_attr attr = user_scratchpad();
    if (scale != 1.0f) attr.set_output_scales(0, {scale});
    if (accumulate) {
      dnnl::post_ops po;
      po.append_sum(1.0f);
      attr.set_post_ops(po);
    }
    dnnl::matmul::desc d(dnnl::memory::desc(src.shape, dt::f32, src.strides),
                         dnnl::memory::desc(wei.shape, dt::f32, wei.strides),
                         dnnl::memory::desc(dst.shape, dt::f32, dst.strides));
    return BatchedMatmul{dnnl::matmul(dnnl::matmul::primitive_desc(d, attr, ctx.engine()))};
  });
  auto m = [&](const Operand& o) {
    return dnnl::memory(dnnl::memory::desc(o.shape, dt::f32, o.strides), ctx.engine(), o.data);
  };
  run(ctx, mm->prim, {{DNNL_ARG_SRC, m(src)}, {DNNL_ARG_WEIGHTS, m(wei)}, {DNNL_ARG_DST, m(dst)}});
}

// The three (N, H, T, D) views of q, k and v inside qkv (N, T, 3C), and their transposes.
struct Heads {
  int64_t N, T, H, D, C;
  dims shape() const { return {N, H, T, D}; }
  dims shape_t() const { return {N, H, D, T}; }
  dims strides() const { return {T * 3 * C, D, 3 * C, 1}; }    // q, k or v as (N, H, T, D)
  dims strides_t() const { return {T * 3 * C, D, 1, 3 * C}; }  // k or v as (N, H, D, T)
  dims y_strides() const { return {T * C, D, C, 1}; }          // y (N, T, C) as (N, H, T, D)
  dims square() const { return {N, H, T, T}; }
  dims square_strides() const { return {H * T * T, T * T, T, 1}; }
  dims square_strides_t() const { return {H * T * T, T * T, 1, T}; }
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

DPB_SIMD_CLONES void gelu_span(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + fast_tanh(kGeluScale * (v + kGeluCube * v * v * v)));
  }
}

DPB_SIMD_CLONES void gelu_backward_span(const float* x, const float* g, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float th = fast_tanh(kGeluScale * (v + kGeluCube * v * v * v));
    const float d = 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * kGeluScale * (1.0f + 3.0f * kGeluCube * v * v);
    dx[i] = g[i] * d;
  }
}

// Row t of causal scores in place: softmax over keys 0..t, zero after.
DPB_SIMD_CLONES void causal_softmax_row(float* row, int64_t t, int64_t T) {
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

DPB_SIMD_CLONES void causal_softmax_backward_row(const float* prow, float* drow, int64_t t, int64_t T) {
  float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
  for (int64_t j = 0; j <= t; ++j) dot += prow[j] * drow[j];
  for (int64_t j = 0; j <= t; ++j) drow[j] = prow[j] * (drow[j] - dot);
  for (int64_t j = t + 1; j < T; ++j) drow[j] = 0.0f;
}
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

dims with_rows(dims shape, int64_t rows, int64_t cols) {
  shape[2] = rows;
  shape[3] = cols;
  return shape;
}
}  // namespace

void attention_forward(const Tensor& qkv, int64_t heads, Tensor& y, Tensor& probs) {
  auto& ctx = context(qkv.device().index);
  const Heads h = heads_of(qkv, heads);
  float* base = qkv.data();
  float* p = probs.data();
  float* out = y.data();
  const int64_t T = h.T, C = h.C, D = h.D, blocks = attention_blocks(T);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  // scores = q k^T / sqrt(D), queries [r0, r1) against keys [0, r1)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t r0 = block_edge(T, b, blocks), r1 = block_edge(T, b + 1, blocks);
    batched_matmul(ctx, "attn_qk", {with_rows(h.shape(), r1 - r0, D), h.strides(), base + r0 * 3 * C},
                   {with_rows(h.shape_t(), D, r1), h.strides_t(), base + C},
                   {with_rows(h.square(), r1 - r0, r1), h.square_strides(), p + r0 * T}, scale, false);
  }
  // causal softmax in place: row t sees keys 0..t
  const int64_t rows = h.N * h.H * T;
#pragma omp parallel for schedule(static) if (rows > kParallelRows)
  for (int64_t r = 0; r < rows; ++r) causal_softmax_row(p + r * T, r % T, T);
  // y = probs v, written head by head into (N, T, C)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t r0 = block_edge(T, b, blocks), r1 = block_edge(T, b + 1, blocks);
    batched_matmul(ctx, "attn_pv", {with_rows(h.square(), r1 - r0, r1), h.square_strides(), p + r0 * T},
                   {with_rows(h.shape(), r1, D), h.strides(), base + 2 * C},
                   {with_rows(h.shape(), r1 - r0, D), h.y_strides(), out + r0 * C}, 1.0f, false);
  }
}

void attention_backward(const Tensor& qkv, const Tensor& probs, const Tensor& dy, int64_t heads, Tensor& dqkv) {
  auto& ctx = context(qkv.device().index);
  const Heads h = heads_of(qkv, heads);
  float* base = qkv.data();
  float* p = probs.data();
  float* g = dy.data();
  float* d = dqkv.data();
  const int64_t T = h.T, C = h.C, D = h.D, blocks = attention_blocks(T);
  Tensor dprobs = Tensor::empty(probs.shape(), probs.device());
  float* dp = dprobs.data();
  // dprobs = dy v^T (queries [r0, r1), keys [0, r1)); dv = probs^T dy (keys [c0, c1),
  // queries [c0, T))
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t r0 = block_edge(T, b, blocks), r1 = block_edge(T, b + 1, blocks);
    batched_matmul(ctx, "attn_dp", {with_rows(h.shape(), r1 - r0, D), h.y_strides(), g + r0 * C},
                   {with_rows(h.shape_t(), D, r1), h.strides_t(), base + 2 * C},
                   {with_rows(h.square(), r1 - r0, r1), h.square_strides(), dp + r0 * T}, 1.0f, false);
    batched_matmul(ctx, "attn_dv", {with_rows(h.square(), r1 - r0, T - r0), h.square_strides_t(), p + r0 * T + r0},
                   {with_rows(h.shape(), T - r0, D), h.y_strides(), g + r0 * C},
                   {with_rows(h.shape(), r1 - r0, D), h.strides(), d + 2 * C + r0 * 3 * C}, 1.0f, false);
  }
  // dscores = probs * (dprobs - sum_j dprobs * probs), in place of dprobs (zero above the diagonal)
  const int64_t rows = h.N * h.H * T;
#pragma omp parallel for schedule(static) if (rows > kParallelRows)
  for (int64_t r = 0; r < rows; ++r) causal_softmax_backward_row(p + r * T, dp + r * T, r % T, T);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  // dq = dscores k / sqrt(D) ; dk = dscores^T q / sqrt(D), blocked as above
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t r0 = block_edge(T, b, blocks), r1 = block_edge(T, b + 1, blocks);
    batched_matmul(ctx, "attn_dq", {with_rows(h.square(), r1 - r0, r1), h.square_strides(), dp + r0 * T},
                   {with_rows(h.shape(), r1, D), h.strides(), base + C},
                   {with_rows(h.shape(), r1 - r0, D), h.strides(), d + r0 * 3 * C}, scale, false);
    batched_matmul(ctx, "attn_dk", {with_rows(h.square(), r1 - r0, T - r0), h.square_strides_t(), dp + r0 * T + r0},
                   {with_rows(h.shape(), T - r0, D), h.strides(), base + r0 * 3 * C},
                   {with_rows(h.shape(), r1 - r0, D), h.strides(), d + C + r0 * 3 * C}, scale, false);
  }
}

}  // namespace dpb::cpu
