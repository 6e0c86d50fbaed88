#include "engine/parallel/strategy.h"

#include <algorithm>
#include <optional>

#include "engine/backend/device_graph.h"
#include "engine/backend/ops.h"
#include "engine/backend/precision.h"
#include "engine/core/clock.h"
#include "engine/core/log.h"
#include "engine/nn/batchnorm2d.h"
#include "engine/nn/init.h"
#include "engine/trace/nvtx.h"
#include "engine/tensor/allocator.h"
#include "engine/trace/timeline.h"

namespace dpb {

void ParallelStrategy::synchronize() {
  for (const auto& d : devices()) ops::synchronize(d);
}

namespace {

// Moves the model to the device it trains on. The model was built on the host (cpu:0);
// where it moves elsewhere, its old blocks would stay in that device's allocator cache,
// in sizes nothing asks for again (a whole model's worth of resident memory): they go
// back to the system.
void move_model(Model& model, const Device& to) {
  const auto params = model.parameters();
  const std::optional<Device> from =
      params.empty() || !params.front()->data().defined() ? std::nullopt : std::optional<Device>(params.front()->data().device());
  model.to(to);
  if (from && !(*from == to)) empty_cache(*from);
}

void in_forward(const StrategyOptions& o, const BatchContext& ctx) {
  if (o.hooks.in_forward) o.hooks.in_forward(ctx.step);
}

// The batch's loss and its gradient scaled by `scale`; with tensor parallelism, the
// vocabulary-parallel loss over this rank's part of the logits.
LossResult loss_of(const Model& model, const Tensor& out, const Tensor& target, float scale,
                   TensorParallel* tp = nullptr) {
  trace::NvtxRange range("loss");
  LossResult loss = tp ? tp->loss(out, target, true, /*deferred=*/true)
                       : compute_loss(model.spec().loss, out, target, true, /*deferred=*/true);
  if (scale != 1.0f) ops::scale(loss.grad, scale);
  return loss;
}

// The samples of a step's batches (what its one device ran).
int64_t samples_in(const std::vector<const Batch*>& batches) {
  int64_t n = 0;
  for (const auto* b : batches) n += b->size();
  return n;
}

// `t` stacked `times` times along dim 0.
Tensor repeat_rows(const Tensor& t, int64_t times) {
  std::vector<int64_t> dims = t.shape().dims();
  dims[0] *= times;
  Tensor out = Tensor::empty(Shape(dims), t.device(), t.dtype());
  for (int64_t i = 0; i < times; ++i) out.slice(i * t.size(0), (i + 1) * t.size(0)).copy_from(t);
  return out;
}

struct Phase {
  const char* name;
  int64_t begin, end;
};

// A rank's collectives in a step (FSDP's, tensor parallelism's): each on the
// communication lane (when it ran, or from its issue until the wait for it ended where
// the backend cannot tell); on the training thread's lane its waits for them as
// communication and the rest of each phase as compute; their totals in the step record.
void record_collectives(const std::vector<CollectiveRecord>& collectives, const std::vector<Phase>& phases, int dev,
                        StepRecord& r) {
  std::vector<std::pair<int64_t, int64_t>> waits;
  for (const auto& c : collectives) {
    const bool ran = c.started_ns > 0 && c.finished_ns >= c.started_ns;
    trace::timeline().record({c.kind + " " + c.unit, trace::Category::comm, dev, "comm",
                              ran ? c.started_ns : c.issued_ns, ran ? c.finished_ns : c.wait_end_ns,
                              {{"bytes", c.bytes}}});
    if (c.wait_end_ns > c.wait_begin_ns) {
      trace::timeline().record(
          {"wait for " + c.kind, trace::Category::comm, dev, "main", c.wait_begin_ns, c.wait_end_ns, {}});
      waits.emplace_back(c.wait_begin_ns, c.wait_end_ns);
    }
    CollectiveTotals& t = c.kind == "all-gather" ? r.all_gathers
                          : c.kind == "reduce-scatter" ? r.reduce_scatters
                                                       : r.all_reduces;
    ++t.count;
    t.bytes += c.bytes;
    t.waited_ns += c.wait_end_ns - c.wait_begin_ns;
    if (ran) t.ran_ns += c.finished_ns - c.started_ns;
    else t.timed = false;
  }
  std::sort(waits.begin(), waits.end());
  for (const Phase& p : phases) {
    int64_t at = p.begin;
    for (const auto& [b, e] : waits) {
      if (e <= at || b >= p.end) continue;
      if (b > at) trace::timeline().record({p.name, trace::Category::compute, dev, "main", at, b, {}});
      at = std::max(at, e);
    }
    if (p.end > at) trace::timeline().record({p.name, trace::Category::compute, dev, "main", at, p.end, {}});
  }
}

// --- single ----------------------------------------------------------------------------------

class SingleDevice : public ParallelStrategy {
 public:
  SingleDevice(Model& model, const StrategyOptions& o) : model_(model), o_(o) {
    if (o_.cuda_graph) {
      DPB_CHECK(o_.device.is_cuda() && o_.accum_steps == 1)
          << "CUDA graphs need one CUDA device in single mode without accumulation (--devices=cuda, --mode=single)";
      DPB_CHECK(model.spec().loss == LossKind::cross_entropy)
          << "CUDA graphs need a model trained with cross-entropy (its loss stays on the device); '"
          << model.spec().name << "' is trained with " << loss_name(model.spec().loss);
    }
    move_model(model_, o_.device);
  }
  ParallelMode mode() const override { return ParallelMode::single; }
  std::vector<Device> devices() const override { return {o_.device}; }

