#include "engine/train/trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "engine/core/clock.h"
#include "engine/core/log.h"
#include "engine/nn/batchnorm2d.h"
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

// `t` stacked `times` times along dim 0.
Tensor repeat_rows(const Tensor& t, int64_t times) {
  std::vector<int64_t> dims = t.shape().dims();
  dims[0] *= times;
  Tensor out = Tensor::empty(Shape(dims), t.device(), t.dtype());
  for (int64_t i = 0; i < times; ++i) out.slice(i * t.size(0), (i + 1) * t.size(0)).copy_from(t);
  return out;
}
}  // namespace

// The captured step: static inputs the graph reads, and the loss totals it leaves.
struct Trainer::GraphStep {
  explicit GraphStep(Device d) : graph(d) {}
  DeviceGraph graph;
  Tensor x, target;  // inputs at fixed addresses, filled before each replay
  LossResult loss;   // its `pending` totals are written by each replay
};

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
      sampler_(train.size(), o_.group && o_.distributed_sampler ? o_.group->size() : 1,
               o_.group && o_.distributed_sampler ? o_.group->rank() : 0, true, o_.seed) {
  DPB_CHECK(o_.batch >= 1) << "batch size must be at least 1, got " << o_.batch;
  DPB_CHECK(o_.epochs > 0 || o_.steps >= 1) << "steps must be at least 1, got " << o_.steps;
  DPB_CHECK(o_.epochs >= 0 && o_.warmup >= 0) << "epochs and warm-up steps must be >= 0";
  DPB_CHECK(o_.lr_scale == "none" || o_.lr_scale == "linear")
      << "unknown lr scaling '" << o_.lr_scale << "' (valid: none, linear)";
  DPB_CHECK(o_.base_batch >= 1) << "base batch must be >= 1, got " << o_.base_batch;
  const auto& spec = model.spec();
  DPB_CHECK(train.sample_shape() == spec.input)
      << "dataset '" << train.name() << "' yields samples of shape " << train.sample_shape() << " but model '"
      << spec.name << "' expects " << spec.input;
  DPB_CHECK(train.target_kind() == spec.loss && train.target_width() == spec.outputs)
      << "dataset '" << train.name() << "' has " << loss_name(train.target_kind()) << " targets of width "
      << train.target_width() << " but model '" << spec.name << "' is trained with " << loss_name(spec.loss)
      << " on " << spec.outputs << " outputs";
  if (o_.dp_devices.size() > 1) {
    o_.device = o_.dp_devices[0];
    dp_ = std::make_unique<DataParallel>(model_, o_.dp_devices);
  }
  const bool mp = o_.mp_devices.size() > 1;
  if (mp) {
    DPB_CHECK(!dp_ && !o_.group) << "model parallelism does not combine with DataParallel or DDP here";
    DPB_CHECK(o_.accum_steps == 1) << "gradient accumulation with model parallelism: use --micro-batches instead";
    o_.device = o_.mp_devices[0];
  }
  DPB_CHECK(o_.accum_steps >= 1) << "accumulation steps must be at least 1, got " << o_.accum_steps;
  DPB_CHECK(!(o_.group && dp_)) << "DDP and DataParallel do not combine; use one or the other";
  if (o_.cuda_graph) {
    DPB_CHECK(o_.device.is_cuda() && !dp_ && !o_.group && o_.accum_steps == 1)
        << "CUDA graphs need one CUDA device in single mode without accumulation (--devices=cuda, --mode=single)";
    DPB_CHECK(spec.loss == LossKind::cross_entropy)
        << "CUDA graphs need a model trained with cross-entropy (its loss stays on the device); '" << spec.name
        << "' is trained with " << loss_name(spec.loss);
  }
  model_.to(o_.device);
  model_.train();
  if (mp) {
    PipelineOptions po;
    po.devices = o_.mp_devices;
    po.schedule = o_.mp_schedule;
    po.micro_batches = o_.micro_batches;
    const auto units = pipeline_units(model_);
    const int stages = static_cast<int>(po.devices.size());
    DPB_CHECK(static_cast<int>(units.size()) >= stages)
        << "model '" << spec.name << "' has " << units.size() << " layers to cut, too few for " << stages
        << " stages";
    if (o_.mp_split.empty()) {
      // Balanced by measured time: every unit's forward + backward on a micro-batch of
      // random inputs, on the first device.
      const int64_t micro = (o_.batch + o_.micro_batches - 1) / o_.micro_batches;
      std::vector<int64_t> dims{micro};
      for (auto d : spec.input.dims()) dims.push_back(d);
      Generator g(o_.seed + 1);
      std::vector<float> v(static_cast<size_t>(Shape(dims).numel()));
      for (auto& e : v) e = static_cast<float>(g.normal());
      unit_costs_ = measure_unit_costs(model_, Tensor::from_vector(Shape(dims), v, o_.device));
      po.split = balanced_split(unit_costs_, stages);
    } else {
      po.split = parse_split(o_.mp_split, units, stages);
    }
    pp_ = std::make_unique<PipelineParallel>(model_, po);
  }
  if (o_.group && o_.sync_bn) convert_sync_batchnorm(model_, o_.group);
  if (o_.group) ddp_ = std::make_unique<DistributedDataParallel>(model_, *o_.group, o_.ddp);
  optimizer_ = make_optimizer(o_.optim, model_.parameters());

  LoaderOptions lo;
  lo.batch = o_.batch;
  lo.workers = o_.workers;
  lo.prefetch = o_.prefetch;
  lo.device = o_.device;
  lo.seed = o_.seed;
  lo.delay_ms = o_.loader_delay_ms;
  loader_ = std::make_unique<DataLoader>(train_, sampler_, lo, augment);

  start_.seed = o_.seed;
  if (!o_.resume_path.empty()) {
    start_ = load_checkpoint(o_.resume_path, model_, *optimizer_);
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
  s.name = o_.schedule;
  s.base_lr = o_.optim.lr;
  const int64_t global_batch = o_.global_batch > 0 ? o_.global_batch : o_.batch;
  if (o_.lr_scale == "linear") {
    s.base_lr = o_.optim.lr * static_cast<float>(global_batch) / static_cast<float>(o_.base_batch);
    if (o_.lr_warmup_steps == 0) o_.lr_warmup_steps = std::max<int64_t>(1, (start_.global_step + planned_) / 10);
  }
  s.total_steps = std::max<int64_t>(1, start_.global_step + planned_);
  s.warmup_steps = o_.lr_warmup_steps;
  schedule_ = std::make_unique<LrSchedule>(s);
}

// Captures forward + loss + backward on the third full-size batch, replays it from then
// on. Returns false when this batch runs eagerly (warming up, or a smaller last batch).
bool Trainer::graph_step(const Batch& batch, StepRecord& r) {
  if (!graph_) {
    if (eager_steps_ < 2 || batch.size() != o_.batch) return false;
    // Two eager steps have found the convolution algorithms and allocated gradients,
    // optimizer state and workspaces at their final sizes.
    graph_ = std::make_unique<GraphStep>(o_.device);
    graph_->x = Tensor::empty_like(batch.x);
    graph_->target = Tensor::empty_like(batch.target);
    graph_->x.copy_from(batch.x);
    graph_->target.copy_from(batch.target);
    graph_->graph.begin_capture();
    try {
      Tensor out = model_.forward(graph_->x);
      graph_->loss = compute_loss(model_.spec().loss, out, graph_->target, true, /*deferred=*/true);
      model_.backward(graph_->loss.grad);
    } catch (...) {
      graph_.reset();
      throw;
    }
    graph_->graph.end_capture();
    log::info("captured the training step as a CUDA graph (batch {})", o_.batch);
  } else if (batch.size() != o_.batch) {
    return false;
  } else {
    graph_->x.copy_from(batch.x);
    graph_->target.copy_from(batch.target);
  }
  {
    trace::NvtxRange range("forward+backward (graph)");
    graph_->graph.replay();
  }
  for (Parameter* p : model_.parameters()) p->note_grad_written();
  {
    trace::NvtxRange range("optimizer");
    optimizer_->step();
    optimizer_->zero_grad();
  }
  LossResult loss = graph_->loss;  // the same totals tensor, rewritten by this replay
  loss.resolve();
  ops::synchronize(o_.device);
  r.end_ns = now_ns();
  r.loss = loss.loss;
  r.correct = loss.correct;
  r.device_busy_ns = {r.end_ns - r.begin_ns};
  r.device_samples = {batch.size()};
  return true;
}

StepRecord Trainer::step(const std::vector<Batch>& batches, int64_t global_step) {
  DPB_CHECK(!batches.empty()) << "an optimizer step needs at least one batch";
  if (batches.size() == 1 && !ddp_) return step(batches.front(), global_step);
  DPB_CHECK(!dp_) << "gradient accumulation with DataParallel is not supported";
  StepRecord r;
  r.step = global_step;
  r.lr = schedule_->lr_at(global_step);
  optimizer_->set_lr(r.lr);
  r.begin_ns = now_ns();
  trace::NvtxRange step_range("step");
  const float scale = 1.0f / static_cast<float>(batches.size());
  std::vector<LossResult> losses;
  for (size_t i = 0; i < batches.size(); ++i) {
    const Batch& b = batches[i];
    r.samples += b.size();
    Tensor out;
    const int dev = o_.device.index;
    {
      trace::NvtxRange range("forward");
      trace::Span span("forward", trace::Category::compute, dev);
      if (o_.straggle_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(o_.straggle_ms));
      out = ddp_ ? ddp_->forward(b.x) : model_.forward(b.x);
    }
    LossResult loss;
    {
      trace::NvtxRange range("loss");
      trace::Span span("loss", trace::Category::compute, dev);
      loss = compute_loss(model_.spec().loss, out, b.target, true, /*deferred=*/true);
      if (batches.size() > 1) ops::scale(loss.grad, scale);
    }
    {
      trace::NvtxRange range("backward");
      if (ddp_) {
        // The module's backward is compute; what DDP then waits for (the last buckets'
        // all-reduces) is communication.
        ddp_->set_sync(i + 1 == batches.size());
        ddp_->backward(loss.grad);
        const int64_t done = now_ns();
        trace::timeline().record({"backward", trace::Category::compute, dev, "main", ddp_->backward_begin_ns(),
                                  ddp_->backward_end_ns(), {}});
        if (done > ddp_->backward_end_ns())
          trace::timeline().record({"wait for all-reduce", trace::Category::comm, dev, "main", ddp_->backward_end_ns(),
                                    done, {}});
      } else {
        trace::Span span("backward", trace::Category::compute, dev);
        model_.backward(loss.grad);
      }
    }
    losses.push_back(std::move(loss));
  }
  {
    trace::NvtxRange range("optimizer");
    trace::Span span("optimizer", trace::Category::optim, o_.device.index);
    optimizer_->step();
    optimizer_->zero_grad();
  }
  double total = 0;
  for (auto& l : losses) {
    l.resolve();
    total += l.loss;
    r.correct += l.correct;
  }
  ops::synchronize(o_.device);
  r.end_ns = now_ns();
  r.loss = total / static_cast<double>(losses.size());
  r.device_busy_ns = {r.end_ns - r.begin_ns};
  r.device_samples = {r.samples};
  if (ddp_) {
    r.backward_begin_ns = ddp_->backward_begin_ns();
    r.backward_end_ns = ddp_->backward_end_ns();
    r.buckets = ddp_->reducer().records();
    // Each bucket's all-reduce: when it ran (or, where the backend cannot tell, from its
    // launch until finalize saw it done).
    for (const auto& b : r.buckets) {
      const bool ran = b.comm_start_ns > 0 && b.comm_end_ns >= b.comm_start_ns;
      if (!ran && b.launch_ns == 0) continue;
      trace::timeline().record({"all-reduce bucket " + std::to_string(b.index), trace::Category::comm,
                                o_.device.index, "comm", ran ? b.comm_start_ns : b.launch_ns,
                                ran ? b.comm_end_ns : b.done_ns,
                                {{"bucket", b.index}, {"bytes", b.bytes}, {"params", b.params}}});
    }
  }
  return r;
}

StepRecord Trainer::step(const Batch& batch, int64_t global_step) {
  if (ddp_) return step(std::vector<Batch>{batch}, global_step);
  if (pp_) return pipeline_step(batch, global_step);
  StepRecord r;
  r.step = global_step;
  r.samples = batch.size();
  r.lr = schedule_->lr_at(global_step);
  optimizer_->set_lr(r.lr);
  const bool scatter = dp_ && !o_.dp_bypass;
  const std::vector<int64_t> busy_before = dp_ ? dp_->stats().busy_ns : std::vector<int64_t>{};
  r.begin_ns = now_ns();
  trace::NvtxRange step_range("step");
  if (o_.cuda_graph) {
    if (graph_step(batch, r)) {
      // One replay: forward, loss, backward and the optimizer as one interval.
      trace::timeline().record({"step (CUDA graph replay)", trace::Category::compute, o_.device.index, "main",
                                r.begin_ns, r.end_ns, {}});
      return r;
    }
    ++eager_steps_;
  }
  Tensor out, target = batch.target;
  {
    trace::NvtxRange range("forward");
    // DataParallel records its replicas' work on their devices; the rest runs here.
    std::optional<trace::Span> span;
    if (!scatter) span.emplace("forward", trace::Category::compute, o_.device.index);
    if (scatter && o_.dp_replicate_input) {
      out = dp_->forward_replicated(batch.x);
      target = repeat_rows(batch.target, static_cast<int64_t>(o_.dp_devices.size()));
    } else {
      out = scatter ? dp_->forward(batch.x) : model_.forward(batch.x);
    }
  }
  LossResult loss;
  {
    trace::NvtxRange range("loss");
    trace::Span span("loss", trace::Category::compute, o_.device.index);
    loss = compute_loss(model_.spec().loss, out, target, true, /*deferred=*/true);
  }
  {
    trace::NvtxRange range("backward");
    if (scatter) {
      dp_->backward(loss.grad);
    } else {
      trace::Span span("backward", trace::Category::compute, o_.device.index);
      model_.backward(loss.grad);
    }
  }
  {
    trace::NvtxRange range("optimizer");
    trace::Span span("optimizer", trace::Category::optim, o_.device.index);
    optimizer_->step();
    optimizer_->zero_grad();
  }
  // The step ends when its work on the device has: the loss is read (one wait per step),
  // then the device is drained.
  loss.resolve();
  ops::synchronize(o_.device);
  r.end_ns = now_ns();
  if (scatter) {
    // Replicas' compute, plus the primary's own work outside them (gather, loss,
    // reduction, optimizer) which the primary device does too.
    const auto& busy = dp_->stats().busy_ns;
    int64_t replicas_primary = busy[0] - busy_before[0];
    r.device_busy_ns.resize(busy.size());
    for (size_t d = 0; d < busy.size(); ++d) r.device_busy_ns[d] = busy[d] - busy_before[d];
    int64_t longest = 0;
    for (auto b : r.device_busy_ns) longest = std::max(longest, b);
    r.device_busy_ns[0] = replicas_primary + std::max<int64_t>(0, (r.end_ns - r.begin_ns) - longest);
    r.device_samples.assign(busy.size(), 0);
    const auto& chunks = dp_->stats().last_chunks;
    for (size_t d = 0; d < chunks.size(); ++d) r.device_samples[d] = chunks[d];
  } else {
    r.device_busy_ns.assign(dp_ ? o_.dp_devices.size() : 1, 0);
    r.device_busy_ns[0] = r.end_ns - r.begin_ns;
    r.device_samples.assign(r.device_busy_ns.size(), 0);
    r.device_samples[0] = batch.size();
  }
  r.loss = loss.loss;
  r.correct = loss.correct;
  return r;
}

StepRecord Trainer::pipeline_step(const Batch& batch, int64_t global_step) {
  StepRecord r;
  r.step = global_step;
  r.samples = batch.size();
  r.lr = schedule_->lr_at(global_step);
  optimizer_->set_lr(r.lr);
  r.begin_ns = now_ns();
  trace::NvtxRange step_range("step");
  LossResult loss = pp_->train_step(batch.x, batch.target);
  {
    trace::NvtxRange range("optimizer");
    trace::Span span("optimizer", trace::Category::optim, o_.device.index);
    optimizer_->step();
    optimizer_->zero_grad();
  }
  for (const auto& d : o_.mp_devices) ops::synchronize(d);
  r.end_ns = now_ns();
  r.pipeline = pp_->last_step();
  r.device_busy_ns = r.pipeline.stage_busy_ns;
  // Every stage handles every sample (each its own layers of it).
  r.device_samples.assign(o_.mp_devices.size(), batch.size());
  r.loss = loss.loss;
  r.correct = loss.correct;
  return r;
}

std::vector<double> Trainer::time_without_communication(int steps) {
  DPB_CHECK(ddp_) << "time_without_communication is DDP's A/B";
  DPB_CHECK(last_batch_) << "time_without_communication needs a step to have run first";
  std::vector<double> out;
  for (int i = 0; i < steps; ++i) {
    const int64_t t0 = now_ns();
    Tensor y = ddp_->forward(last_batch_->x);
    LossResult loss = compute_loss(model_.spec().loss, y, last_batch_->target, true, /*deferred=*/true);
    ddp_->set_sync(false);
    ddp_->backward(loss.grad);
    loss.resolve();
    ops::synchronize(o_.device);
    out.push_back(static_cast<double>(now_ns() - t0) * 1e-9);
    optimizer_->zero_grad();
  }
  ddp_->set_sync(true);
  return out;
}

std::vector<Device> Trainer::devices() const {
  if (dp_) return o_.dp_devices;
  if (pp_) return o_.mp_devices;
  return {o_.device};
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
      e.test = evaluate(model_, *test_, o_.eval_batch, o_.device);
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
    StepRecord r = batches.size() == 1 ? step(batches.front(), pos.global_step) : step(batches, pos.global_step);
    if (ddp_) last_batch_ = batches.back();
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
  if (test_ && !result.test) result.test = evaluate(model_, *test_, o_.eval_batch, o_.device);
  result.end = pos;
  if (!o_.save_path.empty() && (!o_.group || o_.group->rank() == 0)) {
    save_checkpoint(o_.save_path, model_, *optimizer_, pos);
    log::info("checkpoint written to {} (epoch {}, batch {}, step {})", o_.save_path, pos.epoch, pos.batch,
              pos.global_step);
  }
  result.wall_seconds = wall.elapsed_s();
  return result;
}

}  // namespace dpb
