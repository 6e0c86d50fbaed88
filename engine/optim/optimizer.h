#pragma once
// Optimizers over Parameters, stepping each on its own device: SGD (momentum,
// dampening, nesterov, weight decay), Adam and AdamW, with PyTorch's update rules.
// A parameter with no gradient since zero_grad() is skipped, as PyTorch skips
// parameters whose .grad is None.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/backend/ops.h"
#include "engine/nn/parameter.h"

namespace dpb {

// One piece of optimizer state for one parameter (PyTorch's state_dict keys:
// momentum_buffer; exp_avg, exp_avg_sq, step).
struct OptimizerState {
  size_t param;  // index into params()
  std::string key;
  Tensor value;
};

class Optimizer {
 public:
  explicit Optimizer(std::vector<Parameter*> params) : params_(std::move(params)) {}
  virtual ~Optimizer() = default;

  virtual void step() = 0;
  virtual std::string name() const = 0;
  virtual float lr() const = 0;
  virtual void set_lr(float lr) = 0;
  // The state that exists (for checkpoints), and restoring it (resume).
  virtual std::vector<OptimizerState> state() const = 0;
  virtual void load_state(const OptimizerState& s) = 0;
  void zero_grad();
  const std::vector<Parameter*>& params() const { return params_; }
  // Which parameters weight decay applies to (default: all), one flag per params() entry:
  // GPT-2 decays its matrices only (Model::weight_decay_mask).
  void set_decay_mask(std::vector<bool> decay);
  bool decays(size_t i) const { return decay_.empty() || decay_[i]; }

 protected:
  std::vector<Parameter*> params_;
  std::vector<bool> decay_;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Parameter*> params, const ops::SgdHyper& h);
  void step() override;
  std::string name() const override { return "sgd"; }
  float lr() const override { return h_.lr; }
  void set_lr(float lr) override { h_.lr = lr; }
  std::vector<OptimizerState> state() const override;
  void load_state(const OptimizerState& s) override;

 private:
  ops::SgdHyper h_;
  std::vector<Tensor> buf_;
  std::vector<bool> has_buf_;
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<Parameter*> params, const ops::AdamHyper& h);
  void step() override;
  std::string name() const override { return h_.decoupled ? "adamw" : "adam"; }
  float lr() const override { return h_.lr; }
  void set_lr(float lr) override { h_.lr = lr; }
  std::vector<OptimizerState> state() const override;
  void load_state(const OptimizerState& s) override;

 private:
  ops::AdamHyper h_;
  std::vector<Tensor> m_, v_;
  std::vector<int64_t> steps_;
};

enum class OptimizerKind { sgd, adam, adamw };
const char* optimizer_name(OptimizerKind k);
// "sgd", "adam", "adamw"; throws dpb::Error naming them otherwise.
OptimizerKind parse_optimizer(std::string_view name);

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::sgd;
  float lr = 0.01f;
  float momentum = 0.9f;
  float weight_decay = -1.0f;  // < 0: the optimizer's default (0; AdamW 0.01 as in PyTorch)
  bool nesterov = false;
};

std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& o, std::vector<Parameter*> params);

// torch.nn.utils.clip_grad_norm_: the global L2 norm of the parameters' gradients
// (those written since zero_grad); when it exceeds max_norm every gradient is scaled by
// max_norm / (norm + 1e-6). Returns the norm before clipping.
double clip_grad_norm(const std::vector<Parameter*>& params, double max_norm);

}  // namespace dpb
