#include "engine/tensor/tensor.h"

#include <algorithm>

#include "engine/tensor/device_backend.h"

namespace dpb {

void copy_bytes(const Device& dst_dev, void* dst, const Device& src_dev, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  if (dst_dev.is_cpu() && src_dev.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return;
  }
  device_backend(DeviceKind::cuda).copy(dst_dev, dst, src_dev, src, bytes);
}

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::plain:
      return "plain";
    case Layout::nChw8c:
      return "nChw8c";
    case Layout::nChw16c:
      return "nChw16c";
    case Layout::nhwc:
      return "nhwc";
  }
  return "?";
}

Tensor Tensor::from_external(const Shape& shape, Device device, float* data, std::shared_ptr<void> owner) {
  DPB_CHECK(data && owner && device.is_cpu()) << "Tensor::from_external needs host memory, its owner and a CPU device";
  Tensor t;
  t.shape_ = shape;
  t.storage_ =
      std::make_shared<Storage>(device, data, static_cast<size_t>(shape.numel()) * sizeof(float), std::move(owner));
  return t;
}

void Storage::release() {
  DPB_CHECK(!owner_ && !pinned_) << "only storage allocated for a device can be released";
  if (!data_) return;
  device_free(device_, data_, bytes_);
  data_ = nullptr;
}

void Storage::refill() {
  if (data_) return;
  data_ = device_alloc(device_, bytes_);
}

Tensor Tensor::empty(const Shape& shape, Device device, DType dtype, Layout layout) {
  for (auto d : shape.dims()) DPB_CHECK(d >= 0) << "negative dimension in shape " << shape;
  if (layout == Layout::nhwc) {
    DPB_CHECK(shape.ndim() == 4 && (device.is_cuda() || dtype == DType::f32))
        << "layout nhwc needs a 4-d CUDA tensor or a 4-d f32 CPU tensor, got " << shape << " " << dtype_name(dtype)
        << " on " << device;
  } else if (layout != Layout::plain) {
    DPB_CHECK(shape.ndim() == 4 && device.is_cpu() && dtype == DType::f32)
        << "layout " << layout_name(layout) << " needs a 4-d f32 CPU tensor, got " << shape << " on " << device;
  }
  Tensor t;
  t.layout_ = layout;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(device, static_cast<size_t>(t.storage_numel()) * dtype_size(dtype));
  if (t.storage_numel() != t.numel()) std::fill_n(t.data(), t.storage_numel(), 0.0f);
  return t;
}

Tensor Tensor::empty_pinned(const Shape& shape, DType dtype) {
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(Storage::Pinned{}, static_cast<size_t>(shape.numel()) * dtype_size(dtype));
  return t;
}

Tensor Tensor::deferred(const Shape& shape, Device device, std::shared_ptr<const DeferredValues> values) {
  for (auto d : shape.dims()) DPB_CHECK(d >= 0) << "negative dimension in shape " << shape;
  DPB_CHECK(values) << "a deferred tensor needs the recipe of its values";
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = DType::f32;
  t.storage_ = std::make_shared<Storage>(device, static_cast<size_t>(shape.numel()) * sizeof(float), std::move(values));
  return t;
}

Tensor Tensor::empty_like(const Tensor& t) { return empty(t.shape(), t.device(), t.dtype(), t.layout()); }

namespace {
int64_t channel_blocks(int64_t channels, int block) { return (channels + block - 1) / block; }

// Copies between plain (N, C, H, W) and channel-blocked (N, ceil(C/b), H, W, b) orders;
// padding lanes of a blocked destination are left as they are (zero).
void convert_layout(const float* src, float* dst, const Shape& s, int block, bool to_blocked) {
  const int64_t N = s[0], C = s[1], HW = s[2] * s[3], CB = channel_blocks(C, block);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t cb = 0; cb < CB; ++cb)
      for (int64_t hw = 0; hw < HW; ++hw)
        for (int64_t c = 0; c < block && cb * block + c < C; ++c) {
          const int64_t blocked = ((n * CB + cb) * HW + hw) * block + c;
          const int64_t plain = (n * C + cb * block + c) * HW + hw;
          if (to_blocked) dst[blocked] = src[plain];
          else dst[plain] = src[blocked];
        }
}

