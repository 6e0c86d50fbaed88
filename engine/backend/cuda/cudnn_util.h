#pragma once
// cuDNN descriptors as small RAII types, and the mapping from the engine's tensors
// (dtype, plain or channels-last layout) to cuDNN's descriptions of them.
#include <cudnn.h>

#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/device_context.h"
#include "engine/backend/precision.h"
#include "engine/tensor/tensor.h"

namespace dpb::cuda {

inline cudnnDataType_t cudnn_dtype(DType t) {
  DPB_CHECK(t != DType::i32) << "cuDNN op on an I32 tensor";
  return t == DType::bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

inline bool is_bf16(const Tensor& t) { return t.dtype() == DType::bf16; }

// cuBLAS's element type for a tensor's dtype, and the compute type --precision asks for
// (fp32: CUBLAS_COMPUTE_32F, no TF32; tf32: the fast TF32 mode; bf16 operands accumulate
// in fp32).
inline cudaDataType_t blas_type(DType t) { return t == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F; }
inline cublasComputeType_t blas_compute_type() {
  return precision() == Precision::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

inline cudnnTensorFormat_t cudnn_format(Layout l) {
  DPB_CHECK(l == Layout::plain || l == Layout::nhwc) << "cuDNN op on a " << layout_name(l) << " tensor";
  return l == Layout::nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
}

struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc() { DPB_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d)); }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
  // A 4-d tensor as it is stored.
  void set(const Tensor& t) { set(t.dtype(), t.layout(), t.size(0), t.size(1), t.size(2), t.size(3)); }
  void set(DType dt, Layout l, int64_t n, int64_t c, int64_t h, int64_t w) {
    DPB_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, cudnn_format(l), cudnn_dtype(dt), static_cast<int>(n),
                                               static_cast<int>(c), static_cast<int>(h), static_cast<int>(w)));
  }
  // Any tensor as a flat run of elements (for element-wise ops).
  void set_flat(const Tensor& t) { set(t.dtype(), Layout::plain, 1, 1, 1, t.storage_numel()); }
};

struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  FilterDesc() { DPB_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d)); }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
  void set(DType dt, Layout l, int64_t o, int64_t i, int64_t kh, int64_t kw) {
    DPB_CUDNN_CHECK(cudnnSetFilter4dDescriptor(d, cudnn_dtype(dt), cudnn_format(l), static_cast<int>(o),
                                               static_cast<int>(i), static_cast<int>(kh), static_cast<int>(kw)));
  }
};

struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  ConvDesc() { DPB_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d)); }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(d); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
};

// What a tensor's device needs to run a cuDNN/cuBLAS call on the current stream.
struct OpEnv {
  DeviceContext& ctx;
  cudaStream_t stream;
  StreamResources& res;
};

inline OpEnv op_env(const Tensor& t) {
  const int index = t.device().index;
  set_device(index);
  DeviceContext& ctx = DeviceContext::get(index);
  cudaStream_t s = current_stream(index);
  return OpEnv{ctx, s, ctx.resources(s)};
}

// The layout convolutions compute in: channels-last where tensor cores do the math
// (tf32, bf16), plain for strict fp32. DPB_CUDA_LAYOUT=nchw|nhwc overrides.
Layout conv_layout();

}  // namespace dpb::cuda
