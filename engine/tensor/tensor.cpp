#include "engine/tensor/tensor.h"

#include <algorithm>

#if DPB_WITH_CUDA
#include "engine/backend/cuda/runtime.h"
#endif

namespace dpb {

void copy_bytes(const Device& dst_dev, void* dst, const Device& src_dev, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  if (dst_dev.is_cpu() && src_dev.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return;
  }
#if DPB_WITH_CUDA
  cuda::copy(dst_dev, dst, src_dev, src, bytes);
#else
  DPB_FAIL() << "cannot copy " << src_dev << " -> " << dst_dev << ": this build has no CUDA backend";
#endif
}

Tensor Tensor::empty(const Shape& shape, Device device, DType dtype) {
  for (auto d : shape.dims()) DPB_CHECK(d >= 0) << "negative dimension in shape " << shape;
  Tensor t;
  t.storage_ = std::make_shared<Storage>(device, static_cast<size_t>(shape.numel()) * dtype_size(dtype));
  t.shape_ = shape;
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::zeros(const Shape& shape, Device device) {
  Tensor t = empty(shape, device);
  t.zero();
  return t;
}

Tensor Tensor::full(const Shape& shape, float value, Device device) {
  Tensor t = empty(shape, device);
  t.fill(value);
  return t;
}

Tensor Tensor::from_vector(const Shape& shape, const std::vector<float>& values, Device device) {
  DPB_CHECK(static_cast<int64_t>(values.size()) == shape.numel())
      << "from_vector: " << values.size() << " values for shape " << shape;
  Tensor t = empty(shape, device);
  copy_bytes(device, t.data(), Device::cpu(), values.data(), values.size() * sizeof(float));
  return t;
}

Tensor Tensor::from_labels(const std::vector<int32_t>& labels, Device device) {
  Tensor t = empty(Shape{static_cast<int64_t>(labels.size())}, device, DType::i32);
  copy_bytes(device, t.data_i32(), Device::cpu(), labels.data(), labels.size() * sizeof(int32_t));
  return t;
}

std::vector<int32_t> Tensor::to_labels() const {
  DPB_CHECK(dtype_ == DType::i32) << "to_labels() of a " << dtype_name(dtype_) << " tensor";
  std::vector<int32_t> v(static_cast<size_t>(numel()));
  copy_bytes(Device::cpu(), v.data(), device(), data_i32(), nbytes());
  return v;
}

float* Tensor::host_data() const {
  DPB_CHECK(defined()) << "access to an undefined tensor";
  DPB_CHECK(device().is_cpu()) << "host access to a tensor on " << device() << "; copy it with .to(cpu) first";
  return data();
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  DPB_CHECK(ndim() >= 1) << "slice of a 0-d tensor";
  DPB_CHECK(0 <= begin && begin <= end && end <= shape_[0])
      << "slice [" << begin << ", " << end << ") out of range for dim 0 of " << shape_;
  Tensor t = *this;
  t.offset_ = offset_ + begin * shape_.row_numel();
  t.shape_[0] = end - begin;
  return t;
}

Tensor Tensor::view(const Shape& shape) const {
  DPB_CHECK(shape.numel() == numel()) << "view " << shape << " of a tensor of shape " << shape_
                                      << " (" << numel() << " elements)";
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape_, device(), dtype_);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(Device dev) const {
  if (dev == device()) return *this;
  Tensor t = empty(shape_, dev, dtype_);
  t.copy_from(*this);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  DPB_CHECK(src.numel() == numel() && src.dtype() == dtype_)
      << "copy of " << src.shape() << " " << dtype_name(src.dtype()) << " into " << shape_ << " " << dtype_name(dtype_);
  copy_bytes(device(), data(), src.device(), src.data(), nbytes());
}

std::vector<float> Tensor::to_vector() const {
  DPB_CHECK(dtype_ == DType::f32) << "to_vector() of a " << dtype_name(dtype_) << " tensor";
  std::vector<float> v(static_cast<size_t>(numel()));
  copy_bytes(Device::cpu(), v.data(), device(), data(), nbytes());
  return v;
}

float Tensor::item() const {
  DPB_CHECK(numel() == 1) << "item() of a tensor with " << numel() << " elements";
  float v = 0;
  copy_bytes(Device::cpu(), &v, device(), data(), sizeof(float));
  return v;
}

void Tensor::fill(float value) {
  DPB_CHECK(dtype_ == DType::f32) << "fill() of a " << dtype_name(dtype_) << " tensor";
  if (device().is_cpu()) {
    std::fill_n(data(), numel(), value);
  } else {
    std::vector<float> host(static_cast<size_t>(numel()), value);
    copy_bytes(device(), data(), Device::cpu(), host.data(), nbytes());
  }
}

}  // namespace dpb
