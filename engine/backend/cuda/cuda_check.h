#pragma once
// Status checks for the CUDA libraries, all from the one generator in core/error.h:
// each failure names the library, the status, the statement, the device, file and line.
//   DPB_CUDA_CHECK(cudaMemcpyAsync(...)) << "copying the batch";
// The _NOTHROW forms log instead of throwing (destructors, cleanup paths).
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

#include <string>

#include "engine/core/error.h"

namespace dpb::cuda {

inline std::string describe(cudaError_t s) { return std::string(cudaGetErrorName(s)) + " (" + cudaGetErrorString(s) + ")"; }
inline std::string describe(cudnnStatus_t s) { return cudnnGetErrorString(s); }
inline std::string describe(ncclResult_t s) { return ncclGetErrorString(s); }
std::string describe(cublasStatus_t s);

// " on cuda:N" for the calling thread's current device.
std::string where_device();

}  // namespace dpb::cuda

#define DPB_CUDA_CHECK(stmt) \
  DPB_STATUS_CHECK_(::dpb::detail::Raise(), "CUDA", stmt, cudaSuccess, ::dpb::cuda::describe, ::dpb::cuda::where_device())
#define DPB_CUDNN_CHECK(stmt)                                                                           \
  DPB_STATUS_CHECK_(::dpb::detail::Raise(), "cuDNN", stmt, CUDNN_STATUS_SUCCESS, ::dpb::cuda::describe, \
                    ::dpb::cuda::where_device())
#define DPB_CUBLAS_CHECK(stmt)                                                                            \
  DPB_STATUS_CHECK_(::dpb::detail::Raise(), "cuBLAS", stmt, CUBLAS_STATUS_SUCCESS, ::dpb::cuda::describe, \
                    ::dpb::cuda::where_device())
#define DPB_NCCL_CHECK(stmt) \
  DPB_STATUS_CHECK_(::dpb::detail::Raise(), "NCCL", stmt, ncclSuccess, ::dpb::cuda::describe, ::dpb::cuda::where_device())
#define DPB_CUDA_CHECK_NOTHROW(stmt)                                                                 \
  DPB_STATUS_CHECK_(::dpb::detail::Report(), "CUDA", stmt, cudaSuccess, ::dpb::cuda::describe, \
                    ::dpb::cuda::where_device())
// After every kernel launch: launch errors surface here, not at the next sync.
#define DPB_CUDA_CHECK_LAUNCH() DPB_CUDA_CHECK(cudaPeekAtLastError())
