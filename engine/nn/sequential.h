#pragma once
// Sequential: named children run in order forward and in reverse backward.
// Every model in the registry is a Sequential, so its top-level children are the
// layers a pipeline split can cut between.
#include "engine/nn/module.h"

namespace dpb {

class Sequential : public Module {
 public:
  Sequential() = default;

  Sequential& add(std::string name, std::unique_ptr<Module> child);
  size_t size() const { return layers_.size(); }
  Module& layer(size_t i) { return *layers_[i]; }

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  std::string type_name() const override { return "Sequential"; }
  int64_t forward_flops(const Shape& input, Shape* output) const override;
  void set_needs_input_grad(bool on) override;
  std::unique_ptr<Module> clone_structure() const override;

 private:
  std::vector<Module*> layers_;
  std::vector<std::string> names_;
};

}  // namespace dpb
