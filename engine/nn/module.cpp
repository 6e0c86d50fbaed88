#include "engine/nn/module.h"

namespace dpb {

Parameter& Module::register_parameter(std::string name, Tensor value) {
  params_.emplace_back(std::move(name), std::make_unique<Parameter>(std::move(value)));
  return *params_.back().second;
}

Tensor& Module::register_buffer(std::string name, Tensor value) {
  buffers_.emplace_back(std::move(name), std::make_unique<Tensor>(std::move(value)));
  return *buffers_.back().second;
}

void Module::collect_parameters(const std::string& prefix, std::vector<std::pair<std::string, Parameter*>>& out) {
  for (auto& [name, p] : params_) out.emplace_back(prefix + name, p.get());
  for (auto& [name, c] : children_) c->collect_parameters(prefix + name + ".", out);
}

void Module::collect_buffers(const std::string& prefix, std::vector<std::pair<std::string, Tensor*>>& out) {
  for (auto& [name, b] : buffers_) out.emplace_back(prefix + name, b.get());
  for (auto& [name, c] : children_) c->collect_buffers(prefix + name + ".", out);
}

std::vector<std::pair<std::string, Parameter*>> Module::named_parameters() {
  std::vector<std::pair<std::string, Parameter*>> out;
  collect_parameters("", out);
  return out;
}

std::vector<Parameter*> Module::parameters() {
  std::vector<Parameter*> out;
  for (auto& [name, p] : named_parameters()) out.push_back(p);
  return out;
}

std::vector<std::pair<std::string, Tensor*>> Module::named_buffers() {
  std::vector<std::pair<std::string, Tensor*>> out;
  collect_buffers("", out);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_children() {
  std::vector<std::pair<std::string, Module*>> out;
  for (auto& [name, c] : children_) out.emplace_back(name, c.get());
  return out;
}

int64_t Module::parameter_count() {
  int64_t n = 0;
  for (auto* p : parameters()) n += p->data().numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, c] : children_) c->train(on);
}

void Module::zero_grad() {
  for (auto* p : parameters()) p->zero_grad();
}

void Module::to(Device device) {
  for (auto& [name, p] : params_) p->to(device);
  for (auto& [name, b] : buffers_) *b = b->to(device);
  for (auto& [name, c] : children_) c->to(device);
}

Device Module::device() {
  auto params = parameters();
  if (!params.empty()) return params.front()->data().device();
  auto buffers = named_buffers();
  if (!buffers.empty()) return buffers.front().second->device();
  return Device::cpu();
}

void Module::copy_state_from(Module& other) {
  auto mine = named_parameters();
  auto theirs = other.named_parameters();
  DPB_CHECK(mine.size() == theirs.size()) << "copy_state_from: " << mine.size() << " parameters vs "
                                          << theirs.size();
  for (size_t i = 0; i < mine.size(); ++i) {
    DPB_CHECK(mine[i].first == theirs[i].first && mine[i].second->data().shape() == theirs[i].second->data().shape())
        << "copy_state_from: parameter " << i << " is " << mine[i].first << " "
        << mine[i].second->data().shape() << " here but " << theirs[i].first << " "
        << theirs[i].second->data().shape() << " in the source";
    mine[i].second->data().copy_from(theirs[i].second->data());
  }
  auto mb = named_buffers();
  auto tb = other.named_buffers();
  DPB_CHECK(mb.size() == tb.size()) << "copy_state_from: " << mb.size() << " buffers vs " << tb.size();
  for (size_t i = 0; i < mb.size(); ++i) mb[i].second->copy_from(*tb[i].second);
  copy_settings_recursively(other);
}

void Module::share_state_with(Module& other) {
  auto mine = named_parameters();
  auto theirs = other.named_parameters();
  DPB_CHECK(mine.size() == theirs.size()) << "share_state_with: " << mine.size() << " parameters vs "
                                          << theirs.size();
  for (size_t i = 0; i < mine.size(); ++i) {
    Parameter& m = *mine[i].second;
    Parameter& t = *theirs[i].second;
    DPB_CHECK(mine[i].first == theirs[i].first && m.data().shape() == t.data().shape())
        << "share_state_with: parameter " << i << " is " << mine[i].first << " " << m.data().shape()
        << " here but " << theirs[i].first << " " << t.data().shape() << " in the source";
    m.data() = t.data();
    if (!t.grad().defined()) t.set_grad(Tensor::zeros(t.data().shape(), t.data().device()));
    m.set_grad(t.grad());
  }
  auto mb = named_buffers();
  auto tb = other.named_buffers();
  DPB_CHECK(mb.size() == tb.size()) << "share_state_with: " << mb.size() << " buffers vs " << tb.size();
  for (size_t i = 0; i < mb.size(); ++i) *mb[i].second = *tb[i].second;
  copy_settings_recursively(other);
}

void Module::copy_settings_recursively(const Module& other) {
  training_ = other.training_;
  copy_settings_from(other);
  DPB_CHECK(children_.size() == other.children_.size()) << "copy_state_from: " << children_.size()
                                                        << " children vs " << other.children_.size();
  for (size_t i = 0; i < children_.size(); ++i) children_[i].second->copy_settings_recursively(*other.children_[i].second);
}

std::unique_ptr<Module> Module::clone() const {
  auto copy = clone_structure();
  copy->copy_state_from(const_cast<Module&>(*this));
  copy->set_needs_input_grad(needs_input_grad_);
  return copy;
}

std::unique_ptr<Module> Module::replicate(Device device) const {
  auto copy = clone_structure();
  copy->to(device);
  copy->copy_state_from(const_cast<Module&>(*this));
  copy->set_needs_input_grad(needs_input_grad_);
  return copy;
}

std::unique_ptr<Module> Module::replace_child(const std::string& name, std::unique_ptr<Module> child) {
  for (auto& [n, c] : children_)
    if (n == name) {
      std::swap(c, child);
      child_replaced(name, c.get());
      return child;
    }
  DPB_FAIL() << type_name() << ": no child named '" << name << "' to replace";
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  for (auto& [name, c] : children_) {
    out.emplace_back(name, c.get());
    for (auto& [sub, m] : c->named_modules()) out.emplace_back(name + "." + sub, m);
  }
  return out;
}

std::unique_ptr<Module> Module::replace_module(const std::string& path, std::unique_ptr<Module> m) {
  // A child's own name may hold dots (a model's layer "transformer.h.0"): the child whose
  // name is the path, else the one with the longest name that is a prefix of it up to a dot.
  Module* via = nullptr;
  size_t via_length = 0;
  for (auto& [name, c] : children_) {
    if (path == name) {
      m->set_needs_input_grad(c->needs_input_grad());
      return replace_child(name, std::move(m));
    }
    if (path.size() > name.size() && name.size() > via_length && path.compare(0, name.size(), name) == 0 &&
        path[name.size()] == '.') {
      via = c.get();
      via_length = name.size();
    }
  }
  DPB_CHECK(via) << type_name() << ": no module at '" << path << "' to replace";
  return via->replace_module(path.substr(via_length + 1), std::move(m));
}

}  // namespace dpb