  LossResult forward_backward(const Batch& batch, const BatchContext& ctx, StepRecord&) override {
    if (o_.cuda_graph) {
      if (auto loss = graph_step(batch, ctx)) return *loss;
      ++eager_steps_;
    }
    const int dev = o_.device.index;
    Tensor out;
    {
      trace::NvtxRange range("forward");
      trace::Span span("forward", trace::Category::compute, dev);
      in_forward(o_, ctx);
      out = model_.forward(batch.x);
    }
    LossResult loss;
    {
      trace::Span span("loss", trace::Category::compute, dev);
      loss = loss_of(model_, out, batch.target, ctx.loss_scale);
    }
    out = Tensor();  // the logits: the loss holds what backward needs
    trace::NvtxRange range("backward");
    trace::Span span("backward", trace::Category::compute, dev);
    model_.backward_consuming(std::move(loss.grad));
    return loss;
  }

  void finish_step(const std::vector<const Batch*>& batches, StepRecord& r) override {
    r.device_samples = {samples_in(batches)};
  }

 private:
  // The captured step: static inputs the graph reads, and the loss totals it leaves.
  struct GraphStep {
    explicit GraphStep(Device d) : graph(d) {}
    DeviceGraph graph;
    Tensor x, target;  // inputs at fixed addresses, filled before each replay
    LossResult loss;   // its `pending` totals are written by each replay
  };

  // Captures forward + loss + backward on the third full-size batch and replays it from
  // then on; nullopt when this batch runs eagerly (warming up, or a smaller last batch).
  std::optional<LossResult> graph_step(const Batch& batch, const BatchContext& ctx) {
    if (batch.size() != o_.batch || (!graph_ && eager_steps_ < 2)) return std::nullopt;
    trace::Span span("forward+backward (CUDA graph)", trace::Category::compute, o_.device.index);
    in_forward(o_, ctx);
    if (!graph_) {
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
    } else {
      graph_->x.copy_from(batch.x);
      graph_->target.copy_from(batch.target);
    }
    {
      trace::NvtxRange range("forward+backward (graph)");
      graph_->graph.replay();
    }
    for (Parameter* p : model_.parameters()) p->note_grad_written();
    return graph_->loss;  // the same totals tensor, rewritten by this replay
  }

