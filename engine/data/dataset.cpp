#include "engine/data/dataset.h"

namespace dpb {

void Dataset::get_tokens(int64_t, int32_t*, int32_t*) const {
  DPB_FAIL() << "dataset '" << name() << "' holds " << dtype_name(input_dtype()) << " samples, not token sequences";
}

Batch allocate_batch(const Dataset& ds, int64_t n, bool pinned) {
  const Shape sample = ds.sample_shape();
  std::vector<int64_t> dims{n};
  for (auto d : sample.dims()) dims.push_back(d);
  const bool tokens = ds.input_dtype() == DType::i32;
  const bool classify = ds.target_kind() == LossKind::cross_entropy;
  const Shape tshape = tokens ? Shape(dims) : classify ? Shape{n} : Shape{n, ds.target_width()};
  const DType xdtype = tokens ? DType::i32 : DType::f32;
  const DType tdtype = classify ? DType::i32 : DType::f32;
  Batch b;
  b.x = pinned ? Tensor::empty_pinned(Shape(dims), xdtype) : Tensor::empty(Shape(dims), Device::cpu(), xdtype);
  b.target = pinned ? Tensor::empty_pinned(tshape, tdtype) : Tensor::empty(tshape, Device::cpu(), tdtype);
  return b;
}

void fill_batch_row(const Dataset& ds, int64_t idx, Batch& b, int64_t i) {
  DPB_CHECK(idx >= 0 && idx < ds.size()) << "sample index " << idx << " outside dataset '" << ds.name()
                                         << "' of size " << ds.size();
  const int64_t per = ds.sample_shape().numel();
  if (ds.input_dtype() == DType::i32) {
    int32_t* x = b.x.data_i32() + i * per;
    int32_t* y = b.target.data_i32() + i * per;
    ds.get_tokens(idx, x, y);
    // Checked here, on the host, so no device ever indexes its embedding table with them.
    const int64_t vocab = ds.target_width();
    for (int64_t t = 0; t < per; ++t)
      DPB_CHECK(x[t] >= 0 && x[t] < vocab && y[t] >= 0 && y[t] < vocab)
          << "dataset '" << ds.name() << "' sample " << idx << ": token " << (x[t] < 0 || x[t] >= vocab ? x[t] : y[t])
          << " at position " << t << " outside the vocabulary [0, " << vocab << ")";
    return;
  }
  const bool classify = ds.target_kind() == LossKind::cross_entropy;
  ds.get(idx, b.x.data() + i * per, classify ? b.target.data_i32() + i : nullptr,
         classify ? nullptr : b.target.data() + i * ds.target_width());
}

Batch make_batch(const Dataset& ds, const std::vector<int64_t>& indices) {
  const auto n = static_cast<int64_t>(indices.size());
  Batch b = allocate_batch(ds, n, false);
  b.indices = indices;
  for (int64_t i = 0; i < n; ++i) fill_batch_row(ds, indices[static_cast<size_t>(i)], b, i);
  return b;
}

}  // namespace dpb
