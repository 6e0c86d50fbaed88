#pragma once
// Small helpers shared by the oneDNN-based CPU ops: memory descriptors over our
// contiguous tensors, memory objects without copies, cache keys, and execution.
#include <oneapi/dnnl/dnnl.hpp>

#include <string>
#include <unordered_map>

#include "engine/backend/cpu/cpu_context.h"
#include "engine/tensor/tensor.h"

namespace dpb::cpu {

using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;

inline dnnl::memory::desc md(const dims& d, tag t) { return dnnl::memory::desc(d, dt::f32, t); }

inline dnnl::memory mem(const dnnl::memory::desc& d, CpuContext& ctx, const Tensor& t) {
  return dnnl::memory(d, ctx.engine(), t.data());
}

// Key: op name followed by its integer parameters.
template <typename... Ints>
std::string key(const char* op, Ints... values) {
  std::string k = op;
  ((k += ':', k += std::to_string(static_cast<long long>(values))), ...);
  return k;
}

// Row-major c (m, n) = alpha op(a) op(b) + beta c, op transposing where 'T', each
// operand by its leading dimension: oneDNN's GEMM, threaded as the device's scope sets
// (one thread inside an OpenMP parallel region).
void sgemm(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// Every primitive is created with a user-managed scratchpad: oneDNN's default keeps a
// scratchpad that belongs to the thread that created the primitive, so a cached
// primitive run later from another thread (a new rank or replica thread) would use that
// thread's freed memory. run() hands each execution its scratchpad instead.
// A new attribute each call: dnnl::primitive_attr is a shared handle, so a copy that a
// caller adds post-ops to would otherwise change every later primitive.
inline dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return a;
}

void run(CpuContext& ctx, const dnnl::primitive& p, const std::unordered_map<int, dnnl::memory>& args);
// A reorder between two memories of this device (with a user scratchpad).
void reorder_memory(CpuContext& ctx, const dnnl::memory& from, const dnnl::memory& to);

inline dims dims4(const Tensor& t) { return {t.size(0), t.size(1), t.size(2), t.size(3)}; }

inline tag tag_of(Layout l) {
  switch (l) {
    case Layout::nChw8c:
      return tag::nChw8c;
    case Layout::nChw16c:
      return tag::nChw16c;
    case Layout::nhwc:
      return tag::nhwc;
    case Layout::plain:
      break;
  }
  return tag::nchw;
}

// Descriptor of a 4-d activation in its own layout.
inline dnnl::memory::desc md4(const Tensor& t) { return md(dims4(t), tag_of(t.layout())); }
inline dnnl::memory::desc md4(const dims& d, Layout l) { return md(d, tag_of(l)); }

// The channel-blocked layout oneDNN's direct convolutions use on this CPU
// (16 channels with AVX-512, 8 otherwise).
Layout blocked_layout();


}  // namespace dpb::cpu
