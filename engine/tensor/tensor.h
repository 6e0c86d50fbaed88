#pragma once
// Tensor: contiguous storage + shape + dtype + device. Copies of a Tensor share storage
// (like torch.Tensor); slice(begin, end) is a view of rows along dim 0 (a scatter chunk).
// There are no general strided views: everything the engine builds is contiguous.
//
// Layout: the shape is always logical (N, C, H, W); a 4-d CPU activation may be stored
// channel-blocked (nChw8c / nChw16c: C split into blocks of 8/16 innermost), the layout
// oneDNN's direct convolutions run on, so activations stay blocked from one layer to
// the next instead of being reordered around every convolution. When C is not a
// multiple of the block, storage holds C rounded up to the block and the padding
// channels are kept zero (as oneDNN expects). The sample dimension stays outermost,
// so slices along dim 0 remain views. to_vector() always returns logical order.
// A 4-d tensor may also be stored channels-last (nhwc, PyTorch's channels_last): on a
// GPU the layout cuDNN's tensor-core convolutions run on without transposes, on a CPU
// the one oneDNN has optimised kernels for when a channel count fits no block (LeNet's
// 6-channel convolution).
//
// dtype: f32 everywhere; bf16 for activations under --precision=bf16 (parameters stay
// f32: they are the master weights); i32 for labels.
#include <cstring>
#include <memory>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "engine/tensor/allocator.h"
#include "engine/tensor/device.h"
#include "engine/tensor/dtype.h"
#include "engine/tensor/shape.h"

namespace dpb {

// How the values of a tensor not yet materialised are drawn (deferred, "meta-device"
// initialisation: engine/nn/init.h): element i of the tensor in row-major order is the
// i-th draw from `start`.
struct DeferredValues {
  enum class Kind { uniform, normal };
  Kind kind = Kind::uniform;
  float scale = 0;  // U(-scale, scale) or N(0, scale^2)
  Generator start;  // the generator as the tensor's first value was to be drawn
};

class Storage {
 public:
  Storage(Device device, size_t bytes) : device_(device), bytes_(bytes), data_(device_alloc(device, bytes)) {}
  // Host storage in page-locked memory where a GPU is usable.
  struct Pinned {};
  Storage(Pinned, size_t bytes) : device_(Device::cpu(0)), bytes_(bytes), data_(pinned_alloc(bytes, &pinned_)) {}
  // Host memory someone else allocated (a segment shared between processes) for logical
  // CPU device `device`, kept alive by `owner` for as long as the storage is; never freed
  // here.
  Storage(Device device, void* data, size_t bytes, std::shared_ptr<void> owner)
      : device_(device), bytes_(bytes), data_(data), owner_(std::move(owner)) {}
  // Storage with no memory, for values drawn later (refill() allocates it, uninitialised).
  Storage(Device device, size_t bytes, std::shared_ptr<const DeferredValues> values)
      : device_(device), bytes_(bytes), data_(nullptr), deferred_(std::move(values)) {}
  ~Storage() {
    if (owner_) return;
    if (pinned_) pinned_free(data_, bytes_, true);
    else device_free(device_, data_, bytes_);
  }
  bool pinned() const { return pinned_; }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  const Device& device() const { return device_; }

  // Frees the memory while every tensor over it keeps its place (FSDP's reshard: the
  // views a layer saved for its backward hold nothing until refill() allocates the same
  // size again). Only storage this process allocated (not pinned, not external).
  void release();
  void refill();
  bool released() const { return data_ == nullptr; }
  // The values not yet drawn (null for storage that holds its values).
  const DeferredValues* deferred() const { return deferred_.get(); }

 private:
  Device device_;
  size_t bytes_;
  bool pinned_ = false;
  void* data_;
  std::shared_ptr<void> owner_;
  std::shared_ptr<const DeferredValues> deferred_;
};

enum class Layout { plain, nChw8c, nChw16c, nhwc };

inline int layout_block(Layout l) { return l == Layout::nChw8c ? 8 : l == Layout::nChw16c ? 16 : 1; }
const char* layout_name(Layout l);

class Tensor {
 public:
  Tensor() = default;

