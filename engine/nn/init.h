#pragma once
// Weight initialisation, matching PyTorch's defaults so that training curves compare.
#include <cmath>

#include "engine/core/rng.h"
#include "engine/tensor/tensor.h"

namespace dpb::init {

// U(-bound, bound) for every element (CPU tensor).
void uniform(Tensor& t, float bound, Generator& gen);
// N(0, std^2) for every element (CPU tensor): GPT-2's initialisation (std 0.02).
void normal(Tensor& t, float std, Generator& gen);
// PyTorch's default for Linear and Conv2d weights and biases:
// kaiming_uniform_(a=sqrt(5)) = U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
inline float default_bound(int64_t fan_in) { return fan_in > 0 ? 1.0f / std::sqrt(static_cast<float>(fan_in)) : 0.0f; }

}  // namespace dpb::init
