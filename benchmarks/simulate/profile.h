#pragma once
// The one-device profile `dpbench --simulate` replays: per layer (a model's unit of
// work, as backward produces gradients), forward and backward time, forward FLOPs, the
// bytes of its output (what a pipeline stage boundary sends) and its parameters in
// registration order (which, with --bucket-mb, give the reducer's exact buckets); plus
// the optimizer's time and what the step spends outside layers.
//
// Two sources:
//   measured  a single-device dpbench run with --layer-profile (its report's
//             runs[0].layer_profile), times from the device's clock where the run had
//             one (the host's on logical CPU devices, which is their device time);
//   analytic  a step time T measured or published for one device (--single-step-s),
//             split across the model's layers by a roofline of their FLOPs and bytes on
//             the hardware preset's peak FLOP/s and memory bandwidth; backward costs
//             twice forward; the optimizer (SGD with momentum: 20 bytes per parameter)
//             at the memory bandwidth.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/models/model.h"
#include "reports/layer_profile.h"

namespace dpb::sim {

struct Hardware;

// The profile is the report's (reports/layer_profile.h).
using StepProfile = reports::LayerProfile;
using LayerCost = reports::ProfiledLayer;
using ParamInfo = reports::ProfiledParam;

// The units a profile times are the pipeline's (pipeline_units: top-level children with
// Sequential containers opened), with their per-sample input and output shapes.
struct ProfileUnit {
  std::string name;
  Module* module = nullptr;
  Shape input, output;  // per sample
};
std::vector<ProfileUnit> profile_units(Model& model);

// The layers of `model` with their FLOPs, output bytes and parameters for `batch`, times
// left at 0.
StepProfile layer_skeleton(Model& model, int64_t batch);

// Splits a one-device step time across `model_name`'s layers (see above).
// `optimizer_s`: the optimizer's measured time, instead of the estimate (the step's
// remainder goes to the layers).
StepProfile analytic_profile(const std::string& model_name, int64_t batch, double single_step_s, const Hardware& hw,
                             const ModelOptions& options = {}, std::optional<double> optimizer_s = std::nullopt);

// A single-device report's layer profile. Throws dpb::Error naming what is missing.
StepProfile profile_from_report(const std::string& path);

}  // namespace dpb::sim
