#pragma once
// A one-device layer profile (dpbench --layer-profile; runs[0].layer_profile in the
// report), what `dpbench --simulate` replays: per layer (a unit of work as backward
// produces gradients: a model's top-level children with Sequential containers opened),
// forward and backward time, forward FLOPs, the bytes of its output (what a pipeline
// stage boundary sends) and its parameters in registration order (which, with the
// bucket size, give DDP's exact buckets); the optimizer's time; and the step's time
// outside layers and optimizer (loss, data wait, launch gaps).
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace dpb::reports {

class JsonView;

struct ProfiledParam {
  std::string name;
  int64_t bytes = 0;
};

struct ProfiledLayer {
  std::string name;  // module path ("layer1.0", "features.3", "fc")
  double forward_s = 0, backward_s = 0;
  double flops = 0;          // forward, whole batch
  int64_t output_bytes = 0;  // whole batch
  std::vector<ProfiledParam> params;
};

struct LayerProfile {
  std::string model;
  int64_t batch = 0;     // per device
  std::string source;    // "measured" | "analytic"
  std::string evidence;  // what the times come from, in words
  std::vector<ProfiledLayer> layers;  // forward order
  double optimizer_s = 0;
  double other_s = 0;
  double step_cv = 0;  // measured: the run's step-time coefficient of variation

  double compute_s() const;  // forward + backward of every layer
  double step_s() const { return compute_s() + optimizer_s + other_s; }
  int64_t gradient_bytes() const;

  nlohmann::json to_json() const;
  // Throws dpb::Error naming the field that does not fit.
  static LayerProfile from_json(const JsonView& v);
};

}  // namespace dpb::reports
