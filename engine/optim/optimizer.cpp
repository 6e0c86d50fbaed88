#include "engine/optim/optimizer.h"

#include <algorithm>

namespace dpb {

void Optimizer::zero_grad() {
  for (auto* p : params_) p->zero_grad();
}

SGD::SGD(std::vector<Parameter*> params, const ops::SgdHyper& h)
    : Optimizer(std::move(params)), h_(h), buf_(params_.size()), has_buf_(params_.size(), false) {
  DPB_CHECK(h.lr >= 0 && h.momentum >= 0 && h.weight_decay >= 0)
      << "SGD: lr, momentum and weight decay must be non-negative";
  DPB_CHECK(!h.nesterov || (h.momentum > 0 && h.dampening == 0))
      << "SGD: nesterov momentum requires a momentum > 0 and zero dampening";
}

void SGD::step() {
  for (size_t i = 0; i < params_.size(); ++i) {
    Parameter& p = *params_[i];
    if (p.grad_is_zero()) continue;
    if (h_.momentum != 0.0f && !buf_[i].defined()) buf_[i] = Tensor::empty(p.data().shape(), p.data().device());
    ops::sgd_step(p.data(), p.grad(), buf_[i], h_, !has_buf_[i]);
    has_buf_[i] = h_.momentum != 0.0f;
  }
}

std::vector<std::pair<std::string, Tensor*>> SGD::state() {
  std::vector<std::pair<std::string, Tensor*>> s;
  for (size_t i = 0; i < buf_.size(); ++i)
    if (has_buf_[i]) s.emplace_back("momentum_buffer." + std::to_string(i), &buf_[i]);
  return s;
}

Adam::Adam(std::vector<Parameter*> params, const ops::AdamHyper& h)
    : Optimizer(std::move(params)), h_(h), m_(params_.size()), v_(params_.size()), steps_(params_.size(), 0) {
  DPB_CHECK(h.lr >= 0 && h.beta1 >= 0 && h.beta1 < 1 && h.beta2 >= 0 && h.beta2 < 1 && h.eps > 0)
      << "Adam: need lr >= 0, 0 <= beta1, beta2 < 1 and eps > 0";
}

void Adam::step() {
  for (size_t i = 0; i < params_.size(); ++i) {
    Parameter& p = *params_[i];
    if (p.grad_is_zero()) continue;
    if (!m_[i].defined()) {
      m_[i] = Tensor::zeros(p.data().shape(), p.data().device());
      v_[i] = Tensor::zeros(p.data().shape(), p.data().device());
    }
    ops::adam_step(p.data(), p.grad(), m_[i], v_[i], h_, ++steps_[i]);
  }
}

std::vector<std::pair<std::string, Tensor*>> Adam::state() {
  std::vector<std::pair<std::string, Tensor*>> s;
  for (size_t i = 0; i < m_.size(); ++i) {
    if (!m_[i].defined()) continue;
    s.emplace_back("exp_avg." + std::to_string(i), &m_[i]);
    s.emplace_back("exp_avg_sq." + std::to_string(i), &v_[i]);
  }
  return s;
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& o, std::vector<Parameter*> params) {
  if (o.name == "sgd") {
    ops::SgdHyper h;
    h.lr = o.lr;
    h.momentum = o.momentum;
    h.weight_decay = std::max(0.0f, o.weight_decay);
    h.nesterov = o.nesterov;
    return std::make_unique<SGD>(std::move(params), h);
  }
  if (o.name == "adam" || o.name == "adamw") {
    ops::AdamHyper h;
    h.lr = o.lr;
    h.weight_decay = o.weight_decay >= 0 ? o.weight_decay : (o.name == "adamw" ? 0.01f : 0.0f);
    h.decoupled = o.name == "adamw";
    return std::make_unique<Adam>(std::move(params), h);
  }
  DPB_FAIL() << "unknown optimizer '" << o.name << "' (valid: sgd, adam, adamw)";
}

}  // namespace dpb
