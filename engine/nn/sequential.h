#pragma once
// Sequential: named children run in order forward and in reverse backward.
// Every model in the registry is a Sequential, so its top-level children are the
// layers a pipeline split can cut between.
#include <optional>

#include "engine/nn/module.h"

namespace dpb {

class Sequential : public Module {
 public:
  // Called around each layer's forward and backward; fully sharded data parallelism
  // gathers a layer's parameters before it runs and frees them (or reduce-scatters
  // their gradients) after. Not copied by clone_structure().
  class LayerHooks {
   public:
    virtual ~LayerHooks() = default;
    virtual void before_forward(Sequential& seq, size_t layer) = 0;
    virtual void after_forward(Sequential& seq, size_t layer) = 0;
    virtual void before_backward(Sequential& seq, size_t layer) = 0;
    virtual void after_backward(Sequential& seq, size_t layer) = 0;
  };

  Sequential() = default;

  Sequential& add(std::string name, std::unique_ptr<Module> child);
  size_t size() const { return layers_.size(); }
  Module& layer(size_t i) { return *layers_[i]; }
  const std::string& layer_name(size_t i) const { return names_[i]; }
  // Puts `layer` in place of layer i (same name); returns the layer it replaces.
  std::unique_ptr<Module> replace_layer(size_t i, std::unique_ptr<Module> layer);

  // A device boundary (model parallelism, PyTorch's x.to("cuda:1") inside forward):
  // forward moves layer i's input to `device` first, and backward moves the gradient of
  // that input back to the device the input came from.
  void set_input_device(size_t i, Device device);
  // nullptr removes them.
  void set_layer_hooks(LayerHooks* hooks) { hooks_ = hooks; }

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  // The same, holding the output gradient only until the last layer's backward has used
  // it (a model's logits' gradient is freed there, not when the step ends), when the
  // caller hands over its only reference (std::move).
  Tensor backward_consuming(Tensor grad_out);
  std::string type_name() const override { return "Sequential"; }
  int64_t forward_flops(const Shape& input, Shape* output) const override;
  void set_needs_input_grad(bool on) override;
  std::unique_ptr<Module> clone_structure() const override;

 protected:
  void child_replaced(const std::string& name, Module* child) override;

 private:
  bool params_before(size_t k);  // whether a layer before the k-th has parameters
  std::vector<Module*> layers_;
  std::vector<std::string> names_;
  std::vector<std::optional<Device>> input_device_;  // per layer, empty: no boundary
  std::vector<Device> came_from_;                    // per layer: the last forward's input device
  LayerHooks* hooks_ = nullptr;
};

}  // namespace dpb
