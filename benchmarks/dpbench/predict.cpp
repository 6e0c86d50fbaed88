#include "benchmarks/dpbench/predict.h"

#include <fmt/format.h>

#include <cmath>
#include <optional>

#include "benchmarks/simulate/simulator.h"
#include "benchmarks/simulate/trace_profile.h"
#include "engine/core/clock.h"
#include "engine/core/error.h"
#include "engine/core/text.h"
#include "engine/core/log.h"
#include "engine/parallel/tensor_parallel.h"
#include "reports/model.h"
#include "reports/report.h"

namespace dpb::bench {

namespace {

bool imagenet_model(const std::string& name) { return name == "resnet50" || name == "resnet101" || name == "vgg16"; }

reports::RunReport prediction_report(const BenchOptions& o, const std::vector<std::string>& argv,
                                     const sim::Simulation& s) {
  reports::RunReport report;
  report.tool = reports::this_tool();
  report.command = argv;
  report.env = reports::collect_environment();
  reports::RunConfig& c = report.config;
  c.mode = o.mode;
  c.model = s.profile.model;
  c.dataset = "none (predicted)";
  c.devices = s.link.hardware.gpu.find("core") != std::string::npos ? DeviceKind::cpu : DeviceKind::cuda;
  c.gpus = o.simulate.ranks;
  c.gpus_requested = o.simulate.ranks.back();
  c.batch_per_device = s.profile.batch;
  c.global_batch = s.profile.batch;
  c.bucket_mb = o.ddp.bucket_mb;
  c.sweep_batch = mode_info(o.mode).pipelines       ? "batch (the stages share it)"
                  : mode_info(o.mode).splits_layers ? "batch (every rank runs it)"
                                                    : "per rank";
  int64_t params = 0;
  for (const auto& l : s.profile.layers)
    for (const auto& p : l.params) params += p.bytes / 4;
  c.parameters = params;
  report.sweep.emplace();
  for (const sim::SimPoint& r : s.points) {
    reports::SweepPoint p;
    p.world_size = r.world_size;
    p.mode = o.mode;
    p.batch_per_device = s.profile.batch;
    p.global_batch = shares_one_batch(o.mode) ? s.profile.batch : s.profile.batch * r.world_size;
    p.throughput_samples_per_s = r.throughput;
    p.scaling_efficiency = r.efficiency;
    p.predicted = true;
    p.step_time_s = r.step_s;
    p.exposed_comm_s = r.exposed_comm_s;
    p.overlap = r.comm_s > 0 ? reports::Num(r.overlap) : std::nullopt;
    report.sweep->push_back(p);
  }
  report.simulation = s.to_json();
  return report;
}

// A trace's other communication (all-to-all, send/recv: what compute did not hide) added
// to each point, scaled to its rank count; throughput and E(N) again from the new steps.
void add_other_communication(sim::Simulation& s, const sim::TraceProfile& t, const sim::StepProfile& p,
                             const sim::SimOptions& opt) {
  const sim::SimPoint one = sim::simulate_point(p, s.link, 1, opt);
  for (sim::SimPoint& r : s.points) {
    const double extra = sim::other_comm_at(t, s.link, r.world_size);
    if (extra <= 0) continue;
    r.step_s += extra;
    r.comm_s += extra;
    r.exposed_comm_s += extra;
    r.throughput = static_cast<double>(p.batch) * r.world_size / r.step_s;
    r.efficiency = one.throughput > 0 ? r.throughput / (r.world_size * one.throughput) : 0;
    r.critical_path += fmt::format(" + {:.2f} ms of other communication", extra * 1e3);
  }
}

// What the mode's own knob would change at the largest count: bucket sizes for ddp,
// prefetch depth for fsdp.
nlohmann::json what_would_change(const BenchOptions& o, const sim::StepProfile& p, const sim::LinkModel& link,
                                 const sim::SimOptions& opt, const sim::TraceProfile* t, std::ostream& out) {
  const int n = o.simulate.ranks.back();
  nlohmann::json rows = nlohmann::json::array();
  std::string line;
  const auto step_at = [&](const sim::SimOptions& so) {
    const sim::SimPoint one = sim::simulate_point(p, link, 1, so);
    sim::SimPoint r = sim::simulate_point(p, link, n, so);
    const double extra = t ? sim::other_comm_at(*t, link, n) : 0;
    const double step = r.step_s + extra;
    return std::pair{step, one.step_s / step};
  };
  if (mode_info(o.mode).all_reduces_gradients) {
    for (double mb : {1.0, 5.0, 25.0, 100.0}) {
      sim::SimOptions so = opt;
      so.bucket_bytes = mb * (1 << 20);
      so.first_bucket_bytes = std::min(so.bucket_bytes, 1.0 * (1 << 20));
      const auto [step, e] = step_at(so);
      rows.push_back({{"bucket_mb", mb}, {"step_time_s", step}, {"scaling_efficiency", e}});
      line += fmt::format("{}--bucket-mb={:g}: {:.2f} ms, E {:.3f}", line.empty() ? "" : "; ", mb, step * 1e3, e);
    }
  } else if (mode_info(o.mode).shards_state) {
    for (int prefetch : {0, 1, 2}) {
      sim::SimOptions so = opt;
      so.fsdp_prefetch = prefetch;
      const auto [step, e] = step_at(so);
      rows.push_back({{"fsdp_prefetch", prefetch}, {"step_time_s", step}, {"scaling_efficiency", e}});
      line += fmt::format("{}--fsdp-prefetch={}: {:.2f} ms, E {:.3f}", line.empty() ? "" : "; ", prefetch, step * 1e3,
                          e);
    }
  }
  if (!line.empty()) out << fmt::format("\nat {} ranks: {}\n", n, line);
  return rows;
}

}  // namespace

int run_simulation(const BenchOptions& o, const std::vector<std::string>& argv, std::ostream& out) {
  const SimulateOptions& so = o.simulate;
  // --from-trace: a PyTorch trace, or a dpbench report read as --profile reads it.
  std::optional<sim::TraceProfile> traced;
  std::string report_path = so.profile_path;
  if (!so.trace_path.empty()) {
    if (sim::is_dpbench_report(so.trace_path))
      report_path = so.trace_path;
    else
      traced = sim::profile_from_trace(
          so.trace_path, mode_info(o.mode).shards_state ? static_cast<int64_t>(o.ddp.bucket_mb * (1 << 20)) : 0);
  }
  std::string hardware = so.hardware;
  if (hardware.empty() && traced) {
    hardware = sim::preset_for_gpu(traced->gpu);
    DPB_CHECK(!hardware.empty()) << "--from-trace: no preset for the trace's GPU ("
                                 << (traced->gpu.empty() ? "its deviceProperties do not name one"
                                                         : "'" + escape_untrusted(traced->gpu) + "'")
                                 << "): give --hardware=dgx1-v100, dgx-h100, pcie-a100-25gbe or a preset file";
  }
  if (hardware.empty()) hardware = "cpu-gloo-local";
  sim::LinkModel link = sim::load_preset(hardware);
  if (!so.links.empty()) link = sim::fit_link(so.links, link);
  // A preset's link scaled to what the trace's own all-reduces took (a measured link,
  // --link, is taken as it is).
  double calibration = 1;
  if (traced && so.links.empty()) link = sim::calibrate_link(link, *traced, &calibration);
  if (so.contention >= 0) {
    link.contention = so.contention;
    link.stolen.reset();
    link.contention_source = "--contention";
  }
  ModelOptions mo;
  if (imagenet_model(o.data.model)) mo.classes = 1000;
  sim::StepProfile profile;
  if (traced) {
    profile = traced->profile;
    profile.batch = o.train.batch;  // a trace does not record it
  } else if (report_path.empty()) {
    profile = sim::analytic_profile(o.data.model, o.train.batch, so.single_step_s, link.hardware, mo);
  } else {
    profile = sim::profile_from_report(report_path);
  }
  if (mode_info(o.mode).splits_layers) {
    // The counts --mode=tp itself would refuse (heads, vocabulary or a layer's outputs they
    // do not divide, or layers it does not cut) are refused here too.
    Generator g(0);
    auto model = build_model(profile.model, g, mo);
    for (int n : so.ranks) {
      const std::string why = TensorParallel::cannot_split(*model, n);
      DPB_CHECK(why.empty()) << "--simulate: " << why;
    }
  }
  sim::SimOptions opt;
  opt.mode = o.mode;
  opt.bucket_bytes = o.ddp.bucket_mb * (1 << 20);
  opt.first_bucket_bytes = std::min(opt.bucket_bytes, 1.0 * (1 << 20));
  // Ranks vary step to step as the profiled device did (the slowest of N as its steps
  // say, else their coefficient of variation), unless told otherwise.
  if (so.jitter >= 0)
    opt.jitter = so.jitter;
  else if (!profile.rank_lag.empty())
    opt.rank_lag = profile.rank_lag;
  else
    opt.jitter = profile.step_cv;
  double measured_crowding = 0;
  if (!so.crowded_profile_path.empty()) {
    DPB_CHECK(!so.profile_path.empty()) << "--crowded-profile goes with --profile (the same run recorded alone)";
    const sim::StepProfile crowded = sim::profile_from_report(so.crowded_profile_path);
    DPB_CHECK(crowded.model == profile.model && crowded.batch == profile.batch)
        << "--crowded-profile is of " << crowded.model << " at batch " << crowded.batch << ", --profile of "
        << profile.model << " at batch " << profile.batch << ": they must be the same run";
    // A second rank computing beside this one cannot make it faster: a crowded profile
    // that measured less is the machine's noise, and the crowding is taken as none.
    measured_crowding = crowded.compute_s() / profile.compute_s() - 1;
    opt.crowding = std::max(0.0, measured_crowding);
    // Ranks compute side by side: how far the slowest runs behind is the spread of steps
    // taken with a neighbour computing, where the crowded run measured it (two nodes in
    // one box, gpt2-tiny: the slowest of 2 crowded steps +5-12 % over their median, alone
    // +2-3 %).
    if (so.jitter < 0 && !crowded.rank_lag.empty()) opt.rank_lag = crowded.rank_lag;
  }
  opt.micro_batches = o.pipeline.micro_batches > 0 ? o.pipeline.micro_batches : 4;
  opt.fsdp_prefetch = o.fsdp.prefetch;
  opt.fsdp_reshard = o.fsdp.reshard_after_forward;
  const int64_t t0 = now_ns();
  sim::Simulation s = sim::simulate(profile, link, so.ranks, opt);
  if (traced) add_other_communication(s, *traced, profile, opt);
  const double took = static_cast<double>(now_ns() - t0) * 1e-9;

  if (so.mode_defaulted) log::info("--simulate without --mode: predicting ddp (DistributedDataParallel)");
  out << fmt::format("dpbench --simulate | {}{} | model {} | batch {} per device | {} layers, {:.1f} MiB of gradients\n",
                     parallel_mode_name(o.mode), so.mode_defaulted ? " (no --mode given)" : "", profile.model, profile.batch, profile.layers.size(),
                     static_cast<double>(profile.gradient_bytes()) / (1 << 20));
  out << fmt::format("  profile: {} ({}): one-device step {:.2f} ms\n", profile.source, profile.evidence,
                     profile.step_s() * 1e3);
  if (traced)
    out << fmt::format("  trace: at its {} rank(s) the step measured {:.2f} ms: gradient all-reduces {:.2f} ms ({:.2f} "
                       "exposed), other communication {:.2f} ms exposed{}; samples/s at --batch={} per rank (a trace "
                       "does not record its batch)\n",
                       traced->world, traced->measured_step_s * 1e3, traced->allreduce_s * 1e3,
                       traced->allreduce_exposed_s * 1e3, traced->other_comm_s * 1e3,
                       traced->other_comm_bytes > 0
                           ? fmt::format(" ({:.2f} MiB)", static_cast<double>(traced->other_comm_bytes) / (1 << 20))
                           : "",
                       profile.batch);
  const std::string contention =
      link.stolen
          ? fmt::format("contention {:.1f} us of compute per collective beside it plus {:.1f} ps per byte it reduces "
                        "({:.3f} over the measured sizes; {})",
                        link.stolen->per_message_s * 1e6, link.stolen->per_byte_s * 1e12, link.contention,
                        link.contention_source)
          : fmt::format("contention {:.3f} ({}; {})", link.contention,
                        link.contention_scope == sim::LinkModel::ContentionScope::transfers
                            ? "while an all-reduce runs"
                            : "while all-reduces are in flight",
                        link.contention_source);
  const std::string variation =
      opt.rank_lag.empty()
          ? fmt::format("jitter {:.3f}", opt.jitter)
          : fmt::format("slowest rank's step {:+.1f} % at {} ranks (the profiled steps' {:.3f} quantile over their "
                        "median)",
                        100 * opt.rank_lag.front().relative, opt.rank_lag.front().ranks,
                        std::pow(0.5, 1.0 / opt.rank_lag.front().ranks));
  out << fmt::format("  link: {} ({}), {} per node; {}; {}{}\n", link.name, link.source, link.gpus_per_node,
                     contention, variation,
                     std::string(link.fitted_under_load.empty() ? "" : "; all-reduces beside compute take their time under load") +
                         (link.fitted_isolated.empty()
                              ? ""
                              : fmt::format("; a collective with nothing queued before it takes its time alone "
                                            "(measured after {:.1f} ms idle)",
                                            link.isolated_pause_s * 1e3)));
  if (!so.crowded_profile_path.empty())
    out << fmt::format("  crowding: compute {:+.1f} % at 2 ranks or more (the layers with another rank computing "
                       "beside them, {}){}\n",
                       100 * opt.crowding, escape_untrusted(so.crowded_profile_path),
                       measured_crowding < 0 ? fmt::format("; it measured {:+.1f} %, faster than alone, which a second "
                                                           "rank cannot cause: taken as noise",
                                                           100 * measured_crowding)
                                             : "");
  if (mode_info(o.mode).all_reduces_gradients)
    out << fmt::format("  buckets: {:g} MiB (the first 1 MiB)\n", o.ddp.bucket_mb);
  if (mode_info(o.mode).shards_state)
    out << fmt::format("  sharding: {}; prefetch {}, {}\n",
                       traced ? fmt::format("units of up to {:g} MiB of the trace's consecutive gradients (--bucket-mb)",
                                            o.ddp.bucket_mb)
                              : "each layer with parameters a unit",
                       o.fsdp.prefetch,
                       o.fsdp.reshard_after_forward ? "gathered again for the backward" : "kept to the backward");
  if (mode_info(o.mode).splits_layers)
    out << "  tensor parallelism: blocks (or linear pairs) cut over the ranks, every rank on the whole batch; each "
           "all-reduce waited for in full\n";
  out << fmt::format("\n{:>7} {:>11} {:>12} {:>6} {:>10} {:>13} {:>8} {:>8}  {}\n", "ranks", "step (ms)", "samples/s",
                     "E(N)", "comm (ms)", "exposed (ms)", "overlap", "buckets", "what ends the step");
  for (const auto& r : s.points)
    out << fmt::format("{:>7} {:>11.2f} {:>12.1f} {:>6.3f} {:>10.2f} {:>13.2f} {:>8} {:>8}  {}\n", r.world_size,
                       r.step_s * 1e3, r.throughput, r.efficiency, r.comm_s * 1e3, r.exposed_comm_s * 1e3,
                       r.comm_s > 0 ? fmt::format("{:.2f}", r.overlap) : "-", r.buckets ? std::to_string(r.buckets) : "-",
                       r.critical_path);
  nlohmann::json trace_json;
  if (traced) {
    trace_json = {{"file", traced->file},
                  {"gpu", traced->gpu},
                  {"world_size", traced->world},
                  {"rank", traced->rank},
                  {"profiled_steps", traced->steps},
                  {"measured_step_time_s", traced->measured_step_s},
                  {"allreduce_s", traced->allreduce_s},
                  {"allreduce_exposed_s", traced->allreduce_exposed_s},
                  {"other_comm_exposed_s", traced->other_comm_s},
                  {"other_comm_bytes", traced->other_comm_bytes >= 0 ? nlohmann::json(traced->other_comm_bytes)
                                                                      : nlohmann::json(nullptr)},
                  {"gradients_from", traced->gradients_from},
                  {"link_calibration", calibration}};
    for (const auto& r : s.points)
      if (r.world_size == traced->world && traced->world > 1) {
        trace_json["predicted_step_time_s_at_world_size"] = r.step_s;
        out << fmt::format("\nat the trace's {} ranks: predicted {:.2f} ms against the {:.2f} ms it measured "
                           "({:+.1f} %)\n",
                           traced->world, r.step_s * 1e3, traced->measured_step_s * 1e3,
                           100 * (r.step_s / traced->measured_step_s - 1));
      }
  }
  const nlohmann::json changes = what_would_change(o, profile, link, opt, traced ? &*traced : nullptr, out);
  out << fmt::format("\npredicted {} point(s) in {:.3f} s (all predicted: nothing ran)\n", s.points.size(), took);
  if (!o.out.json_path.empty()) {
    reports::RunReport report = prediction_report(o, argv, s);
    if (traced) (*report.simulation)["from_trace"] = trace_json;
    if (!changes.empty()) (*report.simulation)["what_would_change"] = changes;
    reports::write_report(o.out.json_path, report.to_json());
    log::info("report written to {}", o.out.json_path);
  }
  return 0;
}

}  // namespace dpb::bench
