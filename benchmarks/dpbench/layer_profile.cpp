#include "benchmarks/dpbench/layer_profile.h"

#include <fmt/format.h>

#include <algorithm>

#include "benchmarks/simulate/profile.h"
#include "engine/backend/ops.h"
#include "engine/core/rng.h"
#include "engine/core/stats.h"
#include "engine/parallel/pipeline.h"

namespace dpb::bench {

reports::LayerProfile measure_layer_profile(Model& model, int64_t batch, Device device,
                                            const OptimizerOptions& optimizer,
                                            const std::vector<double>& step_times_s, uint64_t seed) {
  const Summary run = summarize(step_times_s);
  reports::LayerProfile p = sim::layer_skeleton(model, batch);
  p.source = "measured";
  Generator g(seed);
  const UnitTimes t = measure_unit_times(model, model.random_batch(batch, device, g), 5);
  for (size_t i = 0; i < p.layers.size(); ++i) {
    p.layers[i].forward_s = t.forward_s[i];
    p.layers[i].backward_s = t.backward_s[i];
  }
  // The optimizer's step, on a copy (the run's weights stay as trained).
  auto copy = model.clone();
  const std::vector<Parameter*> params = copy->parameters();
  for (Parameter* q : params) {
    q->set_grad(Tensor::zeros(q->data().shape(), q->data().device()));
    q->note_grad_written();  // a gradient to step on, as after a backward
  }
  auto opt = make_optimizer(optimizer, params);
  std::vector<double> steps;
  for (int r = 0; r <= 5; ++r) {
    ops::DeviceMarks marks(device);
    const size_t a = marks.mark();
    opt->step();
    const size_t b = marks.mark();
    if (r > 0) steps.push_back(marks.seconds(a, b));
  }
  p.optimizer_s = summarize(steps).median;
  // FSDP's copies on the training stream, which one device never makes: every parameter
  // into its slice of one flat buffer (the copy-in of gradients before a reduce-scatter)
  // and every slice out into a tensor of its own (the copy-out of gathered rows).
  int64_t total = 0;
  bool f32 = true;
  for (Parameter* q : params) {
    total += q->data().numel();
    f32 = f32 && q->data().dtype() == DType::f32;
  }
  std::string copy_evidence = total == 0 ? "copy rate not measured: the model has no parameters"
                                         : "copy rate not measured: the parameters are not all f32";
  if (total > 0 && f32) {
    const Tensor flat = Tensor::empty({total}, device);
    std::vector<Tensor> out;
    for (Parameter* q : params) out.push_back(Tensor::empty({q->data().numel()}, device));
    std::vector<double> copies;
    for (int r = 0; r <= 5; ++r) {
      ops::DeviceMarks marks(device);
      const size_t a = marks.mark();
      int64_t at = 0;
      for (Parameter* q : params) {
        const int64_t n = q->data().numel();
        flat.slice(at, at + n).copy_from(q->data().to_plain().view({n}));
        at += n;
      }
      at = 0;
      for (Tensor& o : out) {
        o.copy_from(flat.slice(at, at + o.numel()));
        at += o.numel();
      }
      const size_t b = marks.mark();
      if (r > 0) copies.push_back(marks.seconds(a, b));
    }
    const double copy_s = summarize(copies).median;
    if (copy_s > 0) {
      p.copy_bytes_per_s = 2.0 * static_cast<double>(total) * 4 / copy_s;
      copy_evidence = fmt::format(
          "copy rate: the {:.1f} MB of parameters into one flat buffer and back out, slice by slice, {:.3f} ms "
          "(median of 5)",
          static_cast<double>(total) * 4e-6, copy_s * 1e3);
    }
  }
  p.step_cv = run.cv;
  p.rank_lag = reports::rank_lags(step_times_s);
  p.evidence = std::string("each layer timed on the device's own clock (") +
               (device.is_cuda() ? "CUDA timing events around it, no wait between layers"
                                 : "host clock: the logical CPU device's own") +
               "), median of 5 passes on a batch of " + std::to_string(batch) + "; " + copy_evidence;
  fit_layers_to_step(p, run.median);
  return p;
}

void fit_layers_to_step(reports::LayerProfile& p, double step_median_s) {
  const double timed = p.compute_s(), room = step_median_s - p.optimizer_s;
  if (step_median_s > 0 && timed > 0 && room > 0 && timed > room) {
    const double scale = room / timed;
    for (auto& l : p.layers) {
      l.forward_s *= scale;
      l.backward_s *= scale;
    }
    p.evidence += fmt::format(
        "; scaled by {:.3f}: timed one at a time the layers took {:.3f} ms, more than the run's median step of "
        "{:.3f} ms less the optimizer",
        scale, timed * 1e3, step_median_s * 1e3);
  }
  p.other_s = std::max(0.0, step_median_s - p.compute_s() - p.optimizer_s);
  p.evidence += "; other_s is the run's median step minus layers and optimizer";
}

}  // namespace dpb::bench