  static Tensor empty(const Shape& shape, Device device = Device::cpu(), DType dtype = DType::f32,
                      Layout layout = Layout::plain);
  // Uninitialised host tensor in page-locked memory when a GPU is usable (for batches
  // bound for a GPU), in ordinary memory otherwise.
  static Tensor empty_pinned(const Shape& shape, DType dtype = DType::f32);
  bool is_pinned() const { return storage_ && storage_->pinned(); }
  // Uninitialised tensor with the shape, device, dtype and layout of `t`.
  static Tensor empty_like(const Tensor& t);
  static Tensor zeros(const Shape& shape, Device device = Device::cpu());
  static Tensor full(const Shape& shape, float value, Device device = Device::cpu());
  // Host values copied into a new tensor on `device`.
  static Tensor from_vector(const Shape& shape, const std::vector<float>& values, Device device = Device::cpu());
  static Tensor from_labels(const std::vector<int32_t>& labels, Device device = Device::cpu());
  // A plain f32 tensor of logical CPU device `device` over host memory `data` (numel
  // floats) that `owner` keeps alive.
  static Tensor from_external(const Shape& shape, Device device, float* data, std::shared_ptr<void> owner);

  // A plain f32 tensor of `shape` on `device` with no memory: its values are drawn
  // later as `values` says (init::draw).
  static Tensor deferred(const Shape& shape, Device device, std::shared_ptr<const DeferredValues> values);
  // The recipe of a deferred tensor's values; null for a tensor that holds them.
  const DeferredValues* deferred_values() const { return storage_ ? storage_->deferred() : nullptr; }

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return shape_.ndim(); }
  int64_t size(int dim) const { return shape_[dim]; }
  int64_t numel() const { return shape_.numel(); }
  // Elements in storage: numel() plus any channel padding of a blocked layout.
  int64_t storage_numel() const;
  size_t nbytes() const { return static_cast<size_t>(storage_numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  // The same values as `dtype` (shares storage when already of that type).
  Tensor to_dtype(DType dtype) const;
  Layout layout() const { return layout_; }
  bool is_plain() const { return layout_ == Layout::plain; }
  // The same values in `layout` (shares storage when already there, or when the
  // spatial size is 1, where blocked and plain orders coincide).
  Tensor to_layout(Layout layout) const;
  Tensor to_plain() const { return to_layout(Layout::plain); }
  const Device& device() const { return storage_->device(); }

  float* data() const { return static_cast<float*>(storage_->data()) + offset_; }
  int32_t* data_i32() const { return static_cast<int32_t*>(storage_->data()) + offset_; }
  // The first element, whatever the dtype.
  void* raw() const { return static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(dtype_size(dtype_)); }
  // Host access, only on CPU tensors (checked).
  float* host_data() const;

  // Rows [begin, end) along dim 0, sharing storage.
  Tensor slice(int64_t begin, int64_t end) const;
  // Same storage, new shape with the same number of elements (plain tensors only).
  Tensor view(const Shape& shape) const;
  // A new tensor with its own storage and the same contents.
  Tensor clone() const;
  // This tensor's contents on `device` (shares storage when already there).
  Tensor to(Device device) const;
  // Copies src (same numel, any device) into this tensor's storage.
  void copy_from(const Tensor& src);
  // Host copy of the contents.
  std::vector<float> to_vector() const;
  std::vector<int32_t> to_labels() const;
  // Scalar value of a one-element tensor.
  float item() const;

  void fill(float value);
  void zero() { fill(0.0f); }
  bool shares_storage_with(const Tensor& o) const { return storage_ == o.storage_; }
  // Storage::release / refill for this tensor's storage (and so for every view of it).
  void release_storage() const { storage_->release(); }
  void refill_storage() const { storage_->refill(); }
  bool storage_released() const { return storage_ && storage_->released(); }

 private:
  void zero_padding();

  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;  // in elements
  Shape shape_;
  DType dtype_ = DType::f32;
  Layout layout_ = Layout::plain;
};

// Copies between any two devices (host, logical CPU devices, CUDA devices).
void copy_bytes(const Device& dst_dev, void* dst, const Device& src_dev, const void* src, size_t bytes);

}  // namespace dpb
