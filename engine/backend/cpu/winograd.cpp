// Winograd F(4x4, 3x3) convolution on AVX2 (see winograd.h).
#include "engine/backend/cpu/winograd.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <vector>

#include "engine/backend/cpu/dnnl_util.h"
#include "engine/backend/cpu/simd.h"
#include "engine/core/error.h"

namespace dpb::cpu::winograd {

namespace {

constexpr int kOut = 4;               // outputs per block side
constexpr int kIn = kOut + 2;         // inputs per block side (6)
constexpr int kPoints = kIn * kIn;    // 36 element-wise products per block

// The transforms are Toom-Cook's at the points 0, 5/8, -5/8, 3/2, -3/2 and infinity (the
// points of oneDNN's F(4x4, 3x3) kernels): in fp32 their results lie about 2.5x closer to
// the exact convolution than with Lavin's 0, +-1, +-2 (ResNet-shaped sums of 64 channels,
// largest error over the largest value: 1.0e-6 against 2.4e-6). Every factor in B^T and
// A^T is a short binary fraction, exact in fp32.
constexpr double kPoints5[5] = {0, 0.625, -0.625, 1.5, -1.5};

// G (6 x 3), row j: [1, p, p^2] / prod over the other finite points q of (p - q); the last
// row, infinity's, [0, 0, 1]. The filter transform U = G g G^T is used as G's Kronecker
// square T (36 x 9), T[i*6+j][a*3+b] = G[i][a] G[j][b], so that U's 36 points are T
// times g's 9 taps.
struct FilterTransform {
  std::array<float, kPoints * 9> t{}, flipped{};  // flipped: the taps in reverse (a filter turned 180 degrees)
  FilterTransform() {
    double g[kIn][3] = {};
    for (int j = 0; j < 5; ++j) {
      double f = 1;
      for (int q = 0; q < 5; ++q)
        if (q != j) f /= kPoints5[j] - kPoints5[q];
      g[j][0] = f;
      g[j][1] = f * kPoints5[j];
      g[j][2] = f * kPoints5[j] * kPoints5[j];
    }
    g[5][2] = 1;
    for (int i = 0; i < kIn; ++i)
      for (int j = 0; j < kIn; ++j)
        for (int a = 0; a < 3; ++a)
          for (int b = 0; b < 3; ++b) {
            const auto v = static_cast<float>(g[i][a] * g[j][b]);
            t[(i * kIn + j) * 9 + a * 3 + b] = v;
            flipped[(i * kIn + j) * 9 + 8 - (a * 3 + b)] = v;
          }
  }
};
const FilterTransform& filter_transform() {
  static const FilterTransform f;
  return f;
}

#define DPB_AVX2 __attribute__((target("avx2,fma")))

// The 1-D transforms over six (or four) vectors of eight channels.
// B^T d (inputs, 6 -> 6).
DPB_AVX2 inline void input_1d(const __m256 d[kIn], __m256 o[kIn]) {
  const __m256 c0 = _mm256_set1_ps(0.87890625f), c1 = _mm256_set1_ps(2.640625f), c2 = _mm256_set1_ps(1.40625f),
               c3 = _mm256_set1_ps(2.25f), c4 = _mm256_set1_ps(0.625f), c5 = _mm256_set1_ps(0.5859375f),
               c6 = _mm256_set1_ps(0.390625f), c7 = _mm256_set1_ps(1.5f);
  const __m256 a = _mm256_fnmadd_ps(c3, d[2], d[4]);  // d4 - 2.25 d2
  const __m256 b = _mm256_fmsub_ps(c2, d[1], _mm256_mul_ps(c4, d[3]));  // 1.40625 d1 - 0.625 d3
  const __m256 c = _mm256_fnmadd_ps(c6, d[2], d[4]);  // d4 - 0.390625 d2
  const __m256 e = _mm256_fnmadd_ps(c5, d[1], _mm256_mul_ps(c7, d[3]));  // 1.5 d3 - 0.5859375 d1
  o[0] = _mm256_fmadd_ps(c0, d[0], _mm256_fnmadd_ps(c1, d[2], d[4]));
  o[1] = _mm256_sub_ps(a, b);
  o[2] = _mm256_add_ps(a, b);
  o[3] = _mm256_add_ps(c, e);
  o[4] = _mm256_sub_ps(c, e);
  o[5] = _mm256_fmadd_ps(c0, d[1], _mm256_fnmadd_ps(c1, d[3], d[5]));
}
// A^T m (outputs, 6 -> 4).
DPB_AVX2 inline void output_1d(const __m256 m[kIn], __m256 o[kOut]) {
  const __m256 d12 = _mm256_sub_ps(m[1], m[2]), s12 = _mm256_add_ps(m[1], m[2]);
  const __m256 d34 = _mm256_sub_ps(m[3], m[4]), s34 = _mm256_add_ps(m[3], m[4]);
  o[0] = _mm256_add_ps(_mm256_add_ps(m[0], s12), s34);
  o[1] = _mm256_fmadd_ps(_mm256_set1_ps(0.625f), d12, _mm256_mul_ps(_mm256_set1_ps(1.5f), d34));
  o[2] = _mm256_fmadd_ps(_mm256_set1_ps(0.390625f), s12, _mm256_mul_ps(_mm256_set1_ps(2.25f), s34));
  o[3] = _mm256_add_ps(
      _mm256_fmadd_ps(_mm256_set1_ps(0.244140625f), d12, _mm256_mul_ps(_mm256_set1_ps(3.375f), d34)), m[5]);
}
// A y (output gradients, 4 -> 6): the transpose of output_1d.
DPB_AVX2 inline void gradient_1d(const __m256 y[kOut], __m256 o[kIn]) {
  const __m256 even_a = _mm256_fmadd_ps(_mm256_set1_ps(0.390625f), y[2], y[0]);  // y0 + 0.390625 y2
  const __m256 odd_a =
      _mm256_fmadd_ps(_mm256_set1_ps(0.625f), y[1], _mm256_mul_ps(_mm256_set1_ps(0.244140625f), y[3]));
  const __m256 even_b = _mm256_fmadd_ps(_mm256_set1_ps(2.25f), y[2], y[0]);  // y0 + 2.25 y2
  const __m256 odd_b = _mm256_fmadd_ps(_mm256_set1_ps(1.5f), y[1], _mm256_mul_ps(_mm256_set1_ps(3.375f), y[3]));
  o[0] = y[0];
  o[1] = _mm256_add_ps(even_a, odd_a);
  o[2] = _mm256_sub_ps(even_a, odd_a);
  o[3] = _mm256_add_ps(even_b, odd_b);
  o[4] = _mm256_sub_ps(even_b, odd_b);
  o[5] = y[3];
}

// The 2-D transform X d X^T of an n x n tile (X m x n, one of the three above): the 1-D
// transform down every column, then along every row.
template <int N, int M, void (*F)(const __m256*, __m256*)>
DPB_AVX2 inline void transform_2d(const __m256 (&d)[N][N], __m256 (&out)[M][M]) {
  __m256 t[M][N];
  for (int q = 0; q < N; ++q) {
    __m256 col[N], o[M];
    for (int r = 0; r < N; ++r) col[r] = d[r][q];
    F(col, o);
    for (int r = 0; r < M; ++r) t[r][q] = o[r];
  }
  for (int r = 0; r < M; ++r) F(t[r], out[r]);
}

// The blocks of an (N, H, W) output: ceil(H/4) x ceil(W/4) per image.
// Item i of a chunk's work, i over (block in the chunk) x (eight-channel block): the block
// in the chunk, the channel block, and where the block's first output lies.
struct BlockAt {
  int64_t pp, channels, image, y0, x0;
};
struct Blocks {
  int64_t n, h, w, rows, cols;
  int64_t count() const { return n * rows * cols; }
  BlockAt at(int64_t p0, int64_t i, int64_t channel_blocks) const {
    const int64_t pp = i / channel_blocks, p = p0 + pp;
    return {pp, i % channel_blocks, p / (rows * cols), (p / cols) % rows * kOut, p % cols * kOut};
  }
};

// The n x n pixels of one eight-channel block of an (N, C, H, W; nChw8c) image plane from
// (y, x) on, zeros outside the image.
template <int N>
DPB_AVX2 inline void load_tile(const float* plane, const Blocks& b, int64_t y, int64_t x, __m256 (&d)[N][N]) {
  for (int r = 0; r < N; ++r)
    for (int q = 0; q < N; ++q)
      d[r][q] = (y + r >= 0 && y + r < b.h && x + q >= 0 && x + q < b.w)
                    ? _mm256_loadu_ps(plane + ((y + r) * b.w + x + q) * kBlock)
                    : _mm256_setzero_ps();
}

// Item i of blocks p0..p0+pn of `src` (N, C, H, W; nChw8c; i over block x channel block):
// the block's n x n pixels from `before` rows and columns before its first output on
// (zeros outside the image), taken to the 36 points by F: out[point][block][channel], `c`
// channels a row. The inputs: their 6 x 6 from one before (B^T d B); the output
// gradients: their 4 x 4 (A dY A^T).
template <int N, void (*F)(const __m256*, __m256*)>
DPB_AVX2 void to_points_at(const float* src, const Blocks& b, int64_t c, int64_t before, int64_t p0, int64_t pn,
                           int64_t i, float* out) {
  const int64_t blocks = c / kBlock;
  const auto [pp, cb, image, y0, x0] = b.at(p0, i, blocks);
  __m256 d[N][N], points[kIn][kIn];
  load_tile(src + (image * blocks + cb) * b.h * b.w * kBlock, b, y0 - before, x0 - before, d);
  transform_2d<N, kIn, F>(d, points);
  for (int r = 0; r < kIn; ++r)
    for (int q = 0; q < kIn; ++q) _mm256_storeu_ps(out + ((r * kIn + q) * pn + pp) * c + cb * kBlock, points[r][q]);
}

// The inverse for item i: m[point][block][channel] (`k` channels a row) back to the
// block's 4x4 outputs of dst (N, K, H, W; nChw8c), those inside the image, plus bias.
DPB_AVX2 void from_points_at(const float* m, const float* bias, const Blocks& b, int64_t k, int64_t p0, int64_t pn,
                             int64_t i, float* dst) {
  const int64_t blocks = k / kBlock;
  const auto [pp, kb, image, y0, x0] = b.at(p0, i, blocks);
  __m256 tile[kIn][kIn], out[kOut][kOut];
  for (int r = 0; r < kIn; ++r)
    for (int q = 0; q < kIn; ++q) tile[r][q] = _mm256_loadu_ps(m + ((r * kIn + q) * pn + pp) * k + kb * kBlock);
  transform_2d<kIn, kOut, output_1d>(tile, out);
  const __m256 add = bias ? _mm256_loadu_ps(bias + kb * kBlock) : _mm256_setzero_ps();
  float* base = dst + (image * blocks + kb) * b.h * b.w * kBlock;
  for (int r = 0; r < kOut && y0 + r < b.h; ++r)
    for (int q = 0; q < kOut && x0 + q < b.w; ++q)
      _mm256_storeu_ps(base + ((y0 + r) * b.w + x0 + q) * kBlock, _mm256_add_ps(out[r][q], add));
}

// Every item of a chunk, spread over the device's threads (they write apart). The loops
// stay outside the AVX2 functions: OpenMP's outlined bodies do not take the function's
// target (clang refuses AVX values there).
template <int N, void (*F)(const __m256*, __m256*)>
void to_points(const float* src, const Blocks& b, int64_t c, int64_t before, int64_t p0, int64_t pn, float* out) {
  const int64_t items = pn * (c / kBlock);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < items; ++i) to_points_at<N, F>(src, b, c, before, p0, pn, i, out);
}
void from_points(const float* m, const float* bias, const Blocks& b, int64_t k, int64_t p0, int64_t pn, float* dst) {
  const int64_t items = pn * (k / kBlock);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < items; ++i) from_points_at(m, bias, b, k, p0, pn, i, dst);
}

