#include "engine/nn/sequential.h"

#include "engine/trace/nvtx.h"

namespace dpb {

Sequential& Sequential::add(std::string name, std::unique_ptr<Module> child) {
  child->set_needs_input_grad(layers_.empty() ? needs_input_grad_ : true);
  names_.push_back(name);
  layers_.push_back(&register_module(std::move(name), std::move(child)));
  return *this;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  const bool ranges = trace::nvtx_enabled();
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (ranges) {
      trace::NvtxRange r(names_[i] + " (" + layers_[i]->type_name() + ")");
      h = layers_[i]->forward(h);
    } else {
      h = layers_[i]->forward(h);
    }
  }
  return h;
}

Tensor Sequential::backward(const Tensor& grad_out) {
  Tensor g = grad_out;
  const bool ranges = trace::nvtx_enabled();
  for (size_t i = layers_.size(); i-- > 0;) {
    if (ranges) {
      trace::NvtxRange r(names_[i] + " (" + layers_[i]->type_name() + ")");
      g = layers_[i]->backward(g);
    } else {
      g = layers_[i]->backward(g);
    }
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
  if (!layers_.empty()) layers_.front()->set_needs_input_grad(on);
}

std::unique_ptr<Module> Sequential::clone_structure() const {
  auto s = std::make_unique<Sequential>();
  for (size_t i = 0; i < layers_.size(); ++i) s->add(names_[i], layers_[i]->clone_structure());
  return s;
}

}  // namespace dpb