  Model& model_;
  const StrategyOptions& o_;
  std::unique_ptr<GraphStep> graph_;
  int64_t eager_steps_ = 0;
};

// --- dp ----------------------------------------------------------------------------------------

class DataParallelStrategy : public ParallelStrategy {
 public:
  DataParallelStrategy(Model& model, const StrategyOptions& o) : model_(model), o_(o) {
    DPB_CHECK(o_.devices.size() >= 1) << "DataParallel needs at least one device";
    dp_ = std::make_unique<DataParallel>(model_, o_.devices);
  }
  ParallelMode mode() const override { return ParallelMode::dp; }
  std::vector<Device> devices() const override { return o_.devices; }
  bool accumulates() const override { return false; }
  const DataParallel* data_parallel() const override { return dp_.get(); }

  LossResult forward_backward(const Batch& batch, const BatchContext& ctx, StepRecord&) override {
    const int primary = o_.devices[0].index;
    const bool scatter = !o_.dp.bypass;
    Tensor out, target = batch.target;
    {
      trace::NvtxRange range("forward");
      // DataParallel records its replicas' work on their devices; the rest runs here.
      std::optional<trace::Span> span;
      if (!scatter) span.emplace("forward", trace::Category::compute, primary);
      in_forward(o_, ctx);
      if (scatter && o_.dp.replicate_input) {
        out = dp_->forward_replicated(batch.x);
        target = repeat_rows(batch.target, static_cast<int64_t>(o_.devices.size()));
      } else {
        out = scatter ? dp_->forward(batch.x) : model_.forward(batch.x);
      }
    }
    LossResult loss;
    {
      trace::Span span("loss", trace::Category::compute, primary);
      loss = loss_of(model_, out, target, ctx.loss_scale);
    }
    trace::NvtxRange range("backward");
    if (scatter) {
      dp_->backward(loss.grad);
    } else {
      trace::Span span("backward", trace::Category::compute, primary);
      model_.backward(loss.grad);
    }
    return loss;
  }

  void finish_step(const std::vector<const Batch*>& batches, StepRecord& r) override {
    r.device_samples.assign(o_.devices.size(), 0);
    if (o_.dp.bypass) {
      r.device_samples[0] = batches.front()->size();
      return;
    }
    const auto& chunks = dp_->stats().last_chunks;
    for (size_t d = 0; d < chunks.size(); ++d) r.device_samples[d] = chunks[d];
  }

 private:
  Model& model_;
  const StrategyOptions& o_;
  std::unique_ptr<DataParallel> dp_;
};

// --- ddp ---------------------------------------------------------------------------------------

class DdpStrategy : public ParallelStrategy {
 public:
  DdpStrategy(Model& model, const StrategyOptions& o) : model_(model), o_(o) {
    DPB_CHECK(o_.ddp.group) << "--mode=ddp needs this rank's process group";
    move_model(model_, o_.device);
    if (o_.ddp.sync_bn) convert_sync_batchnorm(model_, o_.ddp.group);
    // 2D: each rank holds its part of the cut model; DDP reduces the parts' gradients over
    // the ranks that hold the same part.
    if (o_.tp_group) tp_ = std::make_unique<TensorParallel>(model_, *o_.tp_group);
    ddp_ = std::make_unique<DistributedDataParallel>(model_, *o_.ddp.group, o_.ddp.reducer);
  }
  ParallelMode mode() const override { return ParallelMode::ddp; }
  std::vector<Device> devices() const override { return {o_.device}; }
  DistributedDataParallel* ddp() override { return ddp_.get(); }
  TensorParallel* tp() override { return tp_.get(); }