// Copies between plain (N, C, H, W) and channels-last (N, H, W, C) orders.
void convert_nhwc(const float* src, float* dst, const Shape& s, bool to_nhwc) {
  const int64_t N = s[0], C = s[1], HW = s[2] * s[3];
  for (int64_t n = 0; n < N; ++n) {
    const float* in = src + n * C * HW;
    float* out = dst + n * C * HW;
    if (to_nhwc) {
      for (int64_t c = 0; c < C; ++c)
        for (int64_t i = 0; i < HW; ++i) out[i * C + c] = in[c * HW + i];
    } else {
      for (int64_t i = 0; i < HW; ++i)
        for (int64_t c = 0; c < C; ++c) out[c * HW + i] = in[i * C + c];
    }
  }
}
}  // namespace

int64_t Tensor::storage_numel() const {
  if (layout_ == Layout::plain || layout_ == Layout::nhwc) return numel();
  const int b = layout_block(layout_);
  return shape_[0] * channel_blocks(shape_[1], b) * b * shape_[2] * shape_[3];
}

void Tensor::zero_padding() {
  const int b = layout_block(layout_);
  if (b == 1) return;
  const int64_t C = shape_[1];
  if (C % b == 0) return;
  const int64_t N = shape_[0], HW = shape_[2] * shape_[3], CB = channel_blocks(C, b), last = C % b;
  float* p = data();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t hw = 0; hw < HW; ++hw)
      std::fill_n(p + ((n * CB + CB - 1) * HW + hw) * b + last, b - last, 0.0f);
}

Tensor Tensor::to_layout(Layout layout) const {
  if (layout == layout_) return *this;
  if (ndim() == 4 && size(2) * size(3) == 1 && size(1) % layout_block(layout) == 0 &&
      size(1) % layout_block(layout_) == 0) {
    Tensor t = *this;  // (N, C, 1, 1): the orders coincide
    t.layout_ = layout;
    return t;
  }
  if (device().is_cuda()) {
    DPB_CHECK(layout == Layout::plain || layout == Layout::nhwc)
        << "layout " << layout_name(layout) << " on " << device() << " (CUDA tensors are plain or nhwc)";
    Tensor out = empty(shape_, device(), dtype_, layout);
    device_backend(DeviceKind::cuda)
        .convert_layout(device().index, raw(), out.raw(), dtype_size(dtype_), shape_.dims(), layout == Layout::nhwc);
    return out;
  }
  DPB_CHECK(device().is_cpu() && dtype_ == DType::f32)
      << "layout conversion " << layout_name(layout_) << " -> " << layout_name(layout) << " of a "
      << dtype_name(dtype_) << " tensor on " << device();
  if (layout_ != Layout::plain && layout != Layout::plain) {
    return to_plain().to_layout(layout);
  }
  Tensor out = empty(shape_, device(), dtype_, layout);
  if (layout_ == Layout::nhwc || layout == Layout::nhwc) {
    convert_nhwc(data(), out.data(), shape_, layout == Layout::nhwc);
    return out;
  }
  const bool to_blocked = layout != Layout::plain;
  convert_layout(data(), out.data(), shape_, layout_block(to_blocked ? layout : layout_), to_blocked);
  return out;
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
  DPB_CHECK(!deferred_values()) << "host access to a tensor whose values are not drawn yet (deferred initialisation)";
  return data();
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  DPB_CHECK(ndim() >= 1) << "slice of a 0-d tensor";
  DPB_CHECK(0 <= begin && begin <= end && end <= shape_[0])
      << "slice [" << begin << ", " << end << ") out of range for dim 0 of " << shape_;
  Tensor t = *this;
  const int64_t row = shape_[0] > 0 ? storage_numel() / shape_[0] : 0;
  t.offset_ = offset_ + begin * row;
  t.shape_[0] = end - begin;
  return t;
}

