#pragma once
// What ops.cpp and ops_transformer.cpp share to dispatch an op on the device of its
// tensors: the shape and device checks, and dispatch() (the kernel of the device's
// backend from its KernelTable, --op-profile's timing, oneDNN errors named by op).
// Included by those two files only.
#include <oneapi/dnnl/dnnl.hpp>

#include <initializer_list>
#include <optional>
#include <type_traits>
#include <utility>

#include "engine/backend/op_profile.h"
#include "engine/backend/ops.h"
#include "engine/core/clock.h"

#include "engine/backend/kernel_table.h"
#if DPB_WITH_CUDA
#include "engine/backend/cuda/fused_attention.h"
#include "engine/backend/cuda/runtime.h"
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

// The kernel table of the device `d` (the CPU's, or the CUDA backend's where the build
// has one).
inline const KernelTable& kernels_of(const char* op, const Device& d) {
  if (d.is_cuda()) {
#if DPB_WITH_CUDA
    return cuda::kernel_table();
#else
    DPB_FAIL() << op << " on " << d << ": this build has no CUDA backend";
#endif
  }
  return cpu::kernel_table();
}

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

// Runs the kernel `entry` of the table of device `d` on `args` (timed under
// --op-profile); a kernel the device's backend lacks, and oneDNN's errors, fail naming
// the op.
template <typename R, typename... P, typename... A>
R dispatch(const char* op, const Device& d, R (*KernelTable::*entry)(P...), A&&... args) {
  R (*kernel)(P...) = kernels_of(op, d).*entry;
  DPB_CHECK(kernel != nullptr) << op << " on " << d << ": no " << (d.is_cuda() ? "CUDA" : "CPU")
                               << " kernel for this form of the op (" << (d.is_cuda() ? "CPU" : "CUDA") << " only)";
  std::optional<OpTimer> timer;
  if (op_profiling()) timer.emplace(op, d);
  try {
    return kernel(std::forward<A>(args)...);
  } catch (const dnnl::error& e) {
    DPB_FAIL() << op << " on " << d << ": oneDNN error " << e.status << ": " << e.what();
  }
}

}  // namespace dpb::ops::internal