  LossResult forward_backward(const Batch& batch, const BatchContext& ctx, StepRecord& r) override {
    const int dev = o_.device.index;
    if (tp_) return forward_backward_2d(batch, ctx, r);
    Tensor out;
    {
      trace::NvtxRange range("forward");
      trace::Span span("forward", trace::Category::compute, dev);
      in_forward(o_, ctx);
      out = ddp_->forward(batch.x);
    }
    LossResult loss;
    {
      trace::Span span("loss", trace::Category::compute, dev);
      loss = loss_of(model_, out, batch.target, ctx.loss_scale);
    }
    trace::NvtxRange range("backward");
    // The module's backward is compute; what DDP then waits for (the last buckets'
    // all-reduces) is communication.
    ddp_->set_sync(ctx.last);
    out = Tensor();  // the logits: the loss holds what backward needs
    ddp_->backward(std::move(loss.grad));
    const int64_t done = now_ns();
    trace::timeline().record(
        {"backward", trace::Category::compute, dev, "main", ddp_->backward_begin_ns(), ddp_->backward_end_ns(), {}});
    if (done > ddp_->backward_end_ns())
      trace::timeline().record(
          {"wait for all-reduce", trace::Category::comm, dev, "main", ddp_->backward_end_ns(), done, {}});
    r.backward_begin_ns = ddp_->backward_begin_ns();
    r.backward_end_ns = ddp_->backward_end_ns();
    return loss;
  }

  void finish_step(const std::vector<const Batch*>& batches, StepRecord& r) override {
    r.device_samples = {samples_in(batches)};
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

 private:
  // 2D: the tensor-parallel collectives inside the forward and backward are waits on the
  // training thread's lane (the rest compute); the buckets' all-reduces as in 1D.
  LossResult forward_backward_2d(const Batch& batch, const BatchContext& ctx, StepRecord& r) {
    const int dev = o_.device.index;
    const int64_t f0 = now_ns();
    Tensor out;
    {
      trace::NvtxRange range("forward");
      in_forward(o_, ctx);
      out = ddp_->forward(batch.x);
    }
    const int64_t f1 = now_ns();
    LossResult loss = loss_of(model_, out, batch.target, ctx.loss_scale, tp_.get());
    trace::NvtxRange range("backward");
    ddp_->set_sync(ctx.last);
    out = Tensor();  // the logits: the loss holds what backward needs
    ddp_->backward(std::move(loss.grad));
    const int64_t done = now_ns();
    tp_->take_step();
    record_collectives(tp_->collectives(),
                       {{"forward", f0, f1}, {"loss", f1, ddp_->backward_begin_ns()},
                        {"backward", ddp_->backward_begin_ns(), ddp_->backward_end_ns()}},
                       dev, r);
    if (done > ddp_->backward_end_ns())
      trace::timeline().record(
          {"wait for all-reduce", trace::Category::comm, dev, "main", ddp_->backward_end_ns(), done, {}});
    r.backward_begin_ns = ddp_->backward_begin_ns();
    r.backward_end_ns = ddp_->backward_end_ns();
    return loss;
  }

  Model& model_;
  const StrategyOptions& o_;
  std::unique_ptr<TensorParallel> tp_;
  std::unique_ptr<DistributedDataParallel> ddp_;
};

// --- fsdp --------------------------------------------------------------------------------------

class FsdpStrategy : public ParallelStrategy {
 public:
  FsdpStrategy(Model& model, const StrategyOptions& o) : model_(model), o_(o) {
    DPB_CHECK(o_.ddp.group) << "--mode=fsdp needs this rank's process group";
    DPB_CHECK(!o_.ddp.sync_bn) << "--sync-bn is for --mode=ddp";
    move_model(model_, o_.device);
    // Parameters are all-gathered in the type the layers compute in (bf16 on CUDA under
    // --precision=bf16: half the bytes, as FSDP2's MixedPrecisionPolicy(param_dtype=bf16)).
    FsdpOptions f = o_.fsdp;
    if (compute_dtype(o_.device) == DType::bf16) f.param_dtype = DType::bf16;
    fsdp_ = std::make_unique<FullyShardedDataParallel>(model_, *o_.ddp.group, f);
  }
  ParallelMode mode() const override { return ParallelMode::fsdp; }
  std::vector<Device> devices() const override { return {o_.device}; }
  FullyShardedDataParallel* fsdp() override { return fsdp_.get(); }

