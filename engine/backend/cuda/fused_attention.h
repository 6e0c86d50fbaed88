#pragma once
// Causal attention fused by cuDNN (flash attention, bf16): the forward never writes the
// (N, heads, T, T) probabilities out, only each row's log-sum-exp, from which the backward
// recomputes them tile by tile. Built as cuDNN graphs of primitive ops in the pattern its
// fused-attention engines take (fused_attention.cpp).
#include <cstdint>
#include <string>

#include "engine/tensor/tensor.h"

namespace dpb::cuda {

// Empty when attention on qkv (N, T, 3C) with `heads` heads runs fused on its device;
// else why not: the dtype (bf16 only), the head width (a multiple of 8, at most 128), the
// GPU (sm80 or newer), the cuDNN version (9 or newer), DPB_CUDA_ATTENTION=cublas, or the
// step of building the graphs that cuDNN refused, in cuDNN's words. The graphs are built
// and cached per shape and stream on the first call. DPB_CUDA_ATTENTION=cudnn makes a
// refusal an error instead of a fallback.
std::string fused_attention_unsupported(const Tensor& qkv, int64_t heads);

// Builds the fused forward and backward plans for N x T tokens and `heads` heads of
// `head_width`, for the GPU that `device_json` describes (cuDNN's device-properties
// JSON), without that GPU: cuDNN's deviceless ahead-of-time compilation (cuDNN 9.8 or
// newer). Empty when an engine of cuDNN's takes each graph; else cuDNN's refusal. The
// plans' workspace sizes go to workspace_bytes[0..1] when given: -1 where the plan
// could not be finalized for want of a CUDA driver (its engine had taken the graph).
std::string fused_attention_compile_for(const std::string& device_json, int64_t N, int64_t T, int64_t heads,
                                        int64_t head_width, int64_t* workspace_bytes = nullptr);

// y (N, T, C) and stats (N, heads, T) fp32: stats[n, h, t] = the log of the sum of the
// exponentials of row t's scaled, causally masked scores.
void fused_attention_forward(const Tensor& qkv, int64_t heads, Tensor& y, Tensor& stats);

// dqkv (N, T, 3C) from the forward's qkv, y and stats and the gradient dy (N, T, C).
void fused_attention_backward(const Tensor& qkv, const Tensor& y, const Tensor& stats, const Tensor& dy,
                              int64_t heads, Tensor& dqkv);

}  // namespace dpb::cuda
