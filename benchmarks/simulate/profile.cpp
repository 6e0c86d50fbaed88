#include "benchmarks/simulate/profile.h"

#include <algorithm>

#include "benchmarks/simulate/link.h"
#include "engine/core/error.h"
#include "engine/core/text.h"
#include "engine/parallel/fully_sharded.h"
#include "engine/parallel/pipeline.h"
#include "reports/model.h"

namespace dpb::sim {

std::vector<ProfileUnit> profile_units(Model& model) {
  std::vector<ProfileUnit> out;
  Shape shape = model.spec().input;
  for (const PipelineUnit& p : pipeline_units(model)) {
    ProfileUnit u;
    u.name = p.name;
    u.module = p.module;
    u.input = shape;
    p.module->forward_flops(shape, &u.output);
    shape = u.output;
    out.push_back(std::move(u));
  }
  return out;
}

StepProfile layer_skeleton(Model& model, int64_t batch) {
  StepProfile p;
  p.model = model.spec().name;
  p.batch = batch;
  const auto fsdp_unit = fsdp_unit_of_parameters(model);
  for (const ProfileUnit& u : profile_units(model)) {
    LayerCost c;
    c.name = u.name;
    Shape out;
    c.flops = static_cast<double>(u.module->forward_flops(u.input, &out)) * static_cast<double>(batch);
    c.output_bytes = u.output.numel() * batch * 4;
    for (auto& [n, q] : u.module->named_parameters()) {
      const auto it = fsdp_unit.find(q);
      c.params.push_back({u.name + "." + n, q->data().numel() * 4, it != fsdp_unit.end() ? it->second : ""});
    }
    p.layers.push_back(std::move(c));
  }
  return p;
}

StepProfile analytic_profile(const std::string& model_name, int64_t batch, double single_step_s, const Hardware& hw,
                             const ModelOptions& options, std::optional<double> optimizer_s) {
  DPB_CHECK(batch >= 1) << "--batch must be at least 1, got " << batch;
  DPB_CHECK(single_step_s > 0) << "--single-step-s must be a positive number of seconds, got " << single_step_s;
  DPB_CHECK(hw.peak_flops > 0 && hw.memory_bandwidth > 0)
      << "an analytic profile needs the hardware's peak FLOP/s and memory bandwidth (a --hardware preset)";
  Generator gen(0);
  auto model = build_model(model_name, gen, options);
  StepProfile p = layer_skeleton(*model, batch);
  p.source = "analytic";
  const std::vector<ProfileUnit> units = profile_units(*model);
  std::vector<double> weight;
  double total = 0;
  int64_t params = 0;
  const double b = static_cast<double>(batch);
  for (size_t i = 0; i < units.size(); ++i) {
    int64_t param_bytes = 0;
    for (const auto& q : p.layers[i].params) param_bytes += q.bytes;
    params += param_bytes / 4;
    const double bytes = 4.0 * b * static_cast<double>(units[i].input.numel() + units[i].output.numel()) + param_bytes;
    const double w = std::max(p.layers[i].flops / hw.peak_flops, bytes / hw.memory_bandwidth);
    weight.push_back(w);
    total += 3 * w;  // forward, and backward at twice its cost
  }
  p.optimizer_s = optimizer_s ? *optimizer_s : 20.0 * static_cast<double>(params) / hw.memory_bandwidth;
  const double layers_s = single_step_s - p.optimizer_s;
  DPB_CHECK(layers_s > 0) << "--single-step-s " << single_step_s << " s is shorter than the optimizer alone on "
                          << hw.gpu << " (" << p.optimizer_s << " s)";
  for (size_t i = 0; i < p.layers.size(); ++i) {
    p.layers[i].forward_s = layers_s * weight[i] / total;
    p.layers[i].backward_s = 2 * p.layers[i].forward_s;
  }
  p.copy_bytes_per_s = hw.memory_bandwidth / 2;  // each byte copied is read once and written once
  p.evidence = "one-device step of " + std::to_string(single_step_s) + " s split across " +
               std::to_string(p.layers.size()) + " layers by a roofline of their FLOPs and bytes on " + hw.gpu +
               "; copies at half its memory bandwidth";
  return p;
}

StepProfile profile_from_report(const std::string& path) {
  const reports::RunReport r = reports::RunReport::read(path);
  const std::string doc = "report '" + escape_untrusted(path) + "'";
  DPB_CHECK(!r.runs.empty() && r.runs.front().layer_profile)
      << doc << " has no layer profile (runs[0].layer_profile): record one with dpbench --mode=single "
      << "--layer-profile --json=FILE";
  DPB_CHECK(r.runs.front().world_size == 1) << doc << ": a layer profile comes from a single-device run";
  StepProfile p = *r.runs.front().layer_profile;
  // A profile recorded before it carried the ranks' lag: the run's steps give it.
  if (p.rank_lag.empty()) {
    std::vector<double> steps;
    for (const auto& t : r.runs.front().step_times_s)
      if (t) steps.push_back(*t);
    p.rank_lag = reports::rank_lags(steps);
  }
  return p;
}

}  // namespace dpb::sim
