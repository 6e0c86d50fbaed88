#include "benchmarks/dpbench/what_if.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "benchmarks/simulate/simulator.h"
#include "diagnostics/dpdoctor/rules/rules.h"
#include "engine/core/error.h"
#include "engine/core/log.h"

namespace dpb::bench {

namespace {

using doctor::check::duration_text;

// The what-if for one run; nullopt (with the reason logged) where its evidence is missing.
std::optional<nlohmann::json> bucket_what_if(const reports::RunReport& report, std::string* fix_text) {
  const reports::RunMetrics& run = report.largest_run();
  const int world = run.world_size;
  const double bucket_mb = report.config.bucket_mb.value_or(25);
  // The step of one rank without communication: the sweep's one-rank run where the report
  // has one (the step E(N) is measured against: data, loss and optimizer as in training),
  // else the A/B's step without the all-reduce (forward and backward on the last batch).
  const reports::RunMetrics* one_rank = nullptr;
  for (const auto& r : report.runs)
    if (r.world_size == 1 && r.batch_per_device == run.batch_per_device && r.step_time_s.median) one_rank = &r;
  const bool ab = run.overlap && run.overlap->ab && run.overlap->ab->step_without_comm_s;
  if (world < 2 || !run.buckets || run.buckets->empty() || !(one_rank || ab) || !run.step_time_s.median)
    return std::nullopt;
  std::vector<std::pair<double, double>> points;
  for (const auto& b : *run.buckets)
    if (b.comm_start_ms && b.comm_end_ms && *b.comm_end_ms > *b.comm_start_ms && b.bytes > 0)
      points.emplace_back(static_cast<double>(b.bytes), (*b.comm_end_ms - *b.comm_start_ms) * 1e-3);
  if (points.empty()) return std::nullopt;
  // The buckets are the last measured step's, and their times hold that step's wait for
  // the slower rank, which can be most of it. The link is the transfer: where rank 0 measured
  // its all-reduces' mean time a step and the part of it spent waiting, the bucket times
  // are scaled to that step-mean transfer (the wait is the slowest rank's lag, below).
  if (run.ranks && !run.ranks->empty()) {
    const reports::RankStats& r0 = run.ranks->front();
    double recorded = 0;
    for (const auto& p : points) recorded += p.second;
    if (r0.allreduce_s && r0.wait_for_peers_s && *r0.allreduce_s > *r0.wait_for_peers_s && recorded > 0) {
      const double scale = (*r0.allreduce_s - *r0.wait_for_peers_s) / recorded;
      for (auto& p : points) p.second *= scale;
    }
  }
  sim::LinkModel link = sim::load_preset(report.config.devices == DeviceKind::cuda ? "dgx-h100" : "cpu-gloo-local");
  const double n = world, share = 2.0 * (n - 1) / n;
  sim::FittedAllReduce f;
  bool distinct = false;
  for (const auto& p : points) distinct |= p.first != points.front().first;
  if (distinct) {
    f = sim::fit_allreduce(points, world);
  } else {  // one size: all of it bandwidth
    double t = 0;
    for (const auto& p : points) t += p.second;
    t /= static_cast<double>(points.size());
    f.alpha_s = 0;
    f.bus_bandwidth = share * points.front().first / t;
    f.points = static_cast<int>(points.size());
  }
  link.fitted[world] = f;
  link.source = "fitted on this run's bucket all-reduces";
  ModelOptions mo;
  if (report.config.model == "resnet50" || report.config.model == "resnet101" || report.config.model == "vgg16")
    mo.classes = 1000;
  // The A/B's step without communication holds forward and backward; its optimizer is
  // measured apart. A one-rank run's step holds everything.
  const double optimizer = ab ? run.overlap->ab->optimizer_s.value_or(0) : 0.0;
  const double single_step =
      one_rank ? *one_rank->step_time_s.median : *run.overlap->ab->step_without_comm_s + optimizer;
  const sim::StepProfile profile =
      sim::analytic_profile(report.config.model, run.batch_per_device, single_step, link.hardware, mo,
                            ab ? std::optional<double>(optimizer) : std::nullopt);
  sim::SimOptions o;
  o.bucket_bytes = bucket_mb * (1 << 20);
  o.first_bucket_bytes = std::min(o.bucket_bytes, 1.0 * (1 << 20));
  // Each all-reduce waits for the slower rank: how far the slowest of N lags, from the
  // one-rank run's steps (as --simulate takes it from a profile's), else from every rank's
  // compute in each measured step.
  std::vector<double> lag_steps;
  if (one_rank) {
    for (const auto& t : one_rank->step_times_s)
      if (t && *t > 0) lag_steps.push_back(*t);
  } else if (run.ranks) {
    for (const auto& r : *run.ranks)
      for (const auto& c : r.compute_steps_s)
        if (c && *c > 0) lag_steps.push_back(*c);
  }
  o.rank_lag = reports::rank_lags(lag_steps);
  // The ranks' compute against one rank's: their forward and backward in this run
  // (medians over every measured step, averaged over the ranks) against the one-rank run's,
  // both measured in this sweep. The ranks share the machine, and a shared machine's speed
  // also drifts between two runs (a LeNet sweep on a 2-vCPU VM: +3.4 % in one, -1.5 % in
  // the next, with gradient accumulation over 16 batches or without). Whatever the
  // all-reduces cost the compute beside them is in it too; the contention fitted below adds
  // only the rest.
  std::optional<double> crowding;
  if (one_rank && one_rank->ranks && !one_rank->ranks->empty() && one_rank->ranks->front().compute_s &&
      *one_rank->ranks->front().compute_s > 0 && run.ranks && !run.ranks->empty()) {
    double sum = 0;
    int n_ranks = 0;
    for (const auto& r : *run.ranks)
      if (r.compute_s) sum += *r.compute_s, ++n_ranks;
    if (n_ranks > 0) {
      crowding = std::max(0.0, sum / n_ranks / *one_rank->ranks->front().compute_s - 1);
      o.crowding = *crowding;
    }
  }
  const double measured = *run.step_time_s.median;
  // The contention that gives the measured step; where none in the fit's range does, the
  // closest end of it (none when even no contention is too slow), said as such.
  bool fitted = true;
  try {
    link.contention = sim::fit_contention(profile, link, world, measured, o);
    link.stolen.reset();  // the fitted figure applies as it is
  } catch (const Error&) {
    fitted = false;
    link.stolen.reset();
    sim::LinkModel none = link;
    none.contention = 0;
    link.contention = sim::simulate_point(profile, none, world, o).step_s > measured ? 0 : 10;
  }
  const double now = sim::simulate_point(profile, link, world, o).step_s;
  // Where the simulated step's time beyond one rank's goes: the ranks crowding each other
  // (the same simulation without it), the wait for the slowest rank (without that too),
  // and the all-reduces with their contention (the rest).
  sim::SimOptions alone = o;
  alone.crowding = 0;
  sim::SimOptions steady = alone;
  steady.rank_lag.clear();
  steady.jitter = 0;
  const double one = sim::simulate_point(profile, link, 1, o).step_s;
  const double uncrowded = sim::simulate_point(profile, link, world, alone).step_s;
  const double without_lag = sim::simulate_point(profile, link, world, steady).step_s;
  const double crowd_s = std::max(0.0, now - uncrowded), lag_s = std::max(0.0, uncrowded - without_lag),
               link_s = std::max(0.0, without_lag - one);
  double best_mb = bucket_mb, best = now;
  nlohmann::json tried = nlohmann::json::array();
  for (double factor : {1.0 / 8, 0.25, 0.5, 2.0, 4.0, 8.0}) {
    const double mb = std::clamp(bucket_mb * factor, 1.0 / 1024, 1024.0);
    if (!tried.empty() && tried.back()["bucket_mb"].get<double>() == mb) continue;
    sim::SimOptions t = o;
    t.bucket_bytes = mb * (1 << 20);
    t.first_bucket_bytes = std::min(t.bucket_bytes, 1.0 * (1 << 20));
    const double step = sim::simulate_point(profile, link, world, t).step_s;
    tried.push_back({{"bucket_mb", mb}, {"step_s", step}});
    if (step < best) best = step, best_mb = mb;
  }
  const double gain = (now - best) / now;
  const double miss = std::fabs(now - measured) / measured;
  // The other remedies, simulated the same way. Gradient accumulation over k batches:
  // k - 1 of them without the all-reduce (one rank's forward and backward), then one
  // step as now. A link k times as fast: the fitted bandwidth multiplied, its latency kept.
  constexpr int kAccum = 4;
  constexpr double kFaster = 10;
  const double accum_per_batch = ((kAccum - 1) * std::max(0.0, one - optimizer) + now) / kAccum;
  sim::LinkModel fast = link;
  fast.fitted[world].bus_bandwidth *= kFaster;
  const double fast_step = sim::simulate_point(profile, fast, world, o).step_s;
  nlohmann::json alternatives = nlohmann::json::array(
      {{{"fix", "--accum-steps=" + std::to_string(kAccum)},
        {"time_per_batch_s", accum_per_batch},
        {"gain", (now - accum_per_batch) / now},
        {"method", "k - 1 batches without the all-reduce (one rank's forward and backward), then one step as "
                   "simulated"}},
       {{"fix", fmt::format("a link {:g} x as fast", kFaster)},
        {"step_s", fast_step},
        {"gain", (now - fast_step) / now},
        {"method", "the same simulation with the fitted bus bandwidth multiplied, its latency kept"}}});
  const nlohmann::json link_ev{{"bus_bandwidth_bytes_per_s", f.bus_bandwidth},
                               {"bus_bandwidth_gbit_per_s", f.bus_bandwidth * 8e-9},
                               {"latency_s", f.alpha_s},
                               {"from", fmt::format("{} bucket all-reduce(s) of this run", points.size())}};
  // How far the slowest of this run's ranks runs behind the median step (0.02: 2 %).
  const double lag = (sim::rank_stretch(profile, o, world) - 1) * profile.compute_s() / profile.step_s();
  const char* lag_from = one_rank ? "the one-rank run's steps" : "the ranks' compute in each step";
  const std::string basis = one_rank ? "the one-rank run's median step" : "the A/B's step without the all-reduce";
  nlohmann::json ev{{"method", "dpbench --simulate on this run: " + basis + " split across " + report.config.model +
                                   "'s layers, the link fitted on its bucket all-reduces (the step-mean transfer), the "
                                   "slowest rank's lag from " + lag_from +
                                   (crowding ? ", the ranks' crowding from their compute against the one-rank run's"
                                             : "") +
                                   ", contention calibrated to the measured step where one in [0, 10] gives it"},
                    {"measured_step_s", measured},
                    {"simulated_step_s", now},
                    {"one_rank_step_s", one},
                    {"crowding", crowding ? nlohmann::json(*crowding) : nlohmann::json(nullptr)},
                    {"crowding_s", crowd_s},
                    {"slowest_rank_lag", o.rank_lag.empty() ? nlohmann::json(nullptr) : nlohmann::json(lag)},
                    {"rank_lag_from_steps", lag_steps.size()},
                    {"slower_rank_wait_s", lag_s},
                    {"communication_s", link_s},
                    {"contention", link.contention},
                    {"bucket_mb", bucket_mb},
                    {"tried", tried},
                    {"best_bucket_mb", best_mb},
                    {"best_step_s", best},
                    {"gain", gain},
                    {"link", link_ev},
                    {"alternatives", alternatives},
                    {"reproduces_measured_step", miss <= 0.15},
                    {"contention_fitted_to_this_run", fitted}};
  // A fitted contention was chosen so that the simulation gives this run's step: matching
  // it is by construction, not a test of the model; what the simulation adds is how the
  // step moves with the bucket size. One at the end of the range was not fitted: the
  // simulation then says how close it comes on its own.
  std::string contention;
  if (fitted)
    contention = fmt::format(" (Its contention, {:.3f}, was fitted to this run's own step, so reproducing that step "
                             "proves nothing; only the change with the bucket size is the simulator's.)",
                             link.contention);
  else if (link.contention == 0)
    contention = fmt::format(" (Nothing in it was fitted to this run's step: with no contention the simulation gives "
                             "{:.2f} ms against {:.2f} ms measured.)",
                             now * 1e3, measured * 1e3);
  else
    contention = fmt::format(" (No contention up to {:g} makes up the rest: the simulation gives {:.2f} ms against "
                             "{:.2f} ms measured; the all-reduces overlap too little compute for contention to cost "
                             "more.)",
                             link.contention, now * 1e3, measured * 1e3);
  const std::string rate = fmt::format(" The link moved {} (the bus bandwidth of this run's all-reduces).",
                                       f.bus_bandwidth * 8 >= 1e9 ? fmt::format("{:.2f} Gbit/s", f.bus_bandwidth * 8e-9)
                                                                  : fmt::format("{:.0f} Mbit/s", f.bus_bandwidth * 8e-6));
  const std::string others =
      fmt::format(" Predicted: --accum-steps={} takes {} a batch instead of {} ({:.0f} % less per sample); a link {:g} "
                  "x as fast, {} a step ({:.0f} % faster).",
                  kAccum, duration_text(accum_per_batch), duration_text(now), 100 * (now - accum_per_batch) / now,
                  kFaster, duration_text(fast_step), 100 * (now - fast_step) / now);
  if (miss > 0.15) {
    *fix_text = fmt::format("{} (The simulation does not reproduce this run: {:.1f} ms a step against {:.1f} ms "
                            "measured, so no simulated gain is quoted.)",
                            rate, now * 1e3, measured * 1e3);
    return ev;
  }
  if (gain > 0.02) {
    *fix_text = fmt::format(" Simulated on this run: --bucket-mb={:g} gives {:.1f} ms a step against {:.1f} ms at "
                            "{:g} MiB ({:.0f} % faster).{}{}{}",
                            best_mb, best * 1e3, now * 1e3, bucket_mb, 100 * gain, rate, others, contention);
  } else {
    const std::string range = fmt::format("no bucket size from {:g} to {:g} MiB gains more than 2 %",
                                          std::clamp(bucket_mb / 8, 1.0 / 1024, 1024.0),
                                          std::clamp(bucket_mb * 8, 1.0 / 1024, 1024.0));
    // What limits the step: the largest of the parts beyond one rank's step.
    std::string parts = fmt::format("{} is the wait for the slower rank (the slowest of {} runs {:.1f} % behind the "
                                    "median step, from {}), ",
                                    duration_text(lag_s), world, 100 * lag, lag_from);
    if (crowding && *crowding > 0)
      parts += fmt::format("{} the ranks' compute running slower than in the one-rank run ({:.1f} % in their forward "
                           "and backward), ",
                           duration_text(crowd_s), 100 * *crowding);
    else if (crowding)
      parts += "nothing the ranks' compute (their forward and backward no slower than in the one-rank run), ";
    parts += fmt::format("and {} the all-reduces", duration_text(link_s));
    std::string limit;
    if (link_s >= lag_s && link_s >= crowd_s)
      limit = "the link itself is the limit (fewer ranks per link, or a faster one)";
    else if (lag_s >= crowd_s)
      limit = "steadier ranks gain more than any bucket size (no other work on their cores, the data ready before "
              "each step)";
    else
      limit = "the ranks' slower compute costs more than any bucket size: they share the machine's cores, caches "
              "and memory bandwidth (fewer ranks per machine, one per physical core), and on a shared machine its "
              "speed also varies between the runs (--repeat measures each point several times)";
    *fix_text = fmt::format(" Simulated on this run: {}. Of the {} the step takes beyond one rank's, {}: {}.{}{}{}",
                            range, duration_text(now - one), parts, limit, rate, others, contention);
  }
  return ev;
}

}  // namespace

void add_simulated_fixes(const reports::RunReport& report, std::vector<reports::Finding>& findings) {
  for (auto& f : findings) {
    if (f.id != "exposed-communication") continue;
    try {
      std::string text;
      if (auto ev = bucket_what_if(report, &text)) {
        f.evidence["simulated_fix"] = *ev;
        if (!f.fix.empty() && f.fix.back() != '.') f.fix += '.';
        f.fix += text;
      }
    } catch (const Error& e) {
      log::warn("the simulated fix could not be computed: {}", e.what());
    }
  }
}

}  // namespace dpb::bench
