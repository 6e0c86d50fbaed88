#include "engine/nn/sequential.h"

#include "engine/trace/nvtx.h"

namespace dpb {

// A layer's input needs a gradient when the sequence's input does, or when a layer before
// it has parameters: parameter-free layers at the front (Flatten, a pooling) pass "no
// gradient needed" on, so the first Linear or convolution after them skips its input
// gradient, as autograd does for an input that does not require grad.
Sequential& Sequential::add(std::string name, std::unique_ptr<Module> child) {
  child->set_needs_input_grad(needs_input_grad_ || params_before(layers_.size()));
  names_.push_back(name);
  layers_.push_back(&register_module(std::move(name), std::move(child)));
  return *this;
}

bool Sequential::params_before(size_t k) {
  for (size_t i = 0; i < k; ++i)
    if (!layers_[i]->parameters().empty()) return true;
  return false;
}

void Sequential::set_input_device(size_t i, Device device) {
  DPB_CHECK(i < layers_.size()) << "set_input_device: layer " << i << " of " << layers_.size();
  input_device_.resize(layers_.size());
  came_from_.resize(layers_.size(), Device::cpu());
  input_device_[i] = device;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  const bool ranges = trace::nvtx_enabled();
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (i < input_device_.size() && input_device_[i] && h.device() != *input_device_[i]) {
      came_from_[i] = h.device();
      h = h.to(*input_device_[i]);
    } else if (i < came_from_.size()) {
      came_from_[i] = h.device();
    }
    if (hooks_) hooks_->before_forward(*this, i);
    if (ranges) {
      trace::NvtxRange r(names_[i] + " (" + layers_[i]->type_name() + ")");
      h = layers_[i]->forward(h);
    } else {
      h = layers_[i]->forward(h);
    }
    if (hooks_) hooks_->after_forward(*this, i);
  }
  return h;
}

Tensor Sequential::backward(const Tensor& grad_out) { return backward_consuming(grad_out); }

Tensor Sequential::backward_consuming(Tensor grad_out) {
  Tensor g = std::move(grad_out);
  const bool ranges = trace::nvtx_enabled();
  for (size_t i = layers_.size(); i-- > 0;) {
    if (hooks_) hooks_->before_backward(*this, i);
    if (ranges) {
      trace::NvtxRange r(names_[i] + " (" + layers_[i]->type_name() + ")");
      g = layers_[i]->backward(g);
    } else {
      g = layers_[i]->backward(g);
    }
    if (hooks_) hooks_->after_backward(*this, i);
    if (i < input_device_.size() && input_device_[i] && g.defined() && g.device() != came_from_[i])
      g = g.to(came_from_[i]);
    // No input gradient: the layers before have no parameters and nobody asked for one.
    if (!g.defined()) break;
  }
  return g;
}

int64_t Sequential::forward_flops(const Shape& input, Shape* output) const {
  int64_t total = 0;
  Shape s = input;
  for (const Module* m : layers_) {
    Shape next;
    total += m->forward_flops(s, &next);
    s = next;
  }
  *output = s;
  return total;
}

void Sequential::set_needs_input_grad(bool on) {
  Module::set_needs_input_grad(on);
  for (size_t k = 0; k < layers_.size(); ++k) layers_[k]->set_needs_input_grad(on || params_before(k));
}

std::unique_ptr<Module> Sequential::clone_structure() const {
  auto s = std::make_unique<Sequential>();
  for (size_t i = 0; i < layers_.size(); ++i) s->add(names_[i], layers_[i]->clone_structure());
  return s;
}

std::unique_ptr<Module> Sequential::replace_layer(size_t i, std::unique_ptr<Module> layer) {
  DPB_CHECK(i < layers_.size() && layer) << "Sequential: no layer " << i << " to replace";
  layer->set_needs_input_grad(layers_[i]->needs_input_grad());
  return replace_child(names_[i], std::move(layer));
}

void Sequential::child_replaced(const std::string& name, Module* child) {
  for (size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == name) layers_[i] = child;
}

}  // namespace dpb
