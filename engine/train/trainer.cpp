#include "engine/train/trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "engine/core/clock.h"
#include "engine/core/log.h"
#include "engine/trace/nvtx.h"
#include "engine/trace/timeline.h"

namespace dpb {

namespace {
// Which samples a step read: FNV-1a over its batches' sorted dataset indices. Equal on
// two ranks when they read the same samples, in any order.
uint64_t samples_hash(const std::vector<Batch>& batches) {
  std::vector<int64_t> seen;
  for (const auto& b : batches) seen.insert(seen.end(), b.indices.begin(), b.indices.end());
  std::sort(seen.begin(), seen.end());
  uint64_t h = 1469598103934665603ull;
  for (int64_t i : seen)
    for (int k = 0; k < 8; ++k) h = (h ^ ((static_cast<uint64_t>(i) >> (8 * k)) & 0xff)) * 1099511628211ull;
  return h;
}

}  // namespace

Trainer::~Trainer() = default;

std::vector<StepRecord> TrainResult::measured() const {
  std::vector<StepRecord> out;
  for (const auto& s : steps)
    if (!s.warmup) out.push_back(s);
  return out;
}

Trainer::Trainer(Model& model, const Dataset& train, TrainOptions options, const Dataset* test,
                 const Transform* augment)
    : model_(model),
      train_(train),
      test_(test),
      o_(std::move(options)),
      sampler_(train.size(), shards_data() ? o_.ddp.group->size() : 1, shards_data() ? o_.ddp.group->rank() : 0,
               true, o_.seed) {
  DPB_CHECK(o_.batch >= 1) << "batch size must be at least 1, got " << o_.batch;
  DPB_CHECK(o_.epochs > 0 || o_.steps >= 1) << "steps must be at least 1, got " << o_.steps;
  DPB_CHECK(o_.epochs >= 0 && o_.warmup >= 0) << "epochs and warm-up steps must be >= 0";
  DPB_CHECK(o_.base_batch >= 1) << "base batch must be >= 1, got " << o_.base_batch;
  DPB_CHECK(o_.accum_steps >= 1) << "accumulation steps must be at least 1, got " << o_.accum_steps;
  const auto& spec = model.spec();
  DPB_CHECK(train.sample_shape() == spec.input)
      << "dataset '" << train.name() << "' yields samples of shape " << train.sample_shape() << " but model '"
      << spec.name << "' expects " << spec.input;
  DPB_CHECK(train.target_kind() == spec.loss && train.target_width() == spec.outputs)
      << "dataset '" << train.name() << "' has " << loss_name(train.target_kind()) << " targets of width "
      << train.target_width() << " but model '" << spec.name << "' is trained with " << loss_name(spec.loss)
      << " on " << spec.outputs << " outputs";
  if (multi_device_process(o_.mode)) {
    DPB_CHECK(!o_.devices.empty()) << "--mode=" << parallel_mode_name(o_.mode) << " needs its devices";
    o_.device = o_.devices[0];
  }
  model_.train();
  // Before the strategy: FSDP leaves the model's parameters sharded (no shapes to read).
  const std::vector<bool> decay = model_.weight_decay_mask();
  // Tensor parallelism cuts the model as it is: a checkpoint is loaded into the whole
  // model first (with a whole-model optimizer whose state each rank then cuts).
  std::unique_ptr<Optimizer> resumed;
  if (!o_.resume_path.empty() && (mode_info(o_.mode).splits_layers || o_.tp_group)) {
    resumed = make_optimizer(o_.optim, model_.parameters());
    start_ = load_checkpoint(o_.resume_path, model_, *resumed);
  }
  strategy_ = make_strategy(model_, o_, &unit_costs_);
  DPB_CHECK(o_.accum_steps == 1 || strategy_->accumulates())
      << "gradient accumulation (--accum-steps) is not available in --mode=" << parallel_mode_name(o_.mode)
      << (mode_info(o_.mode).pipelines ? ": use --micro-batches instead" : "");
  // FSDP's optimizer steps on this rank's shards, one per parameter in model order.
  optimizer_ = make_optimizer(o_.optim, strategy_->fsdp() ? strategy_->fsdp()->shard_parameters() : model_.parameters());
  optimizer_->set_decay_mask(strategy_->fsdp() ? strategy_->fsdp()->shard_decay_mask(decay) : decay);
  DPB_CHECK(o_.eval_every >= 0) << "--eval-every must be >= 0, got " << o_.eval_every;
  DPB_CHECK(o_.clip_grad_norm >= 0) << "--clip-grad-norm must be >= 0, got " << o_.clip_grad_norm;

  LoaderOptions lo;
  lo.batch = o_.batch;
  lo.workers = o_.workers;
  lo.prefetch = o_.prefetch;
  lo.device = o_.device;
  lo.seed = o_.seed;
  lo.delay_ms = o_.loader_delay_ms;
  loader_ = std::make_unique<DataLoader>(train_, sampler_, lo, augment);

  if (!resumed) start_.seed = o_.seed;
  const bool sharded_resume = !o_.resume_path.empty() && std::filesystem::is_directory(o_.resume_path);
  DPB_CHECK(!sharded_resume || strategy_->fsdp())
      << "checkpoint '" << o_.resume_path << "' is a sharded one (a directory of one file per rank): it resumes "
      << "--mode=fsdp at the world size that wrote it; save a full checkpoint (--save-format=full) for --mode="
      << parallel_mode_name(o_.mode);
  DPB_CHECK(!o_.save_sharded || o_.save_path.empty() || strategy_->fsdp())
      << "a sharded checkpoint is written by --mode=fsdp; --mode=" << parallel_mode_name(o_.mode)
      << " writes one full checkpoint";
  if (resumed) {
    strategy_->tp()->load_full_optimizer_state(*optimizer_, resumed->state());
  } else if (sharded_resume) {
    start_ = load_sharded_checkpoint(o_.resume_path, model_, *strategy_->fsdp(), *optimizer_);
  } else if (!o_.resume_path.empty() && strategy_->fsdp()) {
    // A full checkpoint (from any mode and world size) into the model, then each rank's chunks.
    FullyShardedDataParallel& f = *strategy_->fsdp();
    f.gather_full_parameters();
    auto full = make_optimizer(o_.optim, model_.parameters());
    start_ = load_checkpoint(o_.resume_path, model_, *full);
    f.shard_from_model();
    f.load_full_optimizer_state(*optimizer_, full->state());
  } else if (!o_.resume_path.empty()) {
    start_ = load_checkpoint(o_.resume_path, model_, *optimizer_);
  }
  if (!o_.resume_path.empty()) {
    DPB_CHECK(start_.seed == o_.seed) << "checkpoint '" << o_.resume_path << "' was trained with --seed="
                                      << start_.seed << "; resume with the same seed (data order depends on it)";
    log::info("resumed from {} at epoch {}, batch {}, step {}", o_.resume_path, start_.epoch, start_.batch,
              start_.global_step);
  }
  // Optimizer steps: an epoch of B batches takes ceil(B / accum_steps).
  const int64_t per_epoch = (loader_->batches_per_epoch() + o_.accum_steps - 1) / o_.accum_steps;
  planned_ = o_.epochs > 0 ? std::max<int64_t>(0, o_.epochs * per_epoch - (start_.epoch * per_epoch +
                                                                           (start_.batch + o_.accum_steps - 1) /
                                                                               o_.accum_steps))
                           : o_.warmup + o_.steps;

  LrScheduleOptions s;
  s.kind = o_.schedule;
  s.base_lr = o_.optim.lr;
  // What one optimizer step sees across every rank: each rank's batches under ddp.
  global_batch_ = o_.batch * o_.accum_steps * (shards_data() ? o_.ddp.group->size() : 1);
  if (o_.lr_scale == LrScaling::linear) {
    s.base_lr = o_.optim.lr * static_cast<float>(global_batch_) / static_cast<float>(o_.base_batch);
    if (o_.lr_warmup_steps == 0) o_.lr_warmup_steps = std::max<int64_t>(1, (start_.global_step + planned_) / 10);
  }
  s.total_steps = std::max<int64_t>(1, start_.global_step + planned_);
  s.warmup_steps = o_.lr_warmup_steps;
  schedule_ = std::make_unique<LrSchedule>(s);
}

EvalLoss Trainer::eval_loss() {
  TensorParallel* tp = strategy_->tp();
  if (!tp) return {};
  return [tp](const Tensor& out, const Tensor& target) { return tp->loss(out, target, false, false); };
}

StepRecord Trainer::step(const std::vector<Batch>& batches, int64_t global_step) {
  DPB_CHECK(!batches.empty()) << "an optimizer step needs at least one batch";
  DPB_CHECK(batches.size() == 1 || strategy_->accumulates())
      << "gradient accumulation is not available in --mode=" << parallel_mode_name(o_.mode);
  StepRecord r;
  r.step = global_step;
  r.lr = schedule_->lr_at(global_step);
  optimizer_->set_lr(r.lr);
  r.begin_ns = now_ns();
  trace::NvtxRange step_range("step");
  std::vector<LossResult> losses;
  std::vector<const Batch*> used;
  for (size_t i = 0; i < batches.size(); ++i) {
    r.samples += batches[i].size();
    BatchContext ctx{global_step, 1.0f / static_cast<float>(batches.size()), i + 1 == batches.size()};
    losses.push_back(strategy_->forward_backward(batches[i], ctx, r));
    used.push_back(&batches[i]);
  }
  {
    trace::NvtxRange range("optimizer");
    trace::Span span("optimizer", trace::Category::optim, o_.device.index);
    if (o_.clip_grad_norm > 0) {
      if (auto* f = strategy_->fsdp()) f->clip_grad_norm(o_.clip_grad_norm);
      else if (auto* t = strategy_->tp()) t->clip_grad_norm(o_.clip_grad_norm);
      else clip_grad_norm(optimizer_->params(), o_.clip_grad_norm);
    }
    optimizer_->step();
    optimizer_->zero_grad();
  }
  // The step ends when its work on the devices has: the losses are read (one wait per
  // step), then the devices are drained.
  double total = 0;
  for (auto& l : losses) {
    l.resolve();
    total += l.loss;
    r.correct += l.correct;
  }
  strategy_->synchronize();
  r.end_ns = now_ns();
  r.loss = total / static_cast<double>(losses.size());
  strategy_->finish_step(used, r);
  return r;
}

std::vector<double> Trainer::time_without_communication(int steps) {
  DistributedDataParallel* ddp = strategy_->ddp();
  DPB_CHECK(ddp && !strategy_->tp()) << "time_without_communication is 1D DDP's A/B (tensor parallelism cannot train "
                                        "without its collectives, and its model is whole again after the run)";
  DPB_CHECK(last_batch_) << "time_without_communication needs a step to have run first";
  std::vector<double> out;
  for (int i = 0; i < steps; ++i) {
    // Every rank starts each pass together, as the all-reduce keeps them together in
    // training (the barrier is outside the timed pass). Without it a rank that finished
    // first waited for the others with its core idle, and their last passes ran beside an
    // idle neighbour: two nodes sharing one 2-vCPU machine timed ResNet-18's passes at 500,
    // 600 and 690 ms in three runs minutes apart, and 542, 568 and 586 ms with the barrier.
    ddp->group().barrier()->wait();
    const int64_t t0 = now_ns();
    // On the timeline as their own spans (after the run's steps), so that a trace shows
    // what the A/B timed beside the steps' forward and backward.
    Tensor y;
    {
      trace::Span span("A/B forward", trace::Category::compute, o_.device.index);
      y = ddp->forward(last_batch_->x);
    }
    LossResult loss = compute_loss(model_.spec().loss, y, last_batch_->target, true, /*deferred=*/true);
    ddp->set_sync(false);
    {
      trace::Span span("A/B backward (no_sync)", trace::Category::compute, o_.device.index);
      ddp->backward(loss.grad);
      loss.resolve();
      ops::synchronize(o_.device);
    }
    out.push_back(static_cast<double>(now_ns() - t0) * 1e-9);
    optimizer_->zero_grad();
  }
  ddp->set_sync(true);
  return out;
}

TrainResult Trainer::run(const std::function<void(const StepRecord&)>& on_step) {
  TrainResult result;
  result.lr = schedule_->options().base_lr;
  Stopwatch wall;
  Progress progress(o_.progress, planned_, o_.batch);
  TrainPosition pos = start_;
  int64_t taken = 0;
  bool epoch_started = false;
  double epoch_loss = 0;
  int64_t epoch_steps = 0;
  Stopwatch epoch_clock;
  auto end_epoch = [&] {
    EpochRecord e;
    e.epoch = pos.epoch;
    e.train_loss = epoch_steps > 0 ? epoch_loss / static_cast<double>(epoch_steps) : 0.0;
    if (test_ && o_.eval_each_epoch && o_.epochs > 0) {
      e.test = evaluate(model_, *test_, o_.eval_batch, o_.device, eval_loss());
      result.test = e.test;
    }
    e.seconds = epoch_clock.elapsed_s();
    progress.note(e.test ? fmt::format("epoch {}: train loss {:.4f}, test loss {:.4f}, test accuracy {:.2f}% ({:.1f} s)",
                                       e.epoch + 1, e.train_loss, e.test->loss, 100 * e.test->accuracy, e.seconds)
                         : fmt::format("epoch {}: train loss {:.4f} ({:.1f} s)", e.epoch + 1, e.train_loss, e.seconds));
    result.epochs.push_back(e);
  };
  while (taken < planned_) {
    if (!epoch_started) {
      loader_->start_epoch(pos.epoch, pos.batch);
      epoch_started = true;
      epoch_loss = 0;
      epoch_steps = 0;
      epoch_clock.reset();
    }
    int64_t waited = 0;
    std::vector<Batch> batches;
    while (static_cast<int>(batches.size()) < o_.accum_steps) {
      const int64_t t0 = now_ns();
      std::optional<Batch> b = loader_->next();
      waited += now_ns() - t0;
      if (!b) break;
      batches.push_back(std::move(*b));
    }
    if (batches.empty()) {
      end_epoch();
      ++pos.epoch;
      pos.batch = 0;
      epoch_started = false;
      continue;
    }
    StepRecord r = step(batches, pos.global_step);
    // The A/B re-times a full batch: an epoch's short last batch would time less work
    // than the steps it is compared with.
    if (mode_info(o_.mode).all_reduces_gradients && (batches.back().size() == o_.batch || !last_batch_))
      last_batch_ = batches.back();
    r.data_hash = samples_hash(batches);
    r.data_ns = waited;
    if (waited > 0)
      trace::timeline().record({"data wait", trace::Category::data, o_.device.index, "main", r.begin_ns - waited,
                                r.begin_ns, {{"step", r.step}}});
    r.epoch = pos.epoch;
    r.warmup = taken < o_.warmup;
    ++pos.global_step;
    pos.batch += static_cast<int64_t>(batches.size());
    ++taken;
    epoch_loss += r.loss;
    ++epoch_steps;
    result.steps.push_back(r);
    if (test_ && o_.eval_every > 0 && pos.global_step % o_.eval_every == 0) {
      StepEval e{pos.global_step, evaluate(model_, *test_, o_.eval_batch, o_.device, eval_loss())};
      progress.note(fmt::format("step {}: test loss {:.4f}, test accuracy {:.2f}%", e.step, e.test.loss,
                                100 * e.test.accuracy));
      result.test = e.test;
      result.evals.push_back(std::move(e));
    }
    progress.update(taken, r.loss);
    if (on_step) on_step(r);
  }
  // A run that ends exactly at an epoch boundary closes that epoch.
  if (epoch_started && pos.batch == loader_->batches_per_epoch()) {
    end_epoch();
    ++pos.epoch;
    pos.batch = 0;
  }
  progress.finish();
  if (test_ && !result.test) result.test = evaluate(model_, *test_, o_.eval_batch, o_.device, eval_loss());
  result.end = pos;
  // FSDP: the model gets its full parameters back and the optimizer state is gathered
  // (every rank takes part, as for a full state dict).
  std::vector<OptimizerState> full_state;
  const bool save_full = !o_.save_path.empty() && !o_.save_sharded;
  const bool full = o_.full_model_after_run || save_full;
  if (auto* f = strategy_->fsdp(); f && !o_.save_path.empty() && o_.save_sharded) {
    // Each rank writes its own shards, before anything is gathered.
    save_sharded_checkpoint(o_.save_path, model_, *f, *optimizer_, pos);
    if (f->group().rank() == 0)
      log::info("sharded checkpoint written to {} by {} rank(s) (epoch {}, batch {}, step {})", o_.save_path,
                f->group().size(), pos.epoch, pos.batch, pos.global_step);
  }
  if (auto* f = strategy_->fsdp(); f && full) {
    f->gather_full_parameters();
    if (save_full) full_state = f->full_optimizer_state(*optimizer_);
  }
  if (auto* t = strategy_->tp(); t && full) {
    if (save_full) full_state = t->full_optimizer_state(*optimizer_);
    t->gather_full_parameters();
  }
  const bool writer = (!o_.ddp.group || o_.ddp.group->rank() == 0) && (!o_.tp_group || o_.tp_group->rank() == 0);
  if (save_full && writer) {
    if (strategy_->fsdp() || strategy_->tp()) save_checkpoint(o_.save_path, model_, optimizer_->name(), full_state, pos);
    else save_checkpoint(o_.save_path, model_, *optimizer_, pos);
    log::info("checkpoint written to {} (epoch {}, batch {}, step {})", o_.save_path, pos.epoch, pos.batch,
              pos.global_step);
  }
  result.wall_seconds = wall.elapsed_s();
  return result;
}

}  // namespace dpb
