#pragma once
// Training runs for the CUDA tests: K steps of a model through the Trainer (its loader,
// pinned batches and all) from the same seed, weights and batches on any device or
// devices, and how far two runs ended apart relative to how far training moved them.
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "engine/backend/cpu/cpu_context.h"
#include "engine/data/synthetic.h"
#include "engine/data/tokens.h"
#include "engine/nn/batchnorm2d.h"
#include "engine/train/trainer.h"

namespace dpb::test {

struct TrainedRun {
  std::vector<std::pair<std::string, std::vector<float>>> initial, params;
  std::vector<double> losses;
  std::vector<int64_t> all_gather_bytes;  // per step (FSDP's parameters, tensor parallelism's loss)
};

// `steps` SGD steps of `name` (BatchNorm frozen: its statistics fixed, the setting in
// which every device and mode computes the same) on batches of `batch` synthetic
// samples; `setup` chooses the device(s) and mode.
inline TrainedRun train_steps(const std::string& name, int64_t batch, int64_t steps,
                              const std::function<void(TrainOptions&)>& setup) {
  cpu::CpuDeviceScope scope(0);
  Generator g(7);
  auto model = build_model(name, g);
  freeze_batchnorm(*model, true);
  const auto& spec = model->spec();
  TrainOptions o;
  o.batch = batch;
  o.steps = steps;
  o.warmup = 0;
  o.seed = 7;
  o.optim.lr = 0.01f;
  o.workers = 1;
  setup(o);
  // Sized by the global batch, so that DDP's ranks and one device on their global batch
  // draw the same permutation of the same samples (tensor-parallel ranks share a batch).
  const int64_t global = o.batch * (o.ddp.group && splits_batch(o.mode) ? o.ddp.group->size() : 1);
  std::unique_ptr<Dataset> data;
  if (spec.input_dtype == DType::i32) data = std::make_unique<SyntheticTokens>(spec.input[0], spec.outputs, 4 * global, 7);
  else data = std::make_unique<SyntheticDataset>(spec.input, spec.loss, spec.outputs, 4 * global, 7);
  Trainer t(*model, *data, o);
  TrainedRun r;
  for (auto& [n, p] : model->named_parameters()) r.initial.emplace_back(n, p->data().to_vector());
  for (const auto& s : t.run().steps) {
    r.losses.push_back(s.loss);
    r.all_gather_bytes.push_back(s.all_gathers.bytes);
  }
  for (auto& [n, p] : model->named_parameters()) r.params.emplace_back(n, p->data().to_vector());
  return r;
}

inline TrainedRun train_steps(const std::string& name, Device device, int64_t batch, int64_t steps) {
  return train_steps(name, batch, steps, [&](TrainOptions& o) { o.device = device; });
}

// |theta_got - theta_want| / |theta_want - theta_0| over all parameters (L2); `worst`
// names the parameter with the largest such ratio.
inline double trajectory_error(const TrainedRun& got, const TrainedRun& want, std::string* worst) {
  double diff = 0, moved = 0, worst_ratio = -1;
  for (size_t i = 0; i < want.params.size(); ++i) {
    const auto& a = got.params[i].second;
    const auto& b = want.params[i].second;
    const auto& b0 = want.initial[i].second;
    double d = 0, m = 0;
    for (size_t k = 0; k < b.size(); ++k) {
      d += static_cast<double>(a[k] - b[k]) * (a[k] - b[k]);
      m += static_cast<double>(b[k] - b0[k]) * (b[k] - b0[k]);
    }
    diff += d;
    moved += m;
    if (m > 0 && d / m > worst_ratio) {
      worst_ratio = d / m;
      *worst = want.params[i].first;
    }
  }
  return std::sqrt(diff / std::max(moved, 1e-300));
}

}  // namespace dpb::test