// Blocks a chunk: its transformed inputs and outputs (36 points x blocks x channels each)
// within about 2 MiB, so that they stay in the core's cache between the transforms and
// the products; at least 128 blocks, for the products' sake. Tried on a 2-vCPU Xeon (2 MiB
// of L2 a core; oneDNN held to AVX2, batch 16, one thread): 256 KiB to 4 MiB and at least
// 32 or 128 blocks all came within the run-to-run noise (about 10 %) of each other on
// ResNet-18's shapes, 128 blocks a little ahead at 16x16x128.
int64_t chunk_blocks(int64_t channels_in, int64_t channels_out) {
  const int64_t bytes_per_block = kPoints * (channels_in + channels_out) * static_cast<int64_t>(sizeof(float));
  return std::max<int64_t>(128, (int64_t{2} << 20) / bytes_per_block);
}

// Per-thread scratch, grown as needed.
float* scratch(std::vector<float>& v, int64_t floats) {
  if (static_cast<int64_t>(v.size()) < floats) v.resize(static_cast<size_t>(floats));
  return v.data();
}
thread_local std::vector<float> t_u, t_v, t_m;

// y = x (cin channels) convolved by the transformed filter u: per point, cout x cin
// (`u_out_major`) or cin x cout.
void convolve(const float* x, const float* u, bool u_out_major, const float* bias, float* y, int64_t n, int64_t cin,
              int64_t h, int64_t w, int64_t cout) {
  const Blocks b{n, h, w, (h + kOut - 1) / kOut, (w + kOut - 1) / kOut};
  const int64_t total = b.count(), chunk = std::min(total, chunk_blocks(cin, cout));
  float* v = scratch(t_v, kPoints * chunk * cin);
  float* m = scratch(t_m, kPoints * chunk * cout);
  for (int64_t p0 = 0; p0 < total; p0 += chunk) {
    const int64_t pn = std::min(chunk, total - p0);
    to_points<kIn, input_1d>(x, b, cin, 1, p0, pn, v);
    for (int pt = 0; pt < kPoints; ++pt)
      sgemm('N', u_out_major ? 'T' : 'N', pn, cout, cin, 1.0f, v + pt * pn * cin, cin, u + pt * cin * cout,
            u_out_major ? cin : cout, 0.0f, m + pt * pn * cout, cout);
    from_points(m, bias, b, cout, p0, pn, y);
  }
}

