#include "engine/train/trainer.h"

#include "engine/core/clock.h"
#include "engine/core/rng.h"

namespace dpb {

std::vector<StepRecord> TrainResult::measured() const {
  std::vector<StepRecord> out;
  for (const auto& s : steps)
    if (!s.warmup) out.push_back(s);
  return out;
}

namespace {
LrScheduleOptions schedule_options(const TrainOptions& o) {
  LrScheduleOptions s;
  s.name = o.schedule;
  s.base_lr = o.optim.lr;
  s.total_steps = std::max<int64_t>(1, o.steps + o.warmup);
  s.warmup_steps = o.lr_warmup_steps;
  return s;
}
}  // namespace

Trainer::Trainer(Model& model, const Dataset& data, TrainOptions options)
    : model_(model), data_(data), o_(std::move(options)), schedule_(schedule_options(o_)) {
  DPB_CHECK(o_.batch >= 1) << "batch size must be at least 1, got " << o_.batch;
  DPB_CHECK(o_.steps >= 1) << "steps must be at least 1, got " << o_.steps;
  DPB_CHECK(o_.warmup >= 0) << "warm-up steps must be >= 0, got " << o_.warmup;
  const auto& spec = model.spec();
  DPB_CHECK(data.sample_shape() == spec.input)
      << "dataset '" << data.name() << "' yields samples of shape " << data.sample_shape() << " but model '"
      << spec.name << "' expects " << spec.input;
  DPB_CHECK(data.target_kind() == spec.loss && data.target_width() == spec.outputs)
      << "dataset '" << data.name() << "' has " << loss_name(data.target_kind()) << " targets of width "
      << data.target_width() << " but model '" << spec.name << "' is trained with " << loss_name(spec.loss)
      << " on " << spec.outputs << " outputs";
  model_.to(o_.device);
  model_.train();
  optimizer_ = make_optimizer(o_.optim, model_.parameters());
}

Batch Trainer::next_batch() {
  std::vector<int64_t> idx;
  idx.reserve(static_cast<size_t>(o_.batch));
  while (static_cast<int64_t>(idx.size()) < o_.batch) {
    if (cursor_ == 0 || cursor_ >= static_cast<int64_t>(order_.size())) {
      Generator g(o_.seed + static_cast<uint64_t>(epoch_++));
      order_ = random_permutation(data_.size(), g);
      cursor_ = 0;
    }
    idx.push_back(order_[static_cast<size_t>(cursor_++)]);
  }
  Batch b = make_batch(data_, idx);
  b.x = b.x.to(o_.device);
  b.target = b.target.to(o_.device);
  return b;
}

StepRecord Trainer::step(const Batch& batch, int64_t index) {
  StepRecord r;
  r.step = index;
  r.samples = batch.size();
  r.lr = schedule_.lr_at(index);
  optimizer_->set_lr(r.lr);
  r.begin_ns = now_ns();
  Tensor out = model_.forward(batch.x);
  LossResult loss = compute_loss(model_.spec().loss, out, batch.target, true);
  model_.backward(loss.grad);
  optimizer_->step();
  optimizer_->zero_grad();
  r.end_ns = now_ns();
  r.loss = loss.loss;
  r.correct = loss.correct;
  return r;
}

TrainResult Trainer::run(const std::function<void(const StepRecord&)>& on_step) {
  TrainResult result;
  const int64_t total = o_.warmup + o_.steps;
  for (int64_t i = 0; i < total; ++i) {
    const int64_t t0 = now_ns();
    Batch b = next_batch();
    const int64_t data_ns = now_ns() - t0;
    StepRecord r = step(b, i);
    r.data_ns = data_ns;
    r.warmup = i < o_.warmup;
    result.steps.push_back(r);
    if (on_step) on_step(r);
  }
  return result;
}

}  // namespace dpb
