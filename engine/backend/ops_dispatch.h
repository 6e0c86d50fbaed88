#pragma once
// What ops.cpp and ops_transformer.cpp share to dispatch an op on the device of its
// tensors: the shape and device checks, and dispatch() (--op-profile's timing, CPU or
// CUDA implementation, oneDNN errors named by op). Included by those two files only.
#include <oneapi/dnnl/dnnl.hpp>

#include <initializer_list>
#include <type_traits>
#include <utility>

#include "engine/backend/op_profile.h"
#include "engine/backend/ops.h"
#include "engine/core/clock.h"

#include "engine/backend/cpu/cpu_ops.h"
#if DPB_WITH_CUDA
#include "engine/backend/cuda/cuda_ops.h"
#include "engine/backend/cuda/fused_attention.h"
#include "engine/backend/cuda/runtime.h"
#define DPB_CUDA_IMPL(...) [&] { return cuda::__VA_ARGS__; }
#else
#define DPB_CUDA_IMPL(...) ::dpb::ops::internal::NoCuda {}
#endif

namespace dpb::ops::internal {

inline void same_device(const char* op, const Device& d, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    if (t->defined()) {
      DPB_CHECK(t->device() == d) << op << ": tensors on different devices (" << d << " and " << t->device() << ")";
    }
  }
}

inline void expect_shape(const char* op, const char* what, const Tensor& t, const Shape& s) {
  DPB_CHECK(t.defined() && t.shape() == s) << op << ": " << what << " has shape "
                                           << (t.defined() ? t.shape().str() : "(undefined)") << ", expected " << s;
}

inline void expect_ndim(const char* op, const char* what, const Tensor& t, int ndim, const char* layout) {
  DPB_CHECK(t.defined() && t.ndim() == ndim)
      << op << ": " << what << " must be " << layout << ", got shape " << (t.defined() ? t.shape().str() : "(undefined)");
}

inline void expect_dtype(const char* op, const char* what, const Tensor& t, DType d) {
  DPB_CHECK(t.defined() && t.dtype() == d) << op << ": " << what << " must be " << dtype_name(d) << ", got "
                                           << (t.defined() ? dtype_name(t.dtype()) : "(undefined)");
}

// Runs cpu_impl on CPU devices; on CUDA devices runs cuda_impl when the build has one
// for this op, else fails naming the op.
struct NoCuda {};

template <typename F, typename G = NoCuda>
auto run_on(const char* op, const Device& d, F&& cpu_impl, G&& cuda_impl);

// Times an op for --op-profile: waits for the device before and after.
struct OpTimer {
  const char* op;
  const Device& device;
  int64_t start;
  OpTimer(const char* name, const Device& d) : op(name), device(d) {
    synchronize(device);
    start = now_ns();
  }
  ~OpTimer() {
    try {
      synchronize(device);
    } catch (...) {
    }
    record_op_time(op, static_cast<double>(now_ns() - start) * 1e-9);
  }
};

template <typename F, typename G = NoCuda>
auto dispatch(const char* op, const Device& d, F&& cpu_impl, G&& cuda_impl = {}) {
  if (op_profiling()) {
    OpTimer timer(op, d);
    return run_on(op, d, std::forward<F>(cpu_impl), std::forward<G>(cuda_impl));
  }
  return run_on(op, d, std::forward<F>(cpu_impl), std::forward<G>(cuda_impl));
}

template <typename F, typename G>
auto run_on(const char* op, const Device& d, F&& cpu_impl, G&& cuda_impl) {
  if (d.is_cuda()) {
#if DPB_WITH_CUDA
    if constexpr (!std::is_same_v<std::decay_t<G>, NoCuda>) return cuda_impl();
#endif
    DPB_FAIL() << op << " on " << d << ": no CUDA implementation of this op in this build";
  }
  try {
    return cpu_impl();
  } catch (const dnnl::error& e) {
    DPB_FAIL() << op << " on " << d << ": oneDNN error " << e.status << ": " << e.what();
  }
}

}  // namespace dpb::ops::internal
