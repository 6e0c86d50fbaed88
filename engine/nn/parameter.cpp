#include "engine/nn/parameter.h"

namespace dpb {

bool Parameter::begin_grad() {
  if (!grad_.defined() || grad_.shape() != data_.shape() || grad_.device() != data_.device()) {
    grad_ = Tensor::empty(data_.shape(), data_.device());
    grad_is_zero_ = true;
  }
  const bool accumulate = !grad_is_zero_;
  grad_is_zero_ = false;
  return accumulate;
}

void Parameter::set_grad(Tensor g) {
  DPB_CHECK(g.shape() == data_.shape() && g.device() == data_.device() && g.dtype() == data_.dtype())
      << "set_grad: a " << g.shape() << " gradient on " << g.device() << " for a " << data_.shape()
      << " parameter on " << data_.device();
  grad_ = std::move(g);
  grad_is_zero_ = true;
}

void Parameter::mark_grad_ready() {
  if (++marked_ < uses_) return;
  marked_ = 0;
  for (auto& h : hooks_) h(*this);
}

void Parameter::set_uses(int uses) {
  DPB_CHECK(uses >= 1) << "a parameter is used by at least one layer, got " << uses;
  uses_ = uses;
  marked_ = 0;
}

void Parameter::to(Device device) {
  data_ = data_.to(device);
  if (grad_.defined()) grad_ = grad_.to(device);
}

}  // namespace dpb