void check_channels(int64_t c, int64_t k) {
  DPB_CHECK(c % kBlock == 0 && k % kBlock == 0) << "Winograd convolution takes channels in blocks of " << kBlock
                                                << ", got " << c << " -> " << k;
}

// The k x c filters w (K, C, 3, 3) at the 36 points, by `transform` (36 x 9):
// u[point][k][c], in this thread's scratch.
const float* transformed_filters(const std::array<float, kPoints * 9>& transform, const float* w, int64_t k,
                                 int64_t c) {
  float* u = scratch(t_u, kPoints * k * c);
  sgemm('N', 'T', kPoints, k * c, 9, 1.0f, transform.data(), 9, w, 9, 0.0f, u, k * c);
  return u;
}

}  // namespace

bool processor_supported() {
  static const bool fma = __builtin_cpu_supports("fma");
  return fma && simd_isa() >= SimdIsa::avx2;
}

void forward(const float* x, const float* w, const float* bias, float* y, int64_t n, int64_t c, int64_t h, int64_t wd,
             int64_t k) {
  check_channels(c, k);
  // u[point][k][c] = T g[k][c]: one product of T (36 x 9) and the filters' taps; per
  // point, outputs x inputs.
  convolve(x, transformed_filters(filter_transform().t, w, k, c), /*u_out_major=*/true, bias, y, n, c, h, wd, k);
}

