#include "engine/nn/init.h"

namespace dpb::init {

void uniform(Tensor& t, float bound, Generator& gen) {
  float* p = t.host_data();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = gen.uniform(-bound, bound);
}

void normal(Tensor& t, float std, Generator& gen) {
  float* p = t.host_data();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = std * static_cast<float>(gen.normal());
}

}  // namespace dpb::init
