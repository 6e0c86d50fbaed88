#include "engine/data/dataset.h"

namespace dpb {

Batch make_batch(const Dataset& ds, const std::vector<int64_t>& indices) {
  const auto n = static_cast<int64_t>(indices.size());
  const Shape sample = ds.sample_shape();
  std::vector<int64_t> dims{n};
  for (auto d : sample.dims()) dims.push_back(d);
  Batch b;
  b.indices = indices;
  b.x = Tensor::empty(Shape(dims));
  const int64_t per = sample.numel();
  const bool classify = ds.target_kind() == LossKind::cross_entropy;
  b.target = classify ? Tensor::empty({n}, Device::cpu(), DType::i32) : Tensor::empty({n, ds.target_width()});
  for (int64_t i = 0; i < n; ++i) {
    const int64_t idx = indices[static_cast<size_t>(i)];
    DPB_CHECK(idx >= 0 && idx < ds.size()) << "sample index " << idx << " outside dataset '" << ds.name()
                                           << "' of size " << ds.size();
    ds.get(idx, b.x.data() + i * per, classify ? b.target.data_i32() + i : nullptr,
           classify ? nullptr : b.target.data() + i * ds.target_width());
  }
  return b;
}

}  // namespace dpb
