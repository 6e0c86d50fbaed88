#include "benchmarks/simulate/simulator.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <optional>
#include <sstream>

#include "benchmarks/simulate/channel.h"
#include "engine/core/error.h"
#include "engine/parallel/fully_sharded.h"

namespace dpb::sim {

std::vector<BucketPlan> bucket_plan(const StepProfile& p, double first_bucket_bytes, double bucket_bytes) {
  DPB_CHECK(first_bucket_bytes > 0 && bucket_bytes > 0) << "bucket sizes must be positive";
  // (layer, parameter) in registration order, then reversed: the Reducer's order.
  std::vector<std::pair<size_t, const ParamInfo*>> order;
  for (size_t l = 0; l < p.layers.size(); ++l)
    for (const auto& q : p.layers[l].params) order.emplace_back(l, &q);
  std::vector<BucketPlan> plan;
  double bytes = 0;
  for (size_t k = order.size(); k-- > 0;) {
    if (plan.empty() || bytes >= (plan.size() == 1 ? first_bucket_bytes : bucket_bytes)) {
      plan.emplace_back();
      plan.back().ready_after_layer = order[k].first;
      bytes = 0;
    }
    BucketPlan& b = plan.back();
    b.bytes += order[k].second->bytes;
    b.params.push_back(order[k].second->name);
    b.ready_after_layer = std::min(b.ready_after_layer, order[k].first);
    bytes += static_cast<double>(order[k].second->bytes);
  }
  return plan;
}

namespace {

std::string ms(double s) {
  std::ostringstream o;
  o.precision(3);
  o << s * 1e3 << " ms";
  return o.str();
}

std::string mib(double bytes) {
  std::ostringstream o;
  o.precision(3);
  o << bytes / (1 << 20) << " MiB";
  return o.str();
}

SimPoint simulate_ddp(const StepProfile& p, const LinkModel& link, int ranks, const SimOptions& o) {
  SimPoint r;
  r.world_size = ranks;
  const double stretch = rank_stretch(p, o, ranks) * (ranks > 1 ? 1 + o.crowding : 1.0);
  double forward = 0;
  for (const auto& l : p.layers) forward += l.forward_s * stretch;
  if (ranks == 1 && !o.reducer_on_one_rank) {
    r.compute_s = p.compute_s() * stretch;
    r.step_s = r.compute_s + p.optimizer_s + p.other_s;
    r.critical_path = "compute (one device: no communication)";
    return r;
  }
  const std::vector<BucketPlan> plan = bucket_plan(p, o.first_bucket_bytes, o.bucket_bytes);
  r.buckets = static_cast<int>(plan.size());
  std::vector<double> comm_time(plan.size());
  // How much longer each all-reduce takes while compute runs beside it.
  std::vector<double> comm_stretch(plan.size(), 1.0);
  int64_t largest = 0;
  for (size_t b = 0; b < plan.size(); ++b) {
    Algorithm a = Algorithm::ring;
    comm_time[b] = ranks > 1 ? link.allreduce_s(static_cast<double>(plan[b].bytes), ranks, &a) : 0.0;
    if (comm_time[b] > 0)
      comm_stretch[b] = link.allreduce_under_load_s(static_cast<double>(plan[b].bytes), ranks) / comm_time[b];
    if (plan[b].bytes > largest) largest = plan[b].bytes, r.algorithm = algorithm_name(a);
  }
  // Buckets completed by each layer's backward (in bucket order, which is backward order).
  std::vector<std::vector<size_t>> completes(p.layers.size());
  for (size_t b = 0; b < plan.size(); ++b) completes[plan[b].ready_after_layer].push_back(b);

  // Compute is slowed while communication shares the device (the link's contention
  // scope: the step's all-reduces in flight, or only while one runs, as much as that
  // bucket's size takes where measured per byte); on one rank they move nothing and
  // contend with nothing.
  auto slow = [&](size_t b) {
    if (ranks <= 1) return 1.0;
    return 1 + link.contention_while(static_cast<double>(plan[b].bytes), comm_time[b] * comm_stretch[b]);
  };
  double t = forward, overlap = 0;
  std::deque<size_t> queue;  // launched, not finished; the front is running
  double running_left = 0;   // of the front
  size_t last_done = 0, done = 0;
  bool launched = false;
  // A bucket launched with nothing queued before it (the step's first, or one after the
  // last ended) takes an isolated all-reduce's time where the link has it; one queued
  // behind another, the back-to-back time.
  auto launch = [&](size_t b) {
    if (queue.empty()) {
      running_left = link.allreduce_on_idle_link_s(static_cast<double>(plan[b].bytes), ranks);
      r.comm_s += running_left;
    }
    queue.push_back(b);
    launched = true;
  };
  auto finish_front = [&]() {
    last_done = queue.front();
    ++done;
    queue.pop_front();
    if (!queue.empty()) {
      running_left = comm_time[queue.front()];
      r.comm_s += running_left;
    }
  };
  const bool transfers = link.contention_scope == LinkModel::ContentionScope::transfers;
  double comm_wall = 0;
  for (size_t i = p.layers.size(); i-- > 0;) {
    // At full speed; the reducer's hooks and bucket copies for this layer's gradients.
    double work = p.layers[i].backward_s * stretch +
                  link.reducer_per_gradient_s * static_cast<double>(p.layers[i].params.size());
    while (work > 0) {
      const bool contended = transfers ? !queue.empty() : launched && done < plan.size();
      const double kernel = !transfers && !queue.empty() && ranks > 1 ? link.kernel_contention : 0.0;
      const double rate = 1 / ((contended ? slow(queue.empty() ? last_done : queue.front()) : 1.0) + kernel);
      if (queue.empty()) {
        t += work / rate;
        work = 0;
        break;
      }
      // Beside compute the all-reduce takes its time under load (measured, or stretched as
      // much as compute where they share a core).
      const double comm_rate = 1 / comm_stretch[queue.front()];
      const double compute_dt = work / rate, comm_dt = running_left / comm_rate;
      const double dt = std::min(compute_dt, comm_dt);
      t += dt;
      overlap += dt;
      comm_wall += dt;
      work -= dt * rate;
      running_left -= dt * comm_rate;
      if (compute_dt >= comm_dt) {
        running_left = 0;
        finish_front();
      }
      if (compute_dt <= comm_dt) work = 0;
    }
    for (size_t b : completes[i]) launch(b);
  }
  const double backward_end = t;
  while (!queue.empty()) {
    t += running_left;
    comm_wall += running_left;
    running_left = 0;
    finish_front();
  }
  r.exposed_comm_s = t - backward_end;
  r.compute_s = backward_end;
  r.overlap = comm_wall > 0 ? std::min(1.0, overlap / comm_wall) : 0;
  r.step_s = t + p.optimizer_s + p.other_s;
  if (r.exposed_comm_s > 1e-12) {
    r.critical_path = "bucket " + std::to_string(last_done) + " (" + mib(static_cast<double>(plan[last_done].bytes)) +
                      ", " + std::to_string(plan[last_done].params.size()) + " parameters from " +
                      plan[last_done].params.back() + ") ends the step: its all-reduce finishes " +
                      ms(r.exposed_comm_s) + " after the backward";
  } else {
    r.critical_path = "compute: the backward ends after every all-reduce";
  }
  return r;
}

SimPoint simulate_fsdp(const StepProfile& p, const LinkModel& link, int ranks, const SimOptions& o) {
  SimPoint r;
  r.world_size = ranks;
  const double stretch = rank_stretch(p, o, ranks) * (ranks > 1 ? 1 + o.crowding : 1.0);
  if (ranks == 1) {
    r.compute_s = p.compute_s() * stretch;
    r.step_s = r.compute_s + p.optimizer_s + p.other_s;
    r.critical_path = "compute (one device: nothing to gather)";
    return r;
  }
  // The units, in forward order, and their bytes: as the model's wrap policy made them
  // where the profile says (each parameter's fsdp_unit: its layer's unit, or the root's),
  // else every layer with parameters a unit of its own.
  std::vector<size_t> layer_of;
  std::vector<double> bytes;
  std::vector<int> unit_at(p.layers.size(), -1);
  double root_bytes = 0;
  for (size_t l = 0; l < p.layers.size(); ++l) {
    double b = 0;
    for (const auto& q : p.layers[l].params) {
      if (q.fsdp_unit.empty() || q.fsdp_unit == p.layers[l].name)
        b += static_cast<double>(q.bytes);
      else
        root_bytes += static_cast<double>(q.bytes);  // the root's, or a unit the profile does not time
    }
    if (b <= 0) continue;
    unit_at[l] = static_cast<int>(layer_of.size());
    layer_of.push_back(l);
    bytes.push_back(b);
  }
  const int units = static_cast<int>(layer_of.size());
  r.buckets = 0;
  Channel ch(link, ranks);
  // A unit's all-gather of `b` bytes; its id.
  auto issue_gather = [&](double b, const std::string& what, const std::string& unit) {
    return ch.issue(link.all_gather_s(b, ranks), link.all_gather_under_load_s(b, ranks), b, "the all-gather of " + what,
                    LinkModel::Collective::allgather, unit);
  };
  // A unit's reduce-scatter; the training thread waits for the one before it.
  std::optional<size_t> previous_scatter;
  auto scatter = [&](double b, const std::string& what, const std::string& unit) {
    const size_t s = ch.issue(link.reduce_scatter_s(b, ranks), link.reduce_scatter_under_load_s(b, ranks), b,
                              "the reduce-scatter of " + what, LinkModel::Collective::reduce_scatter, unit);
    if (previous_scatter) ch.wait(*previous_scatter);
    previous_scatter = s;
  };
  // The training stream's copies, which one device does not make: a gathered unit's rows
  // into its parameters (copy-out), its gradients into the reduce-scatter's buffer (copy-in),
  // at the profile's measured copy rate; none where the profile does not have it.
  double copy_s = 0;
  auto copy = [&](double b) {
    if (!p.copy_bytes_per_s) return;
    const double s = b / *p.copy_bytes_per_s * stretch;
    ch.compute(s);
    copy_s += s;
  };
  const int ahead = std::max(0, o.fsdp_prefetch);
  std::vector<std::optional<size_t>> fwd(static_cast<size_t>(units)), bwd(static_cast<size_t>(units));
  auto gather = [&](std::vector<std::optional<size_t>>& g, int u, const char* pass) {
    if (u < 0 || u >= units || g[static_cast<size_t>(u)]) return;
    const std::string& name = p.layers[layer_of[static_cast<size_t>(u)]].name;
    g[static_cast<size_t>(u)] = issue_gather(bytes[static_cast<size_t>(u)], name + " (" + pass + ")", name);
  };
  // The root (parameters several layers share, or that no wrapped layer holds) is
  // gathered before the first layer and stays gathered through the backward; its
  // gradients are reduce-scattered once the backward is done.
  if (root_bytes > 0) {
    ch.wait(issue_gather(root_bytes, "the root unit", kFsdpRootUnit));
    copy(root_bytes);
  }
  for (size_t l = 0; l < p.layers.size(); ++l) {
    const int u = unit_at[l];
    if (u >= 0) {
      gather(fwd, u, "forward");
      ch.wait(*fwd[static_cast<size_t>(u)]);
      copy(bytes[static_cast<size_t>(u)]);
      for (int k = 1; k <= ahead; ++k) gather(fwd, u + k, "forward");
    }
    ch.compute(p.layers[l].forward_s * stretch);
  }
  for (size_t l = p.layers.size(); l-- > 0;) {
    const int u = unit_at[l];
    const bool regather = o.fsdp_reshard && u >= 0 && u != units - 1;
    if (regather) {
      gather(bwd, u, "backward");
      ch.wait(*bwd[static_cast<size_t>(u)]);
      copy(bytes[static_cast<size_t>(u)]);
    }
    if (u >= 0 && o.fsdp_reshard)
      for (int k = 1; k <= ahead; ++k)
        if (u - k >= 0 && u - k != units - 1) gather(bwd, u - k, "backward");
    ch.compute(p.layers[l].backward_s * stretch);
    if (u >= 0) {
      copy(bytes[static_cast<size_t>(u)]);
      scatter(bytes[static_cast<size_t>(u)], p.layers[l].name, p.layers[l].name);
    }
  }
  if (root_bytes > 0) {
    copy(root_bytes);
    scatter(root_bytes, "the root unit", kFsdpRootUnit);
  }
  const double exposed_before = ch.exposed_s;
  ch.wait_all();
  r.compute_s = p.compute_s() * stretch + copy_s;
  r.copy_s = copy_s;
  r.comm_s = ch.comm_s;
  r.exposed_comm_s = ch.exposed_s;
  r.overlap = ch.comm_s > 0 ? std::min(1.0, ch.overlap_s / ch.comm_s) : 0;
  r.step_s = ch.t + p.optimizer_s / ranks + p.other_s;
  r.collectives = std::move(ch.issued);
  r.critical_path = ch.exposed_s - exposed_before > 1e-12
                        ? ch.last_waited + " ends the step, " + ms(ch.exposed_s - exposed_before) + " after the backward"
                    : ch.exposed_s > 1e-12 ? "compute waits " + ms(ch.exposed_s) + " for collectives, the longest for " +
                                                 ch.last_waited
                                           : "compute: every collective hidden";
  return r;
}

// Tensor parallelism (Megatron's plan, as --mode=tp cuts a model): every rank runs the
// whole batch through its part of each cut layer, so a cut layer's time divides by the
// ranks; each all-reduce waits in full (nothing overlaps it). Which layers are cut is
// read from the profile's parameter names:
//   - a transformer block (it has attn.c_attn.weight): 1/W of its time; two all-reduces
//     of its output (the activations) in the forward and two in the backward;
//   - the token embedding (transformer.wte.weight): one all-reduce of its output forward;
//   - the tied head (lm_head, no parameters of its own): 1/W of its time, one all-reduce
//     of its input's gradient (the previous layer's output) backward; the loss one
//     all-gather of 16 bytes a row of logits (this rank's max, sum, label logit, argmax);
//   - a stack of linear layers: pairs of consecutive linears column- then row-parallel,
//     with what lies between them (their activations are cut too): 1/W each; one
//     all-reduce of the row layer's output forward and of the column layer's input
//     gradient backward (none for the model's first layer, which needs no input gradient).
// The optimizer steps on 1/W of the cut parameters and all of the replicated ones.
SimPoint simulate_tp(const StepProfile& p, const LinkModel& link, int ranks, const SimOptions& o) {
  SimPoint r;
  r.world_size = ranks;
  const double stretch = rank_stretch(p, o, ranks) * (ranks > 1 ? 1 + o.crowding : 1.0);
  const size_t n = p.layers.size();
  auto ends = [](const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  auto has_param = [&](size_t l, const std::string& suffix) {
    for (const auto& q : p.layers[l].params)
      if (ends(q.name, suffix)) return true;
    return false;
  };
  std::vector<bool> cut(n, false);
  std::vector<int> fwd_reduces(n, 0), bwd_reduces(n, 0);  // all-reduces of the layer's output / of its input's gradient
  std::vector<size_t> row_layers;                         // MLP: the row-parallel linears (their bias stays whole)
  bool transformer = false;
  for (size_t l = 0; l < n; ++l) transformer = transformer || has_param(l, "attn.c_attn.weight");
  double table_bytes = 0, embedding_out = 0, logits_bytes = 0;
  if (transformer) {
    for (size_t l = 0; l < n; ++l) {
      if (has_param(l, "attn.c_attn.weight")) {
        cut[l] = true;
        fwd_reduces[l] = bwd_reduces[l] = 2;
      } else if (has_param(l, "transformer.wte.weight")) {
        fwd_reduces[l] = 1;
        for (const auto& q : p.layers[l].params) table_bytes += static_cast<double>(q.bytes);
        embedding_out = static_cast<double>(p.layers[l].output_bytes);
      } else if (p.layers[l].name == "lm_head") {
        cut[l] = true;
        bwd_reduces[l] = 1;
        logits_bytes = static_cast<double>(p.layers[l].output_bytes);
      }
    }
  } else {
    std::vector<size_t> linears;
    for (size_t l = 0; l < n; ++l)
      if (p.layers[l].params.size() == 2 && has_param(l, ".weight") && has_param(l, ".bias")) linears.push_back(l);
    for (size_t k = 0; k + 1 < linears.size(); k += 2) {
      for (size_t l = linears[k]; l <= linears[k + 1]; ++l) cut[l] = true;
      fwd_reduces[linears[k + 1]] = 1;
      bwd_reduces[linears[k]] = k > 0 ? 1 : 0;  // the model's first layer needs no input gradient
      row_layers.push_back(linears[k + 1]);
    }
    DPB_CHECK(!row_layers.empty() || ranks == 1)
        << "--simulate --mode=tp: profile of '" << p.model
        << "' has no layers tensor parallelism cuts (transformer blocks, or pairs of linear layers)";
  }
  // A layer's input gradient is the size of its input: the previous layer's output.
  auto input_bytes = [&](size_t l) { return l > 0 ? static_cast<double>(p.layers[l - 1].output_bytes) : 0.0; };
  Channel ch(link, ranks);
  auto blocking = [&](double t, const std::string& what) {
    if (ranks > 1 && t > 0) ch.wait(ch.issue(t, t, 0, what));  // waited for at once: nothing beside it
  };
  double compute = 0;
  for (size_t l = 0; l < n; ++l) {
    const double f = p.layers[l].forward_s * stretch / (cut[l] ? ranks : 1);
    ch.compute(f);
    compute += f;
    for (int k = 0; k < fwd_reduces[l]; ++k)
      blocking(link.allreduce_s(static_cast<double>(p.layers[l].output_bytes), ranks),
               "the all-reduce after " + p.layers[l].name);
  }
  if (logits_bytes > 0 && embedding_out > 0 && table_bytes > 0) {
    // The loss's statistics, 16 bytes a row of logits: rows from the logits (rows x V x 4
    // bytes), the embedding's output (rows x C x 4) and its table (V x C x 4).
    const double vocab = std::sqrt(table_bytes / 4 * logits_bytes / embedding_out);
    const double rows = logits_bytes / (4 * vocab);
    blocking(link.all_gather_s(16 * rows * ranks, ranks), "the all-gather of the loss's statistics");
  }
  for (size_t l = n; l-- > 0;) {
    const double b = p.layers[l].backward_s * stretch / (cut[l] ? ranks : 1);
    ch.compute(b);
    compute += b;
    for (int k = 0; k < bwd_reduces[l]; ++k)
      blocking(link.allreduce_s(input_bytes(l), ranks), "the all-reduce of " + p.layers[l].name + "'s input gradient");
  }
  // The optimizer on 1/W of the cut parameters (not norms, not the biases a row-parallel
  // layer adds whole) and on every replicated one.
  double cut_bytes = 0, all_bytes = 0;
  for (size_t l = 0; l < n; ++l)
    for (const auto& q : p.layers[l].params) {
      all_bytes += static_cast<double>(q.bytes);
      const bool row_bias = ends(q.name, "c_proj.bias") ||
                            (ends(q.name, ".bias") && std::find(row_layers.begin(), row_layers.end(), l) != row_layers.end());
      if ((cut[l] && q.name.find(".ln_") == std::string::npos && !row_bias) || q.name == "transformer.wte.weight")
        cut_bytes += static_cast<double>(q.bytes);
    }
  const double optimizer_share = all_bytes > 0 ? (cut_bytes / ranks + (all_bytes - cut_bytes)) / all_bytes : 1.0;
  r.compute_s = compute;
  r.comm_s = ch.comm_s;
  r.exposed_comm_s = ch.exposed_s;
  r.overlap = 0;
  r.step_s = ch.t + p.optimizer_s * optimizer_share + p.other_s;
  r.critical_path = ch.exposed_s > 1e-12
                        ? "compute waits " + ms(ch.exposed_s) + " for tensor-parallel collectives, each in full"
                        : "compute (one rank: nothing to all-reduce)";
  return r;
}

SimPoint simulate_dp(const StepProfile& p, const LinkModel& link, int ranks) {
  SimPoint r;
  r.world_size = ranks;
  r.compute_s = p.compute_s();
  if (ranks > 1) {
    const double bytes = static_cast<double>(p.gradient_bytes());
    // Parameters broadcast to the replicas, gradients reduced onto the primary: each
    // about half an all-reduce's traffic.
    r.comm_s = link.reduce_scatter_s(bytes, ranks) + link.all_gather_s(bytes, ranks);
    r.exposed_comm_s = r.comm_s;
    r.critical_path = "broadcast of the parameters and reduction of the gradients onto the primary (" +
                      ms(r.comm_s) + ", not overlapped)";
  } else {
    r.critical_path = "compute (one device)";
  }
  r.step_s = r.compute_s + r.comm_s + p.optimizer_s + p.other_s;
  return r;
}

SimPoint simulate_mp(const StepProfile& p, const LinkModel& link, int stages, int micro) {
  SimPoint r;
  r.world_size = stages;
  const size_t n = p.layers.size();
  stages = std::min<int>(stages, static_cast<int>(n));
  // Contiguous stages balanced by time: the smallest largest-stage time (binary search on
  // the bound, greedy packing).
  std::vector<double> cost(n);
  double total = 0, biggest = 0;
  for (size_t i = 0; i < n; ++i) {
    cost[i] = p.layers[i].forward_s + p.layers[i].backward_s;
    total += cost[i];
    biggest = std::max(biggest, cost[i]);
  }
  auto fits = [&](double bound, std::vector<size_t>* cuts) {
    int used = 1;
    double acc = 0;
    for (size_t i = 0; i < n; ++i) {
      if (acc + cost[i] > bound && acc > 0) {
        ++used;
        acc = 0;
        if (cuts) cuts->push_back(i);
      }
      acc += cost[i];
    }
    return used <= stages;
  };
  double lo = biggest, hi = total;
  for (int it = 0; it < 60; ++it) {
    const double mid = (lo + hi) / 2;
    (fits(mid, nullptr) ? hi : lo) = mid;
  }
  std::vector<size_t> cuts;
  fits(hi, &cuts);
  const double slot = hi / micro;
  double transfer = 0;
  for (size_t c : cuts) {
    const double bytes = static_cast<double>(p.layers[c - 1].output_bytes) / micro;
    transfer += 2 * link.send_s(bytes, false);  // activations forward, their gradients back
  }
  const double slots = micro + static_cast<int>(cuts.size());
  r.compute_s = slots * slot;
  r.comm_s = transfer * micro;
  r.exposed_comm_s = r.comm_s;
  r.bubble = static_cast<double>(cuts.size()) / slots;
  r.step_s = r.compute_s + r.comm_s + p.optimizer_s + p.other_s;
  r.critical_path = "the slowest of " + std::to_string(cuts.size() + 1) + " stages (" + ms(hi) +
                    " per step); bubble " + std::to_string(static_cast<int>(std::lround(r.bubble * 100))) + " %";
  return r;
}

}  // namespace

SimPoint simulate_point(const StepProfile& p, const LinkModel& link, int ranks, const SimOptions& o) {
  DPB_CHECK(ranks >= 1) << "a simulated run needs at least 1 rank, got " << ranks;
  DPB_CHECK(!p.layers.empty()) << "the profile has no layers";
  SimPoint r;
  switch (o.mode) {
    case ParallelMode::dp: r = simulate_dp(p, link, ranks); break;
    case ParallelMode::pipeline: r = simulate_mp(p, link, ranks, std::max(1, o.micro_batches)); break;
    case ParallelMode::fsdp: r = simulate_fsdp(p, link, ranks, o); break;
    case ParallelMode::tp: r = simulate_tp(p, link, ranks, o); break;
    default: r = simulate_ddp(p, link, ranks, o); break;
  }
  // The pipeline's and tensor parallelism's ranks share one batch.
  const double global_batch =
      static_cast<double>(p.batch) * (shares_one_batch(o.mode) ? 1 : ranks);
  r.throughput = r.step_s > 0 ? global_batch / r.step_s : 0;
  return r;
}

Simulation simulate(const StepProfile& p, const LinkModel& link, const std::vector<int>& ranks, const SimOptions& o) {
  Simulation s{p, link, o, {}};
  const SimPoint one = simulate_point(p, link, 1, o);
  for (int n : ranks) {
    SimPoint r = simulate_point(p, link, n, o);
    // Throughput over n devices against n independent devices (the pipeline's global
    // batch stays one device's).
    r.efficiency = one.throughput > 0 ? r.throughput / (n * one.throughput) : 0;
    if (mode_info(o.mode).pipelines) r.efficiency = one.step_s / (r.step_s * n);
    s.points.push_back(r);
  }
  return s;
}

double fit_contention(const StepProfile& p, LinkModel link, int ranks, double measured_step_s, const SimOptions& o) {
  DPB_CHECK(ranks >= 2) << "contention is fitted on a run of at least 2 ranks, got " << ranks;
  DPB_CHECK(measured_step_s > 0) << "a measured step time must be positive, got " << measured_step_s;
  double lo = 0, hi = 10;
  link.stolen.reset();  // one figure, fitted, for every collective
  link.contention = lo;
  const double at_lo = simulate_point(p, link, ranks, o).step_s;
  link.contention = hi;
  const double at_hi = simulate_point(p, link, ranks, o).step_s;
  DPB_CHECK(at_lo <= measured_step_s && measured_step_s <= at_hi)
      << "no contention in [0, 10] gives the measured " << measured_step_s << " s at " << ranks
      << " ranks (the simulation gives " << at_lo << " to " << at_hi
      << " s): the profile or the link does not describe that run";
  for (int it = 0; it < 60; ++it) {
    link.contention = (lo + hi) / 2;
    (simulate_point(p, link, ranks, o).step_s < measured_step_s ? lo : hi) = link.contention;
  }
  return (lo + hi) / 2;
}

nlohmann::json Simulation::to_json() const {
  nlohmann::json lags = nlohmann::json::array();
  for (const auto& l : options.rank_lag) lags.push_back({{"ranks", l.ranks}, {"relative", l.relative}});
  nlohmann::json pts = nlohmann::json::array();
  for (const auto& r : points)
    pts.push_back({{"world_size", r.world_size},
                   {"step_time_s", r.step_s},
                   {"compute_s", r.compute_s},
                   // FSDP's copies (in compute_s); null where the profile has no copy rate.
                   {"copy_s", options.mode == ParallelMode::fsdp && r.world_size > 1 && !profile.copy_bytes_per_s
                                  ? nlohmann::json(nullptr)
                                  : nlohmann::json(r.copy_s)},
                   {"comm_s", r.comm_s},
                   {"exposed_comm_s", r.exposed_comm_s},
                   {"overlap", r.overlap},
                   {"bubble", r.bubble},
                   {"buckets", r.buckets},
                   {"algorithm", r.algorithm},
                   {"critical_path", r.critical_path}});
  return {{"mode", parallel_mode_name(options.mode)},
          {"bucket_bytes", options.bucket_bytes},
          {"first_bucket_bytes", options.first_bucket_bytes},
          {"jitter", options.jitter},
          {"rank_lag", lags},
          {"crowding", options.crowding},
          {"micro_batches", options.micro_batches},
          {"profile", profile.to_json()},
          {"link", link.to_json()},
          {"points", pts}};
}

}  // namespace dpb::sim
