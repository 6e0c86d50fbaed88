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
#include <optional>
#include <string>
#include <vector>

namespace dpb::reports {

class JsonView;

struct ProfiledParam {
  std::string name;
  int64_t bytes = 0;
  // The FSDP unit the model's wrap policy puts it in: its layer's name, or "root" (a
  // tied weight, a layer the policy does not wrap); empty where unknown (each layer with
  // parameters is then a unit of its own).
  std::string fsdp_unit;
};

struct ProfiledLayer {
  std::string name;  // module path ("layer1.0", "features.3", "fc")
  double forward_s = 0, backward_s = 0;
  double flops = 0;          // forward, whole batch
  int64_t output_bytes = 0;  // whole batch
  std::vector<ProfiledParam> params;
};

// How far the slowest of N ranks runs behind the median step, as a profiled run's steps
// say: with every rank's step drawn independently from those steps, the median of the
// slowest of N is their 0.5^(1/N) quantile. `relative` is that quantile over the median,
// less 1 (0.03: the slowest of N is 3 % slower than the typical step).
struct RankLag {
  int ranks = 2;
  double relative = 0;
};
// The lags `steps` support: N = 2, 4, 8, … while the quantile lies inside the sample (at
// least one step expected beyond it: 1 / (1 − 0.5^(1/N)) ≤ the number of steps). Fewer
// than 4 steps: none.
std::vector<RankLag> rank_lags(const std::vector<double>& steps);

struct LayerProfile {
  std::string model;
  int64_t batch = 0;     // per device
  std::string source;    // "measured" | "analytic"
  std::string evidence;  // what the times come from, in words
  std::vector<ProfiledLayer> layers;  // forward order
  double optimizer_s = 0;
  double other_s = 0;
  double step_cv = 0;  // measured: the run's step-time coefficient of variation
  std::vector<RankLag> rank_lag;  // measured: from the run's steps (rank_lags); empty if unknown
  // The device's rate (bytes/s) copying the parameters between their own storage and one
  // flat buffer, each tensor a slice of it: what FSDP's copy-in (gradients into the
  // reduce-scatter's buffer) and copy-out (gathered rows into the unit's parameters) do on
  // the training stream. Measured (or the hardware's memory bandwidth over 2, analytic);
  // nullopt where unknown (then no copies are charged).
  std::optional<double> copy_bytes_per_s;

  double compute_s() const;  // forward + backward of every layer
  double step_s() const { return compute_s() + optimizer_s + other_s; }
  int64_t gradient_bytes() const;

  nlohmann::json to_json() const;
  // Throws dpb::Error naming the field that does not fit.
  static LayerProfile from_json(const JsonView& v);
};

}  // namespace dpb::reports