void backward_data(const float* dy, const float* w, float* dx, int64_t n, int64_t c, int64_t h, int64_t wd,
                   int64_t k) {
  check_channels(c, k);
  // The filter turned 180 degrees, dy's channels its inputs: u[point][k][c] =
  // T_flipped g[k][c], per point inputs x outputs.
  convolve(dy, transformed_filters(filter_transform().flipped, w, k, c), /*u_out_major=*/false, nullptr, dx, n, k, h,
           wd, c);
}

void backward_weights(const float* x, const float* dy, float* dw, float* db, int64_t n, int64_t c, int64_t h,
                      int64_t wd, int64_t k, bool accumulate) {
  check_channels(c, k);
  const Blocks b{n, h, wd, (h + kOut - 1) / kOut, (wd + kOut - 1) / kOut};
  const int64_t total = b.count(), chunk = std::min(total, chunk_blocks(c, k));
  float* v = scratch(t_v, kPoints * chunk * c);
  float* g = scratch(t_m, kPoints * chunk * k);
  float* du = scratch(t_u, kPoints * k * c);  // du[point][k][c], summed over blocks
  for (int64_t p0 = 0; p0 < total; p0 += chunk) {
    const int64_t pn = std::min(chunk, total - p0);
    to_points<kIn, input_1d>(x, b, c, 1, p0, pn, v);
    to_points<kOut, gradient_1d>(dy, b, k, 0, p0, pn, g);
    for (int pt = 0; pt < kPoints; ++pt)
      sgemm('T', 'N', k, c, pn, 1.0f, g + pt * pn * k, k, v + pt * pn * c, c, p0 == 0 ? 0.0f : 1.0f,
            du + pt * k * c, c);
  }
  // dw[k][c][tap] = sum over points of du[point][k][c] T[point][tap].
  sgemm('T', 'N', k * c, 9, kPoints, 1.0f, du, k * c, filter_transform().t.data(), 9, accumulate ? 1.0f : 0.0f, dw,
        9);
  if (db) {
    const int64_t kb_count = k / kBlock, plane = h * wd;
    for (int64_t kb = 0; kb < kb_count; ++kb)
      for (int lane = 0; lane < kBlock; ++lane) {
        double s = 0;
        for (int64_t i = 0; i < n; ++i) {
          const float* p = dy + ((i * kb_count + kb) * plane) * kBlock + lane;
          for (int64_t q = 0; q < plane; ++q) s += p[q * kBlock];
        }
        float& out = db[kb * kBlock + lane];
        out = static_cast<float>(accumulate ? out + s : s);
      }
  }
}

}  // namespace dpb::cpu::winograd
