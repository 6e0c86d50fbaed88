#pragma once
// TiedLinear: y = x W^T with W another layer's parameter (GPT-2's output head `lm_head`,
// whose weight is the token embedding transformer.wte.weight). It registers no
// parameter of its own, so the weight is saved, reduced and stepped once; its gradient
// gets both layers' contributions (Parameter::set_uses(2) holds the ready hooks until the
// second). A model that owns one re-ties it after every clone (Model::tie_head); a
// pipeline that puts the two layers on different devices ties the head to a copy.
#include "engine/nn/module.h"

namespace dpb {

class TiedLinear : public Module {
 public:
  TiedLinear() = default;

  // Computes with `weight` from now on (the owner sets its Parameter::set_uses).
  void tie(Parameter* weight);
  Parameter* weight() const { return weight_; }

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  std::string type_name() const override { return "TiedLinear"; }
  int64_t forward_flops(const Shape& input, Shape* output) const override;
  std::unique_ptr<Module> clone_structure() const override { return std::make_unique<TiedLinear>(); }

 private:
  Parameter* weight_ = nullptr;  // (out, in), owned by another layer
  int64_t in_ = 0, out_ = 0;
  Tensor x_, w_;
};

}  // namespace dpb
