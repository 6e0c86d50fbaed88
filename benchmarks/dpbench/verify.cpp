#include "benchmarks/dpbench/verify.h"

#include <fmt/format.h>

#include <cmath>
#include <ostream>

#include "engine/backend/cpu/cpu_context.h"
#include "engine/train/trainer.h"

namespace dpb::bench {

namespace {

using Snapshot = std::vector<std::vector<float>>;

Snapshot snapshot(Model& m) {
  Snapshot p;
  for (auto& [name, q] : m.named_parameters()) p.push_back(q->data().to_vector());
  return p;
}

// Trains verify.steps steps and returns the model (with its parameters before training
// in `initial`).
// `halves`: the reference with each step's batch in two halves, accumulated (the same
// sums in another order: the noise floor of float arithmetic).
std::unique_ptr<Model> train(const BenchOptions& o, bool parallel, const RankContext* rank, Snapshot* initial,
                             bool halves = false) {
  BenchOptions ob = o;
  // DDP's reference: one device on the union of the ranks' batches (the shards of a
  // DistributedSampler step are consecutive positions of the same permutation).
  // Tensor parallelism's: one device on the same batch.
  if (rank && !parallel && splits_batch(o.mode)) ob.train.batch = o.train.batch * rank->data_ranks();
  if (halves) {
    ob.train.batch /= 2;
    ob.train.accum_steps *= 2;
  }
  RunSetup setup = prepare_run(ob, parallel, parallel ? rank : nullptr);
  setup.train.steps = o.verify.steps;
  setup.train.epochs = 0;
  setup.train.warmup = 0;
  if (initial) *initial = snapshot(*setup.model);
  Trainer trainer(*setup.model, *setup.data.train, setup.train, nullptr, setup.data.augment.get());
  trainer.run();
  return std::move(setup.model);
}

}  // namespace

VerifyResult run_verify(const BenchOptions& o, std::ostream& out, const RankContext* rank) {
  const int world = rank ? rank->group->size() : 1;
  apply_process_settings(o, rank ? 1 : o.device.count);
  cpu::CpuDeviceScope scope(0);
  auto candidate = train(o, true, rank, nullptr);
  VerifyResult v;
  if (rank && rank->group->rank() != 0) {
    v.passed = true;  // rank 0 compares and reports
    return v;
  }
  Snapshot initial;
  auto reference = train(o, false, rank, &initial);
  // Each parameter's difference from single-device training, relative to how far
  // single-device training moved it (L2 norms): a scale-free measure that stays meaningful
  // for parameters that start at zero (biases) and over several steps.
  auto ref = reference->named_parameters(), got = candidate->named_parameters();
  std::vector<double> rel_of(ref.size(), 0.0), update_of(ref.size(), 0.0), size_of(ref.size(), 0.0);
  double diff2 = 0, update2 = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const auto a = ref[i].second->data().to_vector(), b = got[i].second->data().to_vector();
    double d2 = 0, u2 = 0, n2 = 0;
    for (size_t k = 0; k < a.size(); ++k) {
      const double d = static_cast<double>(a[k]) - b[k], u = static_cast<double>(a[k]) - initial[i][k];
      v.max_abs_diff = std::max(v.max_abs_diff, std::fabs(d));
      d2 += d * d;
      u2 += u * u;
      n2 += static_cast<double>(a[k]) * a[k];
    }
    diff2 += d2;
    update2 += u2;
    // A parameter that did not move: relative to its size instead.
    const double rel = d2 == 0 ? 0 : std::sqrt(d2 / std::max(u2, 1e-12 * n2 + 1e-30));
    rel_of[i] = rel;
    update_of[i] = u2;
    size_of[i] = n2;
    if (rel > v.max_rel_diff) {
      v.max_rel_diff = rel;
      v.worst_parameter = ref[i].first;
    }
  }
  v.model_rel_diff = diff2 == 0 ? 0 : std::sqrt(diff2 / std::max(update2, 1e-30));
  // SyncBatchNorm sums the statistics in another order than one device does; in float
  // that moves pre-activations sitting at a ReLU's kink to its other side, and with small
  // batches the gradients then differ by up to a percent after one step (PyTorch's
  // SyncBatchNorm behaves the same way).
  const bool ddp = mode_info(o.mode).all_reduces_gradients;
  const bool batch_stats = reference->spec().has_batchnorm && ddp && o.ddp.sync_bn;
  const double tolerance = o.verify.tolerance >= 0 ? o.verify.tolerance : (batch_stats ? 2e-2 : 1e-3);
  v.passed = v.max_rel_diff <= tolerance;
  // Over the tolerance: how far float rounding alone moves the reference. Adam turns a
  // gradient that is exactly zero but for rounding (the key part of an attention bias) into
  // full-size steps of random sign, so a part of a parameter may differ by as much as it
  // moved while the arithmetic is right. The reference again with each batch in two
  // halves (the same sums in another order) measures that floor per parameter; a
  // parameter within kFloorFactor of its floor is noise, not a difference.
  constexpr double kFloorFactor = 4.0;
  std::string floor_note;
  const int64_t ref_batch = o.train.batch * (rank && splits_batch(o.mode) ? rank->data_ranks() : 1);
  // (Not for BatchNorm models: their halves normalise with other statistics, other maths.)
  if (!v.passed && ref_batch % 2 == 0 && !reference->spec().has_batchnorm) {
    auto again = train(o, false, rank, nullptr, true);
    auto alt = again->named_parameters();
    double worst_floor = 0, beyond = 0;
    std::string worst_floor_param, beyond_param;
    for (size_t i = 0; i < ref.size(); ++i) {
      const auto a = ref[i].second->data().to_vector(), b = alt[i].second->data().to_vector();
      double d2 = 0;
      for (size_t k = 0; k < a.size(); ++k) d2 += (static_cast<double>(a[k]) - b[k]) * (static_cast<double>(a[k]) - b[k]);
      const double floor = d2 == 0 ? 0 : std::sqrt(d2 / std::max(update_of[i], 1e-12 * size_of[i] + 1e-30));
      if (floor > worst_floor) {
        worst_floor = floor;
        worst_floor_param = ref[i].first;
      }
      // How far past both the tolerance and its noise floor this parameter is.
      const double over = rel_of[i] / std::max(tolerance, kFloorFactor * floor);
      if (over > beyond) {
        beyond = over;
        beyond_param = ref[i].first;
      }
    }
    v.noise_floor = worst_floor;
    v.passed = beyond <= 1.0;
    floor_note = fmt::format(
        "noise floor (one device with each batch in two halves: the same sums in another order): {:.3g} for {} (the "
        "largest); every parameter within {:g}x its own floor or the tolerance: {}{}\n",
        worst_floor, worst_floor_param.empty() ? "-" : worst_floor_param, kFloorFactor, v.passed ? "yes" : "no",
        v.passed ? "" : fmt::format(" ({} is {:.3g}x past both)", beyond_param, beyond));
  }
  const std::string mode = parallel_mode_name(o.mode);
  out << fmt::format("verify: {} steps of {} (--mode={}, {} {}) against --mode=single{} from the same start\n",
                     o.verify.steps, o.data.model, mode, world > 1 ? world : o.device.count,
                     rank ? "ranks" : "device(s)",
                     rank ? fmt::format(" with the ranks' global batch of {}",
                                        o.train.batch * (splits_batch(o.mode) ? rank->data_ranks() : 1))
                          : "");
  out << fmt::format("difference from single-device training, relative to how far it moved the parameters: {:.3g} for "
                     "{} (the largest), {:.3g} for the whole model; largest element difference {:.3g}; "
                     "tolerance {:.3g}: {}\n",
                     v.max_rel_diff, v.worst_parameter.empty() ? "-" : v.worst_parameter, v.model_rel_diff,
                     v.max_abs_diff, tolerance, v.max_rel_diff <= tolerance ? "PASS" : v.passed ? "within the noise floor" : "FAIL");
  out << floor_note;
  if (!floor_note.empty()) out << "verify: " << (v.passed ? "PASS" : "FAIL") << "\n";
  const bool dp = o.mode == ParallelMode::dp;
  if (!v.passed && reference->spec().has_batchnorm && (dp || (ddp && !o.ddp.sync_bn)))
    out << "note: in " << mode << " each " << (dp ? "replica" : "rank")
        << " normalises BatchNorm with its own batch's statistics (as PyTorch's "
        << (dp ? "DataParallel" : "DistributedDataParallel without SyncBatchNorm")
        << " does), so models with BatchNorm differ from single-device training by design"
        << (ddp ? "; --sync-bn makes them equal" : "") << "\n";
  if (!v.passed && reference->spec().has_batchnorm && mode_info(o.mode).pipelines && micro_batches(o) > 1)
    out << "note: in mp each micro-batch is normalised by BatchNorm with its own statistics (as in GPipe and "
           "PyTorch's Pipe), so models with BatchNorm differ from single-device training by design; "
           "--schedule=naive (one micro-batch) makes them equal\n";
  if (!v.passed && batch_stats)
    out << "note: training with batch statistics at small batches is chaotic: float rounding (SyncBatchNorm sums in "
           "another order than one device) flips ReLUs at their kink and the difference grows every step; compare one "
           "step (--verify-steps=1)\n";
  if (!v.passed && ddp && !o.ddp.distributed_sampler)
    out << "note: with --sampler=none every rank trains on the same samples, so the ranks' global batch is not the "
           "single run's\n";
  return v;
}

}  // namespace dpb::bench
