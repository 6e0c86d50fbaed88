#pragma once
// --layer-profile: after a single-device run, each layer's forward and backward time on
// a batch of the run's size, the optimizer's step on a copy of the model, and the rest of
// the measured step: the profile `dpbench --simulate --profile=REPORT` replays.
#include "engine/models/model.h"
#include "engine/optim/optimizer.h"
#include "reports/layer_profile.h"

namespace dpb::bench {

// `step_times_s`: the run's measured steps (their median sets the total, their spread the
// ranks' lag). The model's weights and BatchNorm statistics stay as trained (its
// gradients are overwritten).
reports::LayerProfile measure_layer_profile(Model& model, int64_t batch, Device device,
                                            const OptimizerOptions& optimizer,
                                            const std::vector<double>& step_times_s, uint64_t seed);

// The run's median step sets the profile's total: layers timed one at a time, 5 passes
// each, can add up to more than the step they make up over the whole run (a synchronize
// after each, caches cold, a noisy pass); then they are scaled, keeping their shares, so
// that layers and optimizer make the median step (the evidence says by how much), and a
// profile recorded alone and one recorded beside another rank compare step for step.
// Sets other_s: the median step less layers and optimizer (never negative).
void fit_layers_to_step(reports::LayerProfile& p, double step_median_s);

}  // namespace dpb::bench
