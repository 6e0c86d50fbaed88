#pragma once
// Weight initialisation, matching PyTorch's defaults so that training curves compare.
//
// Deferred ("meta-device") initialisation: while a DeferredInit lives on this thread,
// uniform() and normal() draw nothing and hold no memory: they make the tensor a deferred
// one (Tensor::deferred) that records the generator's state and the distribution, and
// advance the generator past its values as drawing them would, so that every later
// tensor's values are those a normal build gives. draw() then produces any range of a
// deferred tensor's elements — FSDP draws only the rows of its shards, so no rank ever
// holds the whole model (as torch's meta device with fully_shard, then init_weights).
#include <cmath>
#include <cstdint>

#include "engine/core/rng.h"
#include "engine/tensor/tensor.h"

namespace dpb {
class Module;
}

namespace dpb::init {

// U(-bound, bound) for every element (CPU tensor).
void uniform(Tensor& t, float bound, Generator& gen);
// N(0, std^2) for every element (CPU tensor): GPT-2's initialisation (std 0.02).
void normal(Tensor& t, float std, Generator& gen);
// PyTorch's default for Linear and Conv2d weights and biases:
// kaiming_uniform_(a=sqrt(5)) = U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
inline float default_bound(int64_t fan_in) { return fan_in > 0 ? 1.0f / std::sqrt(static_cast<float>(fan_in)) : 0.0f; }

class DeferredInit {
 public:
  DeferredInit();
  ~DeferredInit();
  DeferredInit(const DeferredInit&) = delete;
  DeferredInit& operator=(const DeferredInit&) = delete;
  static bool active();

 private:
  bool outer_;
};

// Elements [first, first + count) (row-major) of the deferred values `v` into `out`
// (count f32 values, any device).
void draw(const DeferredValues& v, int64_t first, int64_t count, Tensor out);
// Every deferred parameter of `m` drawn whole, in place (a model built deferred, used
// by something that needs it whole).
void materialize(Module& m);

}  // namespace dpb::init