Tensor Tensor::view(const Shape& shape) const {
  DPB_CHECK(layout_ == Layout::plain) << "view " << shape << " of a " << layout_name(layout_)
                                      << " tensor; convert it with to_plain() first";
  DPB_CHECK(shape.numel() == numel()) << "view " << shape << " of a tensor of shape " << shape_
                                      << " (" << numel() << " elements)";
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::clone() const {
  Tensor t = empty_like(*this);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(Device dev) const {
  if (dev == device()) return *this;
  if (const DeferredValues* v = deferred_values()) return deferred(shape_, dev, std::make_shared<const DeferredValues>(*v));
  // Layouts each side can hold: CPU f32 tensors any, CUDA tensors plain or nhwc.
  Layout l = layout_;
  if (dev.is_cpu() && l == Layout::nhwc && dtype_ != DType::f32) l = Layout::plain;
  if (dev.is_cuda() && l != Layout::nhwc) l = Layout::plain;
  Tensor t = empty(shape_, dev, dtype_, l);
  t.copy_from(*this);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  DPB_CHECK(!src.deferred_values() && !deferred_values())
      << "copy of a tensor whose values are not drawn yet (deferred initialisation: init::draw them first)";
  DPB_CHECK(src.numel() == numel() && src.dtype() == dtype_)
      << "copy of " << src.shape() << " " << dtype_name(src.dtype()) << " into " << shape_ << " " << dtype_name(dtype_);
  if (src.layout() != layout_) {
    // Convert where the layout can live: on the source when it can hold the target's
    // layout, else through plain order on the host.
    const bool src_can = src.device().is_cuda() ? (layout_ == Layout::plain || layout_ == Layout::nhwc)
                                                : src.dtype() == DType::f32;
    Tensor converted = src_can ? src.to_layout(layout_) : src.to_plain();
    if (converted.layout() != layout_) {
      converted = converted.to(device());
      if (converted.layout() != layout_) converted = converted.to_layout(layout_);
    }
    copy_bytes(device(), raw(), converted.device(), converted.raw(), nbytes());
    return;
  }
  copy_bytes(device(), raw(), src.device(), src.raw(), nbytes());
}

Tensor Tensor::to_dtype(DType dtype) const {
  if (dtype == dtype_) return *this;
  DPB_CHECK(dtype != DType::i32 && dtype_ != DType::i32)
      << "conversion " << dtype_name(dtype_) << " -> " << dtype_name(dtype) << " (only between F32 and BF16)";
  Tensor out = empty(shape_, device(), dtype, layout_);
  if (device().is_cuda()) {
    device_backend(DeviceKind::cuda)
        .cast(device().index, raw(), dtype_ == DType::bf16, out.raw(), dtype == DType::bf16, storage_numel());
    return out;
  }
  const int64_t n = storage_numel();
  if (dtype == DType::bf16) {
    auto* dst = static_cast<uint16_t*>(out.raw());
    const float* src = data();
    for (int64_t i = 0; i < n; ++i) dst[i] = float_to_bf16(src[i]);
  } else {
    const auto* src = static_cast<const uint16_t*>(raw());
    float* dst = out.data();
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(src[i]);
  }
  return out;
}

std::vector<float> Tensor::to_vector() const {
  DPB_CHECK(!deferred_values()) << "values of a tensor not drawn yet (deferred initialisation: init::draw them first)";
  DPB_CHECK(dtype_ != DType::i32) << "to_vector() of an I32 tensor (use to_labels())";
  if (device().is_cuda() && (layout_ != Layout::plain || dtype_ != DType::f32))
    return to_plain().to_dtype(DType::f32).to_vector();
  if (dtype_ != DType::f32) return to_dtype(DType::f32).to_vector();
  if (layout_ != Layout::plain) return to_plain().to_vector();
  std::vector<float> v(static_cast<size_t>(numel()));
  copy_bytes(Device::cpu(), v.data(), device(), data(), nbytes());
  return v;
}

float Tensor::item() const {
  DPB_CHECK(numel() == 1) << "item() of a tensor with " << numel() << " elements";
  return to_vector()[0];
}

void Tensor::fill(float value) {
  DPB_CHECK(dtype_ != DType::i32) << "fill() of an I32 tensor";
  if (device().is_cuda()) {
    device_backend(DeviceKind::cuda).fill(device().index, raw(), dtype_ == DType::bf16, value, storage_numel());
    return;
  }
  if (dtype_ == DType::bf16) {
    std::fill_n(static_cast<uint16_t*>(raw()), storage_numel(), float_to_bf16(value));
    return;
  }
  std::fill_n(data(), storage_numel(), value);
  zero_padding();
}

}  // namespace dpb
