#include "engine/parallel/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <future>
#include <limits>
#include <mutex>
#include <set>
#include <sstream>

#include "engine/backend/ops.h"
#include "engine/core/clock.h"
#include "engine/core/rng.h"
#include "engine/core/text.h"
#include "engine/nn/tied_linear.h"
#include "engine/parallel/data_parallel.h"
#include "engine/trace/nvtx.h"
#include "engine/trace/timeline.h"

namespace dpb {

namespace {

void collect_units(Sequential& seq, const std::string& prefix, std::vector<PipelineUnit>& out) {
  for (size_t i = 0; i < seq.size(); ++i) {
    Module& m = seq.layer(i);
    const std::string name = prefix + seq.layer_name(i);
    auto* nested = dynamic_cast<Sequential*>(&m);
    if (nested && nested->type_name() == "Sequential" && nested->size() > 0) {
      collect_units(*nested, name + ".", out);
    } else {
      out.push_back(PipelineUnit{name, &m, &seq, i});
    }
  }
}

std::string list_units(const std::vector<PipelineUnit>& units) {
  std::ostringstream s;
  for (size_t i = 0; i < units.size(); ++i) s << (i ? ", " : "") << i << " " << units[i].name;
  return s.str();
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

std::vector<PipelineUnit> pipeline_units(Model& model) {
  std::vector<PipelineUnit> units;
  collect_units(model, "", units);
  return units;
}

std::vector<int> balanced_split(const std::vector<double>& cost, int parts) {
  const int n = static_cast<int>(cost.size());
  DPB_CHECK(parts >= 1 && parts <= n) << "cannot cut " << n << " units into " << parts << " stages";
  std::vector<double> prefix(static_cast<size_t>(n + 1), 0.0);
  for (int i = 0; i < n; ++i) prefix[static_cast<size_t>(i + 1)] = prefix[static_cast<size_t>(i)] + cost[static_cast<size_t>(i)];
  auto range = [&](int a, int b) { return prefix[static_cast<size_t>(b)] - prefix[static_cast<size_t>(a)]; };
  // best[k][i]: the smallest largest-stage cost of units [0, i) in k stages; cut[k][i]
  // the start of the last of them. Ties prefer the later cut (earlier stages a bit
  // fuller: they also run the input copy).
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(static_cast<size_t>(parts + 1), std::vector<double>(static_cast<size_t>(n + 1), inf));
  std::vector<std::vector<int>> cut(static_cast<size_t>(parts + 1), std::vector<int>(static_cast<size_t>(n + 1), 0));
  best[0][0] = 0;
  for (int k = 1; k <= parts; ++k)
    for (int i = k; i <= n; ++i)
      for (int j = k - 1; j < i; ++j) {
        const double v = std::max(best[static_cast<size_t>(k - 1)][static_cast<size_t>(j)], range(j, i));
        if (v <= best[static_cast<size_t>(k)][static_cast<size_t>(i)]) {
          best[static_cast<size_t>(k)][static_cast<size_t>(i)] = v;
          cut[static_cast<size_t>(k)][static_cast<size_t>(i)] = j;
        }
      }
  std::vector<int> starts;
  for (int k = parts, i = n; k > 1; --k) {
    i = cut[static_cast<size_t>(k)][static_cast<size_t>(i)];
    starts.push_back(i);
  }
  std::reverse(starts.begin(), starts.end());
  return starts;
}

UnitTimes measure_unit_times(Model& model, const Tensor& sample, int repeats) {
  DPB_CHECK(repeats >= 1) << "measure_unit_costs: repeats must be >= 1";
  auto units = pipeline_units(model);
  const Device d = sample.device();
  // Measuring trains nothing: BatchNorm's running statistics are put back afterwards.
  std::vector<Tensor> saved;
  for (auto& [name, b] : model.named_buffers()) saved.push_back(b->clone());
  std::vector<std::vector<double>> fwd(units.size()), bwd(units.size()), total(units.size());
  for (int r = 0; r <= repeats; ++r) {  // r == 0 warms up
    // Each unit between two marks on the device's own clock, read after the pass: no
    // wait between units (on a GPU they queue back to back, as in a training step).
    ops::DeviceMarks marks(d);
    std::vector<std::pair<size_t, size_t>> f_at(units.size()), b_at(units.size(), {0, 0});
    std::vector<bool> has_backward(units.size(), false);
    Tensor h = sample;
    for (size_t u = 0; u < units.size(); ++u) {
      f_at[u].first = marks.mark();
      h = units[u].module->forward(h);
      f_at[u].second = marks.mark();
    }
    // The gradient of a mean over the outputs.
    Tensor g = Tensor::full(h.shape(), 1.0f / static_cast<float>(h.numel()), h.device());
    if (h.layout() != Layout::plain) g = g.to_layout(h.layout());
    for (size_t u = units.size(); u-- > 0;) {
      if (!g.defined()) continue;  // parameter-free units at the front: no input gradient to compute
      b_at[u].first = marks.mark();
      g = units[u].module->backward(g);
      b_at[u].second = marks.mark();
      has_backward[u] = true;
    }
    if (r == 0) continue;
    for (size_t u = 0; u < units.size(); ++u) {
      fwd[u].push_back(marks.seconds(f_at[u].first, f_at[u].second));
      bwd[u].push_back(has_backward[u] ? marks.seconds(b_at[u].first, b_at[u].second) : 0.0);
      total[u].push_back(fwd[u].back() + bwd[u].back());
    }
  }
  model.zero_grad();
  auto buffers = model.named_buffers();
  for (size_t i = 0; i < buffers.size(); ++i) buffers[i].second->copy_from(saved[i]);
  UnitTimes out;
  for (size_t u = 0; u < units.size(); ++u) {
    out.forward_s.push_back(median_of(fwd[u]));
    out.backward_s.push_back(median_of(bwd[u]));
    out.total_s.push_back(median_of(total[u]));
  }
  return out;
}

std::vector<double> measure_unit_costs(Model& model, const Tensor& sample, int repeats) {
  return measure_unit_times(model, sample, repeats).total_s;
}

std::vector<int> resolve_split(const std::vector<std::string>& starts_given, const std::vector<PipelineUnit>& units,
                               int stages) {
  std::string text;
  for (const auto& s : starts_given) text += (text.empty() ? "" : ",") + s;
  std::vector<int> starts;
  const int n = static_cast<int>(units.size());
  for (const auto& item : starts_given) {
    DPB_CHECK(!item.empty()) << "--split='" << text << "': an empty entry (units: " << list_units(units) << ")";
    int index = -1;
    if (item.size() <= 6 && std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      index = std::stoi(item);
    } else {
      for (int u = 0; u < n; ++u)
        if (units[static_cast<size_t>(u)].name == item) index = u;
      DPB_CHECK(index >= 0) << "--split: no unit named '" << escape_untrusted(item) << "' (units: " << list_units(units)
                            << ")";
    }
    DPB_CHECK(index >= 1 && index < n) << "--split: unit " << item << " cannot start a stage: the first stage "
                                       << "starts at unit 0, later ones at 1.." << n - 1 << " (units: "
                                       << list_units(units) << ")";
    DPB_CHECK(starts.empty() || index > starts.back())
        << "--split='" << text << "': stage starts must increase (units: " << list_units(units) << ")";
    starts.push_back(index);
  }
  DPB_CHECK(static_cast<int>(starts.size()) == stages - 1)
      << "--split='" << escape_untrusted(text) << "' gives " << starts.size() + 1 << " stages for " << stages
      << " devices: name the first unit of each stage after the first (units: " << list_units(units) << ")";
  return starts;
}

MeasuredSplit split_by_measured_time(Model& model, int stages, int64_t micro_batch, Device device, uint64_t seed) {
  Generator g(seed);
  MeasuredSplit out;
  out.unit_costs = measure_unit_costs(model, model.random_batch(micro_batch, device, g));
  out.split = balanced_split(out.unit_costs, stages);
  return out;
}

// --- the pipeline ------------------------------------------------------------------------

// What the stage threads of one step share: the activations and gradients in flight.
struct PipelineParallel::Shared {
  std::mutex mu;
  std::condition_variable cv;
  // act[s][m]: stage s's input for micro-batch m; grad[s][m]: the gradient of stage s's
  // output. Both are posted by the neighbouring stage (or the loss) and taken once.
  std::vector<std::vector<Tensor>> act, grad;
  std::string error;  // the first failure; the other stages stop waiting
  int failed_stage = -1;

  void post(std::vector<std::vector<Tensor>>& slot, int s, int m, Tensor t) {
    {
      std::lock_guard<std::mutex> lock(mu);
      slot[static_cast<size_t>(s)][static_cast<size_t>(m)] = std::move(t);
    }
    cv.notify_all();
  }
  Tensor take(std::vector<std::vector<Tensor>>& slot, int s, int m, const char* what) {
    std::unique_lock<std::mutex> lock(mu);
    Tensor& t = slot[static_cast<size_t>(s)][static_cast<size_t>(m)];
    // Stages are threads of this process: a wait this long means a failure elsewhere
    // that did not reach us, never a slow stage.
    const bool ok = cv.wait_for(lock, std::chrono::minutes(10), [&] { return t.defined() || !error.empty(); });
    DPB_CHECK(ok) << "pipeline stage " << s << " waited 10 minutes for the " << what << " of micro-batch " << m;
    if (!t.defined()) throw Error("pipeline stage " + std::to_string(failed_stage) + " failed");
    Tensor out = std::move(t);
    t = Tensor();
    return out;
  }
  void fail(int stage, const std::string& what) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (error.empty()) {
        error = what;
        failed_stage = stage;
      }
    }
    cv.notify_all();
  }
};

struct PipelineParallel::TiedCopy {
  Parameter* owner = nullptr;
  std::unique_ptr<Parameter> copy;
};

PipelineParallel::PipelineParallel(Model& model, PipelineOptions options) : model_(model), o_(std::move(options)) {
  const int p = static_cast<int>(o_.devices.size());
  DPB_CHECK(p >= 2) << "model parallelism needs at least 2 devices, got " << p;
  std::set<std::string> seen;
  for (const auto& d : o_.devices) DPB_CHECK(seen.insert(d.str()).second) << "pipeline: device " << d << " is listed twice";
  DPB_CHECK(o_.micro_batches >= 1) << "--micro-batches must be at least 1, got " << o_.micro_batches;
  DPB_CHECK(o_.schedule != PipelineSchedule::naive || o_.micro_batches == 1)
      << "the naive schedule runs the whole batch through one stage at a time (--micro-batches=1); for "
      << o_.micro_batches << " micro-batches use --schedule=gpipe or --schedule=1f1b";
  units_ = pipeline_units(model_);
  DPB_CHECK(static_cast<int>(units_.size()) >= p)
      << "model '" << model_.spec().name << "' has " << units_.size() << " units (" << list_units(units_)
      << "), too few for " << p << " stages";
  DPB_CHECK(static_cast<int>(o_.split.size()) == p - 1)
      << "pipeline: " << o_.split.size() << " stage starts for " << p << " devices (need " << p - 1 << ")";
  for (size_t k = 0; k < o_.split.size(); ++k)
    DPB_CHECK(o_.split[k] >= 1 && o_.split[k] < static_cast<int>(units_.size()) &&
              (k == 0 || o_.split[k] > o_.split[k - 1]))
        << "pipeline: stage starts must increase within 1.." << units_.size() - 1 << " (units: "
        << list_units(units_) << ")";
  for (size_t u = 0; u < units_.size(); ++u) {
    const int s = stage_of(u);
    units_[u].module->to(o_.devices[static_cast<size_t>(s)]);
    if (s > 0 && static_cast<int>(u) == o_.split[static_cast<size_t>(s - 1)]) {
      units_[u].owner->set_input_device(units_[u].index, o_.devices[static_cast<size_t>(s)]);
      // A stage hands its input gradient back even when the stages before hold no
      // parameters (a cut right after a Flatten): the backward pass keeps its shape.
      units_[u].module->set_needs_input_grad(true);
    }
  }
  for (size_t u = 0; u < units_.size(); ++u) {
    auto* head = dynamic_cast<TiedLinear*>(units_[u].module);
    const Device dev = o_.devices[static_cast<size_t>(stage_of(u))];
    if (!head || !head->weight() || head->weight()->data().device() == dev) continue;
    tied_ = std::make_unique<TiedCopy>();
    tied_->owner = head->weight();
    tied_->copy = std::make_unique<Parameter>(tied_->owner->data().to(dev));
    head->tie(tied_->copy.get());
  }
  for (const auto& d : o_.devices) workers_.push_back(std::make_unique<DeviceWorker>(d));
  last_.theory = 0;
}

PipelineParallel::~PipelineParallel() = default;

int PipelineParallel::stage_of(size_t unit) const {
  int s = 0;
  while (s < static_cast<int>(o_.split.size()) && static_cast<int>(unit) >= o_.split[static_cast<size_t>(s)]) ++s;
  return s;
}

std::vector<std::vector<std::string>> PipelineParallel::stage_units() const {
  std::vector<std::vector<std::string>> out(o_.devices.size());
  for (size_t u = 0; u < units_.size(); ++u) out[static_cast<size_t>(stage_of(u))].push_back(units_[u].name);
  return out;
}

std::vector<int64_t> PipelineParallel::stage_parameters() {
  std::vector<int64_t> out(o_.devices.size(), 0);
  for (size_t u = 0; u < units_.size(); ++u) out[static_cast<size_t>(stage_of(u))] += units_[u].module->parameter_count();
  return out;
}

void PipelineParallel::make_micro_copies(int micro) {
  while (static_cast<int>(copies_.size()) < micro) {
    std::vector<std::unique_ptr<Module>> copy;
    for (auto& u : units_) {
      auto c = u.module->clone_structure();
      c->share_state_with(*u.module);
      if (auto* head = dynamic_cast<TiedLinear*>(u.module)) static_cast<TiedLinear&>(*c).tie(head->weight());
      c->set_needs_input_grad(u.module->needs_input_grad());
      copy.push_back(std::move(c));
    }
    copies_.push_back(std::move(copy));
  }
}

std::vector<std::pair<char, int>> PipelineParallel::stage_program(int stage, int micro) const {
  const int p = static_cast<int>(o_.devices.size());
  std::vector<std::pair<char, int>> prog;
  if (o_.schedule == PipelineSchedule::one_f_one_b) {
    const int warm = std::min(p - stage - 1, micro);
    for (int m = 0; m < warm; ++m) prog.emplace_back('F', m);
    for (int i = 0; i + warm < micro; ++i) {
      prog.emplace_back('F', warm + i);
      prog.emplace_back('B', i);
    }
    for (int m = micro - warm; m < micro; ++m) prog.emplace_back('B', m);
  } else {  // naive (one micro-batch) and gpipe: all forwards, then the backwards newest first
    for (int m = 0; m < micro; ++m) prog.emplace_back('F', m);
    for (int m = micro; m-- > 0;) prog.emplace_back('B', m);
  }
  return prog;
}

LossResult PipelineParallel::train_step(const Tensor& x, const Tensor& target) {
  DPB_CHECK(x.ndim() >= 1 && x.size(0) >= 1) << "pipeline: input " << x.shape() << " has no samples";
  DPB_CHECK(target.ndim() >= 1 && target.size(0) == x.size(0))
      << "pipeline: " << x.size(0) << " samples but targets " << target.shape();
  DPB_CHECK(x.device() == o_.devices.front()) << "pipeline: the input must be on the first stage's device "
                                              << o_.devices.front() << ", got " << x.device();
  const int p = static_cast<int>(o_.devices.size());
  const int64_t batch = x.size(0);
  const std::vector<int64_t> sizes = DataParallel::chunk_sizes(batch, o_.micro_batches);
  const int micro = static_cast<int>(sizes.size());
  std::vector<int64_t> begin(sizes.size(), 0);
  for (size_t m = 1; m < sizes.size(); ++m) begin[m] = begin[m - 1] + sizes[m - 1];
  make_micro_copies(micro);

  // Gradients accumulate into the parameters' storage, shared by every micro-batch copy:
  // zero what holds no gradient yet, then every copy adds.
  for (auto& u : units_) {
    for (auto* q : u.module->parameters()) {
      if (q->grad_is_zero()) q->grad().zero();
    }
  }
  for (int m = 0; m < micro; ++m) {
    for (size_t u = 0; u < units_.size(); ++u) {
      Module& c = *copies_[static_cast<size_t>(m)][u];
      c.train(units_[u].module->is_training());
      auto mine = c.parameters();
      auto theirs = units_[u].module->parameters();
      for (size_t i = 0; i < mine.size(); ++i) {
        // Re-share if the parameter's storage was replaced since (moved, reloaded).
        if (mine[i]->data().raw() != theirs[i]->data().raw() || mine[i]->grad().raw() != theirs[i]->grad().raw()) {
          c.share_state_with(*units_[u].module);
          mine = c.parameters();
        }
        mine[i]->note_grad_written();
      }
    }
  }

  if (tied_) {
    Parameter& copy = *tied_->copy;
    copy.data().copy_from(tied_->owner->data());
    if (!copy.grad().defined()) copy.set_grad(Tensor::zeros(copy.data().shape(), copy.data().device()));
    else copy.grad().zero();
    copy.note_grad_written();
  }

  Shared sh;
  sh.act.assign(static_cast<size_t>(p), std::vector<Tensor>(static_cast<size_t>(micro)));
  sh.grad.assign(static_cast<size_t>(p), std::vector<Tensor>(static_cast<size_t>(micro)));
  std::vector<std::vector<PipelineEvent>> events(static_cast<size_t>(p));
  double loss_sum = 0;
  int64_t correct = 0;
  const LossKind kind = model_.spec().loss;

  auto run_stage = [&](int s) {
    const Device dev = o_.devices[static_cast<size_t>(s)];
    std::vector<size_t> mine;
    for (size_t u = 0; u < units_.size(); ++u)
      if (stage_of(u) == s) mine.push_back(u);
    // Each op's compute between two marks on the device's own clock (CUDA timing events on
    // a GPU, read once the stage's program has run; the host clock on a logical CPU
    // device), so no op waits for the device to be timed: on a GPU only a hand-off to
    // another device waits (the copy between devices completes before it is handed on).
    // The marks go onto the host clock from an anchor at the program's start, where the
    // stream is drained (the trainer waits for the devices at the end of every step); on
    // a logical CPU device the anchor's host time is the mark's own, so every mark maps
    // back to exactly the time it was taken.
    ops::DeviceMarks marks(dev);
    const size_t anchor = marks.mark();
    const int64_t anchor_ns = marks.host_ns(anchor).value_or(now_ns());
    struct Timed {
      PipelineEvent e;
      size_t begin = 0, compute_end = 0;
      int64_t copied_ns = 0;  // where a hand-off's copy to another device ended (the host waited for it)
      int to_stage = -1;
    };
    std::vector<Timed> timed;
    std::vector<std::pair<LossResult, int64_t>> losses;  // the last stage's, read once its program has run
    for (auto [op, m] : stage_program(s, micro)) {
      auto& layers = copies_[static_cast<size_t>(m)];
      const size_t mi = static_cast<size_t>(m);
      // What the op hands on is posted after its end is marked, so a neighbour's op that
      // waited for it starts after this one ended.
      Timed t;
      t.e = PipelineEvent{s, m, op, 0, 0};
      Tensor handoff;
      if (op == 'F') {
        Tensor h = s == 0 ? x.slice(begin[mi], begin[mi] + sizes[mi]) : sh.take(sh.act, s, m, "activations");
        t.begin = marks.mark();
        trace::NvtxRange range("stage " + std::to_string(s) + " F" + std::to_string(m));
        for (size_t u : mine) h = layers[u]->forward(h);
        if (s + 1 < p) {
          t.compute_end = marks.mark();
          handoff = h.to(o_.devices[static_cast<size_t>(s + 1)]);
          t.copied_ns = now_ns();
          t.to_stage = s + 1;
        } else {
          const Tensor micro_target = target.slice(begin[mi], begin[mi] + sizes[mi]).to(dev);
          LossResult l = compute_loss(kind, h, micro_target, true, /*deferred=*/true);
          // The micro-batch's share of the batch mean.
          ops::scale(l.grad, static_cast<float>(sizes[mi]) / static_cast<float>(batch));
          t.compute_end = marks.mark();
          handoff = l.grad;
          t.to_stage = s;
          losses.emplace_back(std::move(l), sizes[mi]);
        }
      } else {
        Tensor g = sh.take(sh.grad, s, m, "output gradient");
        t.begin = marks.mark();
        trace::NvtxRange range("stage " + std::to_string(s) + " B" + std::to_string(m));
        // Stops where no input gradient is needed (parameter-free layers at the model's front).
        for (size_t k = mine.size(); k-- > 0 && g.defined();) g = layers[mine[k]]->backward(g);
        DPB_CHECK(s == 0 || g.defined()) << "pipeline stage " << s << " computed no input gradient to hand back";
        t.compute_end = marks.mark();
        if (s > 0) {
          handoff = g.to(o_.devices[static_cast<size_t>(s - 1)]);
          t.copied_ns = now_ns();
          t.to_stage = s - 1;
        }
      }
      const int to_stage = t.to_stage;
      const bool activations = op == 'F' && to_stage != s;
      timed.push_back(t);
      if (to_stage >= 0) sh.post(activations ? sh.act : sh.grad, to_stage, m, std::move(handoff));
    }
    // The program is queued. The stage waits for it once (its stream need not be the one
    // the optimizer's thread uses next), then reads its marks and the last stage's losses.
    ops::synchronize(dev);
    const auto at = [&](size_t mark) {
      return anchor_ns + static_cast<int64_t>(std::llround(marks.seconds(anchor, mark) * 1e9));
    };
    for (auto& [l, size] : losses) {
      l.resolve();
      loss_sum += static_cast<double>(l.loss) * static_cast<double>(size);
      correct += l.correct;
    }
    const std::string lane = "stage " + std::to_string(s);
    for (auto& t : timed) {
      t.e.begin_ns = at(t.begin);
      const int64_t compute_end = std::max(t.e.begin_ns, at(t.compute_end));
      const bool copied = t.copied_ns > 0;
      t.e.end_ns = copied ? std::max(compute_end, t.copied_ns) : compute_end;
      events[static_cast<size_t>(s)].push_back(t.e);
      const int m = t.e.micro;
      const std::string what =
          std::string(t.e.kind == 'F' ? "forward" : "backward") + " micro-batch " + std::to_string(m);
      trace::timeline().record(
          {what, trace::Category::compute, dev.index, lane, t.e.begin_ns, compute_end, {{"micro_batch", m}}});
      if (copied)
        trace::timeline().record({t.e.kind == 'F' ? "send activations" : "send gradient", trace::Category::copy,
                                  dev.index, lane, compute_end, t.e.end_ns,
                                  {{"micro_batch", m}, {"to_stage", t.to_stage}}});
    }
  };

  std::vector<std::future<void>> done;
  for (int s = 0; s < p; ++s) {
    done.push_back(workers_[static_cast<size_t>(s)]->submit([&, s] {
      try {
        run_stage(s);
      } catch (const std::exception& e) {
        sh.fail(s, e.what());
        throw;
      }
    }));
  }
  for (auto& f : done) f.wait();
  if (!sh.error.empty()) throw Error("pipeline stage " + std::to_string(sh.failed_stage) + ": " + sh.error);
  for (auto& f : done) f.get();
  for (auto& u : units_)
    for (auto* q : u.module->parameters()) q->note_grad_written();

  // The step's record: every stage's busy time over the span of all of them.
  PipelineStepRecord r;
  r.micro_sizes = sizes;
  r.begin_ns = std::numeric_limits<int64_t>::max();
  r.stage_busy_ns.assign(static_cast<size_t>(p), 0);
  for (int s = 0; s < p; ++s)
    for (const auto& e : events[static_cast<size_t>(s)]) {
      r.events.push_back(e);
      r.begin_ns = std::min(r.begin_ns, e.begin_ns);
      r.end_ns = std::max(r.end_ns, e.end_ns);
      r.stage_busy_ns[static_cast<size_t>(s)] += e.end_ns - e.begin_ns;
    }
  const double span = static_cast<double>(std::max<int64_t>(1, r.end_ns - r.begin_ns));
  for (int s = 0; s < p; ++s) {
    r.stage_idle.push_back(1.0 - static_cast<double>(r.stage_busy_ns[static_cast<size_t>(s)]) / span);
    r.bubble += r.stage_idle.back() / p;
  }
  r.theory = static_cast<double>(p - 1) / static_cast<double>(micro + p - 1);
  last_ = std::move(r);
  if (tied_) ops::axpy(1.0f, tied_->copy->grad().to(tied_->owner->data().device()), tied_->owner->grad());

  LossResult out;
  out.loss = static_cast<float>(loss_sum / static_cast<double>(batch));
  out.correct = correct;
  return out;
}

}  // namespace dpb
