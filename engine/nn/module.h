#pragma once
// Module: a layer or a composite of layers with an explicit backward (Caffe/llm.c
// style; there is no general autograd). forward(x) keeps what backward needs;
// backward(dy) returns dx, writes parameter gradients and marks each ready.
//
// Parameters, buffers and children are registered by name, so named_parameters()
// yields PyTorch's module paths ("layer1.0.conv1.weight") for checkpoints and
// weight exchange. clone() copies structure and values; replicate(device) is a
// clone on another device (what DataParallel does each step).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/nn/parameter.h"

namespace dpb {

class Module {
 public:
  virtual ~Module() = default;

  virtual Tensor forward(const Tensor& x) = 0;
  virtual Tensor backward(const Tensor& grad_out) = 0;
  virtual std::string type_name() const = 0;
  // Multiply-accumulates x2 of one forward pass for a single sample of `input` shape
  // (without the batch dim); sets *output to the per-sample output shape.
  virtual int64_t forward_flops(const Shape& input, Shape* output) const = 0;
  // Whether backward reads the values of the parameters it uses (not only their shapes):
  // FSDP frees gathered parameters once no backward still to run reads them.
  virtual bool backward_reads_parameters() const { return true; }

  std::vector<std::pair<std::string, Parameter*>> named_parameters();
  std::vector<Parameter*> parameters();
  std::vector<std::pair<std::string, Tensor*>> named_buffers();
  std::vector<std::pair<std::string, Module*>> named_children();
  // Every module below this one (not itself) with its path ("transformer.h.0.attn"), parents first.
  std::vector<std::pair<std::string, Module*>> named_modules();
  // Puts `m` where the module at `path` (as named_modules() names it) was; returns the
  // one it replaces. Throws dpb::Error naming the path when there is none.
  std::unique_ptr<Module> replace_module(const std::string& path, std::unique_ptr<Module> m);
  int64_t parameter_count();

  // Attention over 1 / ranks of its heads (1: all of them), for tensor parallelism over a
  // column-parallel query/key/value projection; false for a module that has no heads.
  virtual bool split_heads(int ranks) { return false; }
  // Its attention heads (0: none), whole.
  virtual int64_t attention_heads() const { return 0; }

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // When false, backward may skip computing the input gradient (first layer of a model).
  virtual void set_needs_input_grad(bool on) { needs_input_grad_ = on; }
  bool needs_input_grad() const { return needs_input_grad_; }

  void zero_grad();
  void to(Device device);
  Device device();

  // A fresh module with the same configuration and uninitialised values.
  virtual std::unique_ptr<Module> clone_structure() const = 0;
  std::unique_ptr<Module> clone() const;
  std::unique_ptr<Module> replicate(Device device) const;
  // Copies parameter and buffer values, the training mode and the settings that are
  // not constructor arguments (copy_settings_from) from a module of the same structure.
  void copy_state_from(Module& other);
  // Makes this module's parameters, their gradients and its buffers the storage of
  // `other`'s (same structure; no copies) and copies its settings: a second instance of
  // the same layers with its own saved activations (a pipeline's micro-batch copies).
  void share_state_with(Module& other);

 protected:
  // This module's own settings beyond its constructor arguments (e.g. a frozen
  // BatchNorm), copied to clones and replicas; children are handled by the caller.
  virtual void copy_settings_from(const Module& other) {}

  Parameter& register_parameter(std::string name, Tensor value);
  Tensor& register_buffer(std::string name, Tensor value);
  template <typename M>
  M& register_module(std::string name, std::unique_ptr<M> child) {
    M& ref = *child;
    children_.emplace_back(std::move(name), std::move(child));
    return ref;
  }
  // Puts `child` where the child named `name` was (same name and position); returns
  // the one it replaces.
  std::unique_ptr<Module> replace_child(const std::string& name, std::unique_ptr<Module> child);
  // Told after replace_child: a module that keeps pointers to its children updates them.
  virtual void child_replaced(const std::string& name, Module* child) {}
  bool training_ = true;
  bool needs_input_grad_ = true;

 private:
  void copy_settings_recursively(const Module& other);
  void collect_parameters(const std::string& prefix, std::vector<std::pair<std::string, Parameter*>>& out);
  void collect_buffers(const std::string& prefix, std::vector<std::pair<std::string, Tensor*>>& out);

  std::vector<std::pair<std::string, std::unique_ptr<Parameter>>> params_;
  std::vector<std::pair<std::string, std::unique_ptr<Tensor>>> buffers_;
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> children_;
};

}  // namespace dpb
