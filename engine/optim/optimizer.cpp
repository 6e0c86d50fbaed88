#include "engine/optim/optimizer.h"

#include "engine/core/text.h"

#include <algorithm>
#include <cmath>

namespace dpb {

void Optimizer::zero_grad() {
  for (auto* p : params_) p->zero_grad();
}

void Optimizer::set_decay_mask(std::vector<bool> decay) {
  DPB_CHECK(decay.size() == params_.size()) << name() << ": a weight-decay mask of " << decay.size()
                                            << " flags for " << params_.size() << " parameters";
  decay_ = std::move(decay);
}

double clip_grad_norm(const std::vector<Parameter*>& params, double max_norm) {
  DPB_CHECK(max_norm > 0) << "gradient clipping needs a positive norm, got " << max_norm;
  double sq = 0;
  for (const Parameter* p : params)
    if (!p->grad_is_zero()) sq += ops::sum_squares(p->grad());
  const double norm = std::sqrt(sq);
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0) {
    for (Parameter* p : params)
      if (!p->grad_is_zero()) ops::scale(p->grad(), static_cast<float>(coef));
  }
  return norm;
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
    ops::SgdHyper h = h_;
    if (!decays(i)) h.weight_decay = 0.0f;
    ops::sgd_step(p.data(), p.grad(), buf_[i], h, !has_buf_[i]);
    has_buf_[i] = h_.momentum != 0.0f;
  }
}

namespace {
void check_state(const Optimizer& o, const OptimizerState& s, const Shape& expected) {
  DPB_CHECK(s.param < o.params().size()) << o.name() << " state for parameter " << s.param << " of "
                                         << o.params().size();
  DPB_CHECK(s.value.shape() == expected) << o.name() << " state '" << s.key << "' of parameter " << s.param
                                         << " has shape " << s.value.shape() << ", expected " << expected;
}
}  // namespace

std::vector<OptimizerState> SGD::state() const {
  std::vector<OptimizerState> s;
  for (size_t i = 0; i < buf_.size(); ++i)
    if (has_buf_[i]) s.push_back({i, "momentum_buffer", buf_[i]});
  return s;
}

void SGD::load_state(const OptimizerState& s) {
  DPB_CHECK(s.key == "momentum_buffer") << "sgd has no state '" << s.key << "' (valid: momentum_buffer)";
  check_state(*this, s, params_[s.param]->data().shape());
  buf_[s.param] = s.value.to(params_[s.param]->data().device()).clone();
  has_buf_[s.param] = true;
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
    ops::AdamHyper h = h_;
    if (!decays(i)) h.weight_decay = 0.0f;
    ops::adam_step(p.data(), p.grad(), m_[i], v_[i], h, ++steps_[i]);
  }
}

std::vector<OptimizerState> Adam::state() const {
  std::vector<OptimizerState> s;
  for (size_t i = 0; i < m_.size(); ++i) {
    if (!m_[i].defined()) continue;
    s.push_back({i, "exp_avg", m_[i]});
    s.push_back({i, "exp_avg_sq", v_[i]});
    s.push_back({i, "step", Tensor::full({}, static_cast<float>(steps_[i]))});
  }
  return s;
}

void Adam::load_state(const OptimizerState& s) {
  const Tensor& p = params_.at(s.param)->data();
  if (s.key == "step") {
    check_state(*this, s, Shape{});
    steps_[s.param] = static_cast<int64_t>(s.value.item());
    return;
  }
  DPB_CHECK(s.key == "exp_avg" || s.key == "exp_avg_sq")
      << name() << " has no state '" << s.key << "' (valid: exp_avg, exp_avg_sq, step)";
  check_state(*this, s, p.shape());
  Tensor& slot = s.key == "exp_avg" ? m_[s.param] : v_[s.param];
  slot = s.value.to(p.device()).clone();
  // A moment loaded without its partner starts the other at zero.
  Tensor& other = s.key == "exp_avg" ? v_[s.param] : m_[s.param];
  if (!other.defined()) other = Tensor::zeros(p.shape(), p.device());
}

const char* optimizer_name(OptimizerKind k) {
  switch (k) {
    case OptimizerKind::sgd:
      return "sgd";
    case OptimizerKind::adam:
      return "adam";
    case OptimizerKind::adamw:
      return "adamw";
  }
  return "?";
}

OptimizerKind parse_optimizer(std::string_view name) {
  if (name == "sgd") return OptimizerKind::sgd;
  if (name == "adam") return OptimizerKind::adam;
  if (name == "adamw") return OptimizerKind::adamw;
  DPB_FAIL() << "unknown optimizer '" << escape_untrusted(name) << "' (valid: sgd, adam, adamw)";
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& o, std::vector<Parameter*> params) {
  if (o.kind == OptimizerKind::sgd) {
    ops::SgdHyper h;
    h.lr = o.lr;
    h.momentum = o.momentum;
    h.weight_decay = std::max(0.0f, o.weight_decay);
    h.nesterov = o.nesterov;
    return std::make_unique<SGD>(std::move(params), h);
  }
  ops::AdamHyper h;
  h.lr = o.lr;
  h.weight_decay = o.weight_decay >= 0 ? o.weight_decay : (o.kind == OptimizerKind::adamw ? 0.01f : 0.0f);
  h.decoupled = o.kind == OptimizerKind::adamw;
  return std::make_unique<Adam>(std::move(params), h);
}

}  // namespace dpb