  LossResult forward_backward(const Batch& batch, const BatchContext& ctx, StepRecord& r) override {
    const int dev = o_.device.index;
    Tensor out;
    const int64_t f0 = now_ns();
    {
      trace::NvtxRange range("forward");
      in_forward(o_, ctx);
      out = fsdp_->forward(batch.x);
    }
    const int64_t f1 = now_ns();
    LossResult loss;
    {
      trace::Span span("loss", trace::Category::compute, dev);
      loss = loss_of(model_, out, batch.target, ctx.loss_scale);
    }
    out = Tensor();  // the logits: the loss holds what backward needs
    trace::NvtxRange range("backward");
    fsdp_->backward(std::move(loss.grad));
    const int64_t done = now_ns();
    r.backward_begin_ns = fsdp_->backward_begin_ns();
    r.backward_end_ns = fsdp_->backward_end_ns();
    record_collectives(fsdp_->collectives(), {{"forward", f0, f1}, {"backward", fsdp_->backward_begin_ns(), done}},
                       dev, r);
    return loss;
  }

  void finish_step(const std::vector<const Batch*>& batches, StepRecord& r) override {
    r.device_samples = {samples_in(batches)};
  }

 private:
  Model& model_;
  const StrategyOptions& o_;
  std::unique_ptr<FullyShardedDataParallel> fsdp_;
};

// --- tp ----------------------------------------------------------------------------------------

class TpStrategy : public ParallelStrategy {
 public:
  TpStrategy(Model& model, const StrategyOptions& o) : model_(model), o_(o) {
    DPB_CHECK(o_.ddp.group) << "--mode=tp needs this rank's process group";
    DPB_CHECK(!o_.ddp.sync_bn) << "--sync-bn is for --mode=ddp";
    move_model(model_, o_.device);
    tp_ = std::make_unique<TensorParallel>(model_, *o_.ddp.group);
  }
  ParallelMode mode() const override { return ParallelMode::tp; }
  std::vector<Device> devices() const override { return {o_.device}; }
  TensorParallel* tp() override { return tp_.get(); }

  LossResult forward_backward(const Batch& batch, const BatchContext& ctx, StepRecord& r) override {
    const int dev = o_.device.index;
    const int64_t f0 = now_ns();
    Tensor out;
    {
      trace::NvtxRange range("forward");
      in_forward(o_, ctx);
      out = model_.forward(batch.x);
    }
    const int64_t f1 = now_ns();
    LossResult loss = loss_of(model_, out, batch.target, ctx.loss_scale, tp_.get());
    const int64_t b0 = now_ns();
    {
      trace::NvtxRange range("backward");
      model_.backward(loss.grad);
    }
    const int64_t done = now_ns();
    r.backward_begin_ns = b0;
    r.backward_end_ns = done;
    tp_->take_step();
    record_collectives(tp_->collectives(), {{"forward", f0, f1}, {"loss", f1, b0}, {"backward", b0, done}}, dev, r);
    return loss;
  }

  void finish_step(const std::vector<const Batch*>& batches, StepRecord& r) override {
    r.device_samples = {samples_in(batches)};
  }

