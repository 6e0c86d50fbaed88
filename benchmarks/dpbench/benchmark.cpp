#include "benchmarks/dpbench/benchmark.h"

#include <fmt/format.h>

#include <algorithm>
#include <ostream>
#include <string_view>

#include "benchmarks/dpbench/device_timing.h"
#include "benchmarks/dpbench/gather.h"
#include "benchmarks/dpbench/layer_profile.h"
#include "benchmarks/dpbench/metrics.h"
#include "benchmarks/dpbench/summary.h"
#include "benchmarks/dpbench/trace_export.h"
#include "benchmarks/dpbench/what_if.h"
#include "diagnostics/dpdoctor/doctor.h"
#include "engine/backend/cpu/cpu_context.h"
#include "engine/backend/op_profile.h"
#include "engine/core/file_io.h"
#include "engine/core/log.h"
#include "engine/core/process.h"
#include "engine/core/stats.h"
#include "engine/trace/nvtx.h"
#include "engine/trace/timeline.h"
#include "engine/train/trainer.h"
#include "reports/report.h"

namespace dpb::bench {

namespace {

reports::RunConfig run_config(const BenchOptions& o, Model& model, const Trainer& trainer, const RunSetup& setup,
                              const std::vector<std::string>& ids, int world, int threads, int64_t per_device,
                              const RankContext* rank, int64_t parameters) {
  const ModelSpec& spec = model.spec();
  reports::RunConfig c;
  c.mode = o.mode;
  c.model = spec.name;
  c.dataset = o.data.dataset;
  if (!setup.data.dir.empty()) c.data_dir = setup.data.dir;
  c.devices = o.device.kind;
  c.gpus = {o.device.count};
  c.gpus_requested = o.device.requested > 0 ? o.device.requested : o.device.count;
  c.visible_devices = visible_devices(o);
  c.logical_gpus = o.device.logical_gpus;
  c.batchnorm = spec.has_batchnorm;
  c.base_batch = o.train.base_batch;
  c.device_list = ids;
  if (o.mode == ParallelMode::dp) c.dp_forward = o.dp.bypass ? "bypass" : "scatter";
  if (o.mode == ParallelMode::pipeline) {
    c.pipeline_schedule = o.pipeline.schedule;
    c.micro_batches = micro_batches(o);
  }
  c.batch_per_device = per_device;
  c.global_batch = trainer.global_batch();
  c.world_size = world;
  c.accum_steps = o.train.accum_steps;
  c.precision = o.device.precision;
  c.cuda_graph = o.device.cuda_graph;
  c.deterministic = o.device.deterministic;
  if (rank) {
    c.backend = rank->group->backend();
    c.bucket_mb = o.ddp.bucket_mb;
    c.sampler = o.ddp.distributed_sampler ? "distributed" : "none";
    if (rank->tensor_group) c.tensor_parallel = rank->tensor_group->size();
    else if (mode_info(o.mode).splits_layers) c.tensor_parallel = world;
  }
  c.sync_bn = o.ddp.sync_bn;
  c.threads_per_device = threads;
  if (o.train.epochs > 0) c.epochs = o.train.epochs;
  else c.steps = o.train.steps;
  c.warmup = o.train.warmup;
  c.seed = o.train.seed;
  c.workers = loader_workers(o);
  c.optimizer = {optimizer_name(o.train.optimizer), o.train.lr, o.train.momentum};
  c.lr_scale = lr_scaling_name(o.train.lr_scale);
  c.lr_effective = trainer.base_lr();
  c.lr_schedule = lr_schedule_name(o.train.lr_schedule);
  c.parameters = parameters;
  if (!o.train.resume_path.empty()) c.resumed_from = o.train.resume_path;
  return c;
}

// DDP: every rank's metrics, where it ran and what it read; rank 0 reports them.
struct RankView {
  std::vector<RankMetrics> metrics;
  std::vector<RankRecord> records;
};

std::vector<reports::RankStats> rank_stats(const RankView& v) {
  std::vector<reports::RankStats> out;
  const std::vector<double> waits = wait_for_peers(v.records);
  for (size_t r = 0; r < v.metrics.size(); ++r) {
    const RankMetrics& m = v.metrics[r];
    const RankPlacement& p = v.records[r].placement;
    reports::RankStats s;
    s.rank = static_cast<int>(r);
    s.step_time_median_s = m.step_median_s;
    s.step_time_p90_s = m.step_p90_s;
    s.data_wait_share = m.data_wait_share;
    s.busy_fraction = m.busy_fraction;
    s.comm_s = m.comm_s;
    s.overlap_ratio = m.overlap_ratio;
    s.exposed_comm_s = m.exposed_comm_s;
    s.compute_s = m.compute_s;
    s.host = p.host;
    s.device = p.device;
    s.hardware = p.hardware;
    s.samples = static_cast<int64_t>(m.samples);
    for (double c : v.records[r].compute_steps_s) s.compute_steps_s.push_back(c);
    if (r < waits.size()) s.wait_for_peers_s = waits[r];
    if (const auto c = collective_costs(v.records[r])) {
      s.allreduce_s = c->collective_s;
      s.allreduce_handoff_s = c->handoff_s;
    }
    out.push_back(std::move(s));
  }
  return out;
}

reports::OverlapStats overlap_stats(const RankMetrics& m0) {
  reports::OverlapStats o{m0.overlap_ratio, m0.exposed_comm_s, m0.exposed_share, std::nullopt};
  if (m0.step_no_comm_s > 0) {
    // Exposed communication by A/B: the step against the same passes without the
    // all-reduce plus the optimizer (rank 0's medians).
    const double exposed = std::max(0.0, m0.step_median_s - m0.step_no_comm_s - m0.optimizer_s);
    o.ab = reports::OverlapAB{m0.step_median_s, m0.step_no_comm_s, m0.optimizer_s, exposed,
                              exposed / m0.step_median_s};
  }
  return o;
}

// One kind of collective in the measured steps: count and bytes per step, and the
// medians of the time they ran (null where the backend cannot tell) and were waited for.
reports::CollectiveStepStats collective_step_stats(const std::string& kind, const std::vector<StepRecord>& measured) {
  reports::CollectiveStepStats c;
  c.kind = kind;
  std::vector<double> ran, waited;
  bool timed = !measured.empty();
  for (const auto& r : measured) {
    const CollectiveTotals& t = kind == "all-gather" ? r.all_gathers
                                : kind == "reduce-scatter" ? r.reduce_scatters
                                                           : r.all_reduces;
    c.count = t.count;
    c.bytes = t.bytes;
    ran.push_back(static_cast<double>(t.ran_ns) * 1e-9);
    waited.push_back(static_cast<double>(t.waited_ns) * 1e-9);
    timed = timed && t.timed;
  }
  if (timed && c.count > 0) c.seconds = summarize(ran).median;
  if (!waited.empty()) c.waited_s = summarize(waited).median;
  return c;
}

// fsdp: every rank's memory (a collective: each rank's figures as JSON text), and rank
// 0's collectives per step by kind (medians over the measured steps).
reports::FsdpStats fsdp_stats(FullyShardedDataParallel& f, const Optimizer& opt, comm::ProcessGroup& pg, Device device,
                              const std::vector<StepRecord>& measured) {
  const FsdpMemory& m = f.memory();
  int64_t state = 0;
  for (const auto& s : opt.state()) state += s.value.numel() * static_cast<int64_t>(dtype_size(s.value.dtype()));
  std::vector<double> gather_waits, scatter_waits;
  for (const auto& r : measured) {
    gather_waits.push_back(static_cast<double>(r.all_gathers.waited_ns) * 1e-9);
    scatter_waits.push_back(static_cast<double>(r.reduce_scatters.waited_ns) * 1e-9);
  }
  const nlohmann::json mine = {{"p", m.shard_parameter_bytes},   {"g", m.shard_gradient_bytes},
                               {"o", state},                      {"pg", m.peak_gathered_bytes},
                               {"pu", m.peak_full_gradient_bytes}, {"a", m.activation_bytes},
                               {"peak", memory_stats(device).peak_bytes},
                               {"wg", measured.empty() ? -1.0 : summarize(gather_waits).median},
                               {"ws", measured.empty() ? -1.0 : summarize(scatter_waits).median}};
  reports::FsdpStats s;
  s.reshard_after_forward = f.options().reshard_after_forward;
  s.prefetch = f.options().prefetch;
  s.param_dtype = f.options().param_dtype == DType::bf16 ? "bf16" : "f32";
  s.units = f.units();
  s.full_parameter_bytes = m.full_parameter_bytes;
  s.largest_unit_bytes = m.largest_unit_bytes;
  const auto all = gather_strings(pg, mine.dump(), device);
  for (size_t r = 0; r < all.size(); ++r) {
    const auto j = nlohmann::json::parse(all[r]);
    reports::FsdpRankMemory x;
    x.rank = static_cast<int>(r);
    x.shard_parameter_bytes = j.at("p").get<int64_t>();
    x.shard_gradient_bytes = j.at("g").get<int64_t>();
    x.optimizer_state_bytes = j.at("o").get<int64_t>();
    x.peak_gathered_parameter_bytes = j.at("pg").get<int64_t>();
    x.peak_unsharded_gradient_bytes = j.at("pu").get<int64_t>();
    const int64_t a = j.at("a").get<int64_t>();
    if (a >= 0) x.activation_bytes = static_cast<double>(a);
    x.peak_memory_bytes = j.at("peak").get<int64_t>();
    if (j.at("wg").get<double>() >= 0) x.allgather_waited_s = j.at("wg").get<double>();
    if (j.at("ws").get<double>() >= 0) x.reduce_scatter_waited_s = j.at("ws").get<double>();
    s.ranks.push_back(x);
  }
  for (const char* kind : {"all-gather", "reduce-scatter"}) s.collectives.push_back(collective_step_stats(kind, measured));
  return s;
}

// tp: every rank's parameters, optimizer state and peak memory (a collective), and rank
// 0's all-reduces and all-gathers per step.
reports::TpStats tp_stats(TensorParallel& t, const Optimizer& opt, comm::ProcessGroup& pg, Device device,
                          const std::vector<StepRecord>& measured) {
  int64_t state = 0;
  for (const auto& s : opt.state()) state += s.value.numel() * static_cast<int64_t>(dtype_size(s.value.dtype()));
  const nlohmann::json mine = {
      {"p", t.memory().rank_parameter_bytes}, {"o", state}, {"peak", memory_stats(device).peak_bytes}};
  reports::TpStats s;
  s.full_parameter_bytes = t.memory().full_parameter_bytes;
  s.replicated_bytes = t.memory().replicated_bytes;
  const auto all = gather_strings(pg, mine.dump(), device);
  for (size_t r = 0; r < all.size(); ++r) {
    const auto j = nlohmann::json::parse(all[r]);
    s.ranks.push_back({static_cast<int>(r), j.at("p").get<int64_t>(), j.at("o").get<int64_t>(),
                       j.at("peak").get<int64_t>()});
  }
  for (const char* kind : {"all-reduce", "all-gather"}) s.collectives.push_back(collective_step_stats(kind, measured));
  return s;
}

// A device's memory: its allocator's peak and cache, and the resident memory of the
// process that drives it.
struct DeviceMemory {
  int64_t peak = 0;
  reports::Num cached, rss_peak, rss_shared;
};

DeviceMemory device_memory(Device device) {
  DeviceMemory m;
  const MemoryStats a = memory_stats(device);
  m.peak = a.peak_bytes;
  m.cached = static_cast<double>(a.cached_bytes);
  if (const auto r = proc::resident_memory()) {
    m.rss_peak = static_cast<double>(r->peak_bytes);
    m.rss_shared = static_cast<double>(r->shared_bytes);
  }
  return m;
}

// Every rank's DeviceMemory (a collective), exact (as JSON text, not floats).
std::vector<DeviceMemory> gather_device_memory(comm::ProcessGroup& pg, Device device) {
  const DeviceMemory m = device_memory(device);
  auto opt = [](const reports::Num& v) { return v ? nlohmann::json(static_cast<int64_t>(*v)) : nlohmann::json(); };
  const nlohmann::json mine = {{"peak", m.peak}, {"cached", opt(m.cached)}, {"rss", opt(m.rss_peak)}, {"shm", opt(m.rss_shared)}};
  std::vector<DeviceMemory> out;
  for (const auto& text : gather_strings(pg, mine.dump(), device)) {
    const auto j = nlohmann::json::parse(text);
    auto get = [&](const char* k) { return j.at(k).is_null() ? reports::Num() : reports::Num(j.at(k).get<double>()); };
    out.push_back({j.at("peak").get<int64_t>(), get("cached"), get("rss"), get("shm")});
  }
  return out;
}

}  // namespace

std::optional<reports::RunReport> run_benchmark(const BenchOptions& o, const std::vector<std::string>& argv,
                                                std::ostream& out, const RankContext* rank) {
  const int world = rank ? rank->group->size() : o.device.count;
  const bool lead = !rank || rank->group->rank() == 0;
  for (const auto* path : {&o.out.json_path, &o.out.trace_path})
    if (!path->empty()) check_writable(*path);
  check_checkpoint_writable(o);
  trace::timeline().clear();
  const int threads = apply_process_settings(o, rank ? 1 : o.device.count);
  cpu::CpuDeviceScope scope(0);

  RunSetup setup = prepare_run(o, true, rank);
  Model& model = *setup.model;
  const ModelSpec& spec = model.spec();
  DatasetSplits& data = setup.data;
  DPB_CHECK(o.data.eval_every == 0 || o.data.eval != EvalMode::off)
      << "--eval-every=" << o.data.eval_every << " evaluates the test split, which --eval=off turns off";
  const bool eval = o.data.eval == EvalMode::on || o.data.eval_every > 0 ||
                    (o.data.eval == EvalMode::automatic && o.data.dataset != "synthetic");
  const std::vector<std::string> ids = device_ids(o, rank);
  setup.train.save_path = o.train.save_path;
  setup.train.save_sharded = o.train.save_sharded;
  setup.train.resume_path = o.train.resume_path;
  // The report's memory is training's: the model is not gathered whole afterwards (a
  // checkpoint still is, and --layer-profile times the whole model's layers).
  setup.train.full_model_after_run = o.out.layer_profile;
  setup.train.progress = lead ? o.train.progress : ProgressMode::none;
  // Before fsdp shards them away (or tp cuts them): the model stays sharded after the run.
  const int64_t parameters = model.parameter_count();
  const double model_flops_per_sample = static_cast<double>(model.flops_per_sample());
  const double model_flops_per_token = model.spec().per_position ? model.flops_per_token() : 0.0;
  Trainer trainer(model, *data.train, setup.train, eval ? data.test.get() : nullptr, data.augment.get());

  log::info("training {} ({} parameters) on {} ({} training samples{}) in mode {} on {} device(s) with {} thread(s) "
            "each, batch {}, {}",
            spec.name, parameters, o.data.dataset, data.train->size(),
            data.dir.empty() ? "" : ", " + data.dir, parallel_mode_name(o.mode), o.device.count, threads, o.train.batch,
            o.train.epochs > 0 ? fmt::format("{} epoch(s) = {} steps", o.train.epochs, trainer.planned_steps())
                               : fmt::format("{} steps + {} warm-up", o.train.steps, o.train.warmup));
  for (const auto& d : trainer.devices()) reset_peak_memory(d);
  ops::reset_attention_use();
  ops::set_op_profiling(o.out.op_profile);
  trace::set_nvtx(o.out.nvtx);
  // Profilers attached with a capture range (nsys --capture-range=cudaProfilerApi,
  // ncu --profile-from-start off) see the measured steps only.
  const bool gpu = o.device.kind == DeviceKind::cuda;
  // The device clock (--device-timing) over the measured steps: started when the warm-up
  // ends, between steps.
  DeviceTimingRun device_timing;
  if (gpu && o.train.warmup == 0) {
    trace::capture_begin();
    device_timing = start_device_timing(o.device.timing, trainer.devices());
  }
  TrainResult result = trainer.run([&](const StepRecord& r) {
    if (r.warmup && r.step + 1 == o.train.warmup) {
      if (o.out.op_profile) ops::reset_op_profile();
      if (gpu) {
        trace::capture_begin();
        device_timing = start_device_timing(o.device.timing, trainer.devices());
      }
    }
  });
  if (gpu) trace::capture_end();
  ops::set_op_profiling(false);
  DPB_CHECK(!result.steps.empty()) << "no training step ran (the checkpoint is already at the end of --epochs)";

  auto measured = result.measured();
  if (measured.empty()) measured = result.steps;  // a run shorter than its warm-up
  const Window window = measured_window(measured);
  // A run shorter than its warm-up has no measured steps: the collector never started,
  // and its figures stay the host's.
  const std::optional<DeviceFigures> device_figs = finish_device_timing(device_timing, measured);
  const trace::TimelineSource source = device_figs ? device_figs->source : trace::TimelineSource::host;
  // NCCL's all-reduces run on the device: their times come from its timeline.
  if (device_figs && rank) fill_bucket_times(*device_figs, rank->device.index, measured);
  const std::vector<trace::Interval> device_rows = device_figs ? device_intervals(*device_figs) : std::vector<trace::Interval>{};
  std::vector<double> times;
  double data_s = 0, step_s = 0;
  for (const auto& r : measured) {
    times.push_back(r.seconds());
    step_s += r.seconds();
    data_s += static_cast<double>(r.data_ns) * 1e-9;
  }
  Summary st = summarize(times);

  // DDP: every rank's metrics (a collective); rank 0 reports. A step takes as long as
  // its slowest rank.
  RankView ranks;
  std::optional<reports::FsdpStats> fsdp;
  std::optional<reports::TpStats> tp;
  std::optional<reports::TimelineExcerpt> excerpt;
  std::vector<DeviceMemory> memory;
  if (rank) {
    RankMetrics mine = rank_metrics(measured, result.steps, rank->device.index);
    if (device_figs) apply_device_figures(*device_figs, rank->device.index, window, mine);
    if (world > 1 && trainer.ddp() && !trainer.strategy().tp()) {
      // A/B: the same passes without the all-reduce (every rank runs them). FSDP cannot
      // train without its collectives: it has no such A/B.
      const auto no_comm = trainer.time_without_communication(static_cast<int>(std::clamp<int64_t>(o.train.steps, 1, 5)));
      mine.step_no_comm_s = summarize(no_comm).median;
    }
    ranks.metrics = gather_metrics(*rank->group, mine, rank->device);
    if (auto* f = trainer.strategy().fsdp())
      fsdp = fsdp_stats(*f, trainer.optimizer(), *rank->group, rank->device, measured);
    if (auto* t = trainer.strategy().tp()) tp = tp_stats(*t, trainer.optimizer(), *rank->group, rank->device, measured);
    ranks.records = gather_rank_records(*rank->group, measured, rank->device);
    memory = gather_device_memory(*rank->group, rank->device);
    if (!o.out.trace_path.empty()) write_trace(o, result, ids, rank, device_rows);
    excerpt = timeline_excerpt(measured.back(), source, rank, device_rows);
    if (!lead) return std::nullopt;
    for (const auto& m : ranks.metrics) {
      st.median = std::max(st.median, m.step_median_s);
      st.p90 = std::max(st.p90, m.step_p90_s);
    }
  } else {
    excerpt = timeline_excerpt(measured.back(), source, nullptr, device_rows);
  }

  // mp: every stage handles the whole batch (its own layers of it).
  const int64_t per_device = rank || mode_info(o.mode).pipelines ? o.train.batch : o.train.batch / o.device.count;
  reports::RunReport report;
  report.tool = reports::this_tool();
  report.command = argv;
  report.env = reports::collect_environment();
  report.config = run_config(o, model, trainer, setup, ids, world, threads, per_device, rank, parameters);

  reports::RunMetrics run;
  run.world_size = world;
  run.batch_per_device = per_device;
  run.global_batch = trainer.global_batch();
  run.steps = static_cast<int64_t>(result.steps.size());
  const double throughput = static_cast<double>(run.global_batch) / st.median;
  run.throughput_samples_per_s = throughput;
  run.step_time_s = reports::StepTimeStats::of(st);
  run.data_wait_share = data_s / (data_s + step_s);
  run.wall_time_s = result.wall_seconds;
  run.loss_first = result.steps.front().loss;
  run.loss_last = result.steps.back().loss;
  double flops_per_sample = 3.0 * model_flops_per_sample;
  if (model.spec().per_position) {
    const int64_t T = model.spec().input[0];
    run.tokens_per_sample = T;
    run.throughput_tokens_per_s = throughput * static_cast<double>(T);
    const double per_token = model_flops_per_token;
    run.flops_per_token = per_token;
    flops_per_sample = per_token * static_cast<double>(T);
    // This process's forward passes (rank 0's under ddp; every rank decides alike).
    const ops::AttentionUse use = ops::attention_use();
    if (use.fused + use.unfused > 0) {
      run.attention = reports::AttentionStats{use.fused, use.unfused, std::nullopt};
      if (use.unfused > 0) run.attention->unfused_why = use.why_not;
    }
  }
  const double peak = device_peak_flops(o);
  run.flops_per_sample = flops_per_sample;
  run.achieved_flops_per_s = flops_per_sample * throughput;
  if (peak > 0) {
    run.mfu = flops_per_sample * throughput / peak;
    run.peak_flops_per_s = peak;
  }
  if (result.test) run.accuracy = reports::Accuracy{result.test->accuracy, result.test->loss};
  // Per device: samples over the whole run; busy fraction over the measured window.
  std::vector<int64_t> samples(static_cast<size_t>(world), 0);
  std::vector<double> busy(static_cast<size_t>(world), 0.0);
  if (rank) {
    for (int r = 0; r < world; ++r) {
      samples[static_cast<size_t>(r)] = static_cast<int64_t>(ranks.metrics[static_cast<size_t>(r)].samples);
      busy[static_cast<size_t>(r)] = ranks.metrics[static_cast<size_t>(r)].busy_fraction;
    }
  } else {
    for (const auto& r : result.steps)
      for (size_t d = 0; d < r.device_samples.size() && d < samples.size(); ++d) samples[d] += r.device_samples[d];
    for (int d = 0; d < world; ++d) {
      const int index = bench_device(o, d).index;
      busy[static_cast<size_t>(d)] =
          device_figs ? 1.0 - device_breakdown(*device_figs, index, window).idle_share.value_or(1.0)
                      : busy_fraction(index, window);
    }
  }
  if (!rank)
    for (int d = 0; d < world; ++d) memory.push_back(device_memory(bench_device(o, d)));
  for (int d = 0; d < world; ++d) {
    const DeviceMemory& m = memory[static_cast<size_t>(d)];
    run.devices.push_back({ids[static_cast<size_t>(d)], samples[static_cast<size_t>(d)], busy[static_cast<size_t>(d)],
                           m.peak, m.cached, m.rss_peak, m.rss_shared});
  }
  if (rank) {
    run.ranks = rank_stats(ranks);
    run.data = same_data(ranks.records);
    if (trainer.ddp()) run.buckets = bucket_stats(measured.back());
    run.overlap = overlap_stats(ranks.metrics.front());
    run.fsdp = std::move(fsdp);
    run.tp = std::move(tp);
  }
  if (PipelineParallel* pp = trainer.pipeline()) {
    PipelineMetrics pm = pipeline_metrics(*pp, measured, trainer.unit_costs(), !o.pipeline.split.empty(), ids, busy);
    run.pipeline = std::move(pm.pipeline);
    run.stages = std::move(pm.stages);
  }
  if (const DataParallel* dp = trainer.data_parallel()) {
    std::vector<int> indices;
    for (int d = 0; d < world; ++d) indices.push_back(bench_device(o, d).index);
    run.dp = dp_stats(*dp, o.dp.bypass, o.dp.replicate_input, indices, window, measured.size(),
                      trace::timeline().intervals(), device_figs ? &device_figs->timeline : nullptr);
  }
  for (const auto& r : result.steps) run.loss_per_step.push_back(r.loss);
  for (double t : times) run.step_times_s.push_back(t);
  if (excerpt && device_figs) {
    excerpt->note = device_figs->note;
    excerpt->dropped_records = static_cast<int64_t>(device_figs->dropped);
    excerpt->clock_residual_s = static_cast<double>(device_figs->clock_residual_ns) * 1e-9;
  }
  run.timeline = std::move(excerpt);
  // Where each device's (each rank's) measured window went.
  run.breakdown.emplace();
  for (int d = 0; d < world; ++d) {
    trace::Breakdown b;
    if (rank) {
      const RankMetrics& m = ranks.metrics[static_cast<size_t>(d)];
      const auto known = [](double v) { return v >= 0 ? std::optional<double>(v) : std::nullopt; };
      b.window_s = m.window_s;
      b.idle_share = known(m.idle_share);
      b.compute_share = known(m.compute_share);
      b.comm_share = known(m.comm_share);
      b.memory_share = known(m.memory_share);
      b.overlap = known(m.overlap);
      b.rank = d;
      b.host = ranks.records[static_cast<size_t>(d)].placement.host;
    } else {
      b = device_figs ? device_breakdown(*device_figs, bench_device(o, d).index, window)
                      : host_breakdown(bench_device(o, d).index, window);
    }
    b.device = ids[static_cast<size_t>(d)];
    run.breakdown->push_back(b);
  }
  for (const auto& e : result.epochs)
    run.epochs.push_back({e.epoch, e.train_loss, e.test ? reports::Num(e.test->accuracy) : reports::Num(), e.seconds,
                          e.test ? reports::Num(e.test->loss) : reports::Num()});
  for (const auto& e : result.evals) run.evals.push_back({e.step, e.test.loss, e.test.accuracy});
  if (o.out.op_profile) {
    run.op_profile.emplace();
    const double steps = static_cast<double>(measured.size());
    for (const auto& t : ops::op_profile())
      run.op_profile->push_back({t.op, static_cast<double>(t.calls) / steps, t.seconds / steps});
  }
  if (o.out.layer_profile)
    run.layer_profile = measure_layer_profile(model, o.train.batch, bench_device(o, 0), setup.train.optim, times,
                                              o.train.seed);
  report.runs.push_back(std::move(run));

  SummaryExtras extras;
  extras.batch = o.train.batch;
  extras.device_text = rank ? fmt::format("{} rank(s) on {}", world, device_kind_name(o.device.kind))
                       : world == 1 ? ids[0]
                                    : fmt::format("{}:0..{}", device_kind_name(o.device.kind), world - 1);
  if (result.test) extras.test_samples = result.test->samples;
  extras.epochs_trained = static_cast<double>(result.end.global_step) /
                          static_cast<double>(std::max<int64_t>(1, trainer.loader().batches_per_epoch()));
  print_summary(report, extras, out);
  if (o.out.doctor) {
    // dpdoctor's rules on what this run measured: into the report and onto the console.
    auto d = doctor::diagnose(report);
    add_simulated_fixes(report, d.findings);
    report.findings = d.findings;
    report.diagnosis = d;
    out << "\ndpdoctor:\n";
    doctor::print_diagnosis(d, out);
    if (!o.out.json_path.empty()) out << "the evidence and why: dpdoctor --verbose " << o.out.json_path << "\n";
  }
  if (!o.out.trace_path.empty() && !rank) write_trace(o, result, ids, nullptr, device_rows);
  if (!o.out.json_path.empty()) {
    reports::write_report(o.out.json_path, report.to_json());
    log::info("report written to {}", o.out.json_path);
  }
  return report;
}

}  // namespace dpb::bench
