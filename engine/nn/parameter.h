#pragma once
// Parameter: a trainable tensor, its gradient, and the grad-ready hooks.
//
// Gradients accumulate (as in PyTorch) until zero_grad(); a backward asks
// begin_grad() whether to overwrite (first contribution since zero_grad) or add.
// A layer calls mark_grad_ready() as soon as a parameter's gradient for this
// backward is complete; DDP's reducer registers hooks here to launch bucket
// all-reduces while the rest of backward still runs.
#include <functional>
#include <string>
#include <vector>

#include "engine/tensor/tensor.h"

namespace dpb {

class Parameter {
 public:
  using Hook = std::function<void(Parameter&)>;

  explicit Parameter(Tensor data) : data_(std::move(data)) {}

  Tensor& data() { return data_; }
  const Tensor& data() const { return data_; }
  Tensor& grad() { return grad_; }
  const Tensor& grad() const { return grad_; }

  // Allocates the gradient if needed; returns true when this backward must add to it.
  bool begin_grad();
  void zero_grad() {
    grad_is_zero_ = true;
    marked_ = 0;
  }
  // Makes `g` (same shape and device) the gradient's storage, e.g. a view into DDP's
  // flat bucket; its values count as zero until the next backward writes them.
  void set_grad(Tensor g);
  // The gradient was written by work that did not go through begin_grad() (a replayed
  // CUDA graph of a backward that overwrote it).
  void note_grad_written() { grad_is_zero_ = false; }
  // True when no gradient was written since zero_grad() (the grad tensor holds stale values).
  bool grad_is_zero() const { return grad_is_zero_; }

  void add_grad_ready_hook(Hook hook) { hooks_.push_back(std::move(hook)); }
  void clear_grad_ready_hooks() { hooks_.clear(); }
  void mark_grad_ready();
  // A parameter that `uses` layers share (tied weights: GPT-2's token embedding and its
  // output head) is complete only when each use's backward has added to it: the hooks
  // fire on the last of every `uses` calls of mark_grad_ready.
  void set_uses(int uses);

  // Moves data (and the gradient, if any) to another device.
  void to(Device device);

 private:
  Tensor data_;
  Tensor grad_;
  bool grad_is_zero_ = true;
  int uses_ = 1;
  int marked_ = 0;
  std::vector<Hook> hooks_;
};

}  // namespace dpb