 private:
  Model& model_;
  const StrategyOptions& o_;
  std::unique_ptr<TensorParallel> tp_;
};

// --- pipeline ----------------------------------------------------------------------------------

class PipelineStrategy : public ParallelStrategy {
 public:
  PipelineStrategy(Model& model, const StrategyOptions& o, std::vector<double>* unit_costs) : o_(o) {
    const int stages = static_cast<int>(o_.devices.size());
    DPB_CHECK(stages >= 2) << "model parallelism needs at least 2 devices, got " << stages;
    model.to(o_.devices[0]);
    PipelineOptions po;
    po.devices = o_.devices;
    po.schedule = o_.pipeline.schedule;
    po.micro_batches = o_.pipeline.micro_batches;
    const auto units = pipeline_units(model);
    DPB_CHECK(static_cast<int>(units.size()) >= stages)
        << "model '" << model.spec().name << "' has " << units.size() << " layers to cut, too few for " << stages
        << " stages";
    if (o_.pipeline.split.empty()) {
      const int64_t micro = (o_.batch + o_.pipeline.micro_batches - 1) / o_.pipeline.micro_batches;
      MeasuredSplit m = split_by_measured_time(model, stages, micro, o_.devices[0], o_.seed + 1);
      po.split = m.split;
      if (unit_costs) *unit_costs = std::move(m.unit_costs);
    } else {
      po.split = resolve_split(o_.pipeline.split, units, stages);
    }
    pp_ = std::make_unique<PipelineParallel>(model, po);
  }
  ParallelMode mode() const override { return ParallelMode::pipeline; }
  std::vector<Device> devices() const override { return o_.devices; }
  bool accumulates() const override { return false; }  // micro-batches instead
  PipelineParallel* pipeline() override { return pp_.get(); }

  LossResult forward_backward(const Batch& batch, const BatchContext& ctx, StepRecord&) override {
    in_forward(o_, ctx);
    return pp_->train_step(batch.x, batch.target);
  }

  void finish_step(const std::vector<const Batch*>& batches, StepRecord& r) override {
    r.pipeline = pp_->last_step();
    // Every stage handles every sample (each its own layers of it).
    r.device_samples.assign(o_.devices.size(), batches.front()->size());
  }

 private:
  const StrategyOptions& o_;
  std::unique_ptr<PipelineParallel> pp_;
};

}  // namespace

std::unique_ptr<ParallelStrategy> make_strategy(Model& model, const StrategyOptions& o, std::vector<double>* unit_costs) {
  const ModeInfo& m = mode_info(o.mode);
  DPB_CHECK(!o.cuda_graph || o.mode == ParallelMode::single) << "CUDA graphs need --mode=single";
  DPB_CHECK(!o.tp_group || m.all_reduces_gradients)
      << "a tensor-parallel group beside the data-parallel one is for --mode=ddp (2D); --mode=tp's group is its own";
  DPB_CHECK(m.distributed == (o.ddp.group != nullptr))
      << (o.ddp.group ? "a process group is for --mode=ddp, fsdp or tp"
                      : std::string("--mode=") + m.name + " needs this rank's process group");
  // Only a mode that shards state draws a deferred model's values shard by shard; every
  // other mode holds it whole.
  if (!m.shards_state) init::materialize(model);
  return m.make_strategy(model, o, unit_costs);
}

namespace strategies {

std::unique_ptr<ParallelStrategy> single(Model& model, const StrategyOptions& o, std::vector<double>*) {
  return std::make_unique<SingleDevice>(model, o);
}
std::unique_ptr<ParallelStrategy> dp(Model& model, const StrategyOptions& o, std::vector<double>*) {
  return std::make_unique<DataParallelStrategy>(model, o);
}
std::unique_ptr<ParallelStrategy> ddp(Model& model, const StrategyOptions& o, std::vector<double>*) {
  return std::make_unique<DdpStrategy>(model, o);
}
std::unique_ptr<ParallelStrategy> pipeline(Model& model, const StrategyOptions& o, std::vector<double>* unit_costs) {
  return std::make_unique<PipelineStrategy>(model, o, unit_costs);
}
std::unique_ptr<ParallelStrategy> fsdp(Model& model, const StrategyOptions& o, std::vector<double>*) {
  return std::make_unique<FsdpStrategy>(model, o);
}
std::unique_ptr<ParallelStrategy> tp(Model& model, const StrategyOptions& o, std::vector<double>*) {
  return std::make_unique<TpStrategy>(model, o);
}

}  // namespace strategies

}  // namespace dpb
