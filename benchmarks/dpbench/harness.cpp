#include "benchmarks/dpbench/harness.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>
#include <iostream>

#include "benchmarks/dpbench/distributed.h"
#include "benchmarks/dpbench/sweep.h"
#include "diagnostics/dpdoctor/doctor.h"
#include "engine/backend/cpu/cpu_context.h"
#include "engine/backend/device_info.h"
#include "engine/backend/op_profile.h"
#include "engine/backend/precision.h"
#if DPB_WITH_CUDA
#include "engine/backend/cuda/device_context.h"
#endif
#include "engine/core/file_io.h"
#include "engine/core/log.h"
#include "engine/core/stats.h"
#include "engine/data/registry.h"
#include "engine/models/model.h"
#include "engine/trace/nvtx.h"
#include "engine/train/trainer.h"
#include "engine/trace/timeline.h"
#include "engine/trace/chrome_trace.h"
#include "reports/report.h"

namespace dpb::bench {

namespace {

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

std::string human_time(double s) {
  if (s >= 1.0) return fmt::format("{:.3f} s", s);
  if (s >= 1e-3) return fmt::format("{:.2f} ms", s * 1e3);
  return fmt::format("{:.1f} us", s * 1e6);
}

}  // namespace

// What a run trains, on what, and how: the model (image models take the dataset's
// image shape; synthetic data takes the model's task), the dataset splits, and the
// trainer options the flags ask for. `parallel` false gives the single-device run of
// the same setup (what --verify compares against).
struct RunSetup {
  std::unique_ptr<Model> model;
  DatasetSplits data;
  TrainOptions train;
};

// RANK:N (two whole numbers, RANK >= 0, N > 0) from a flag such as --straggler=1:30;
// `form` names them in the error (RANK:MS).
std::pair<int, int64_t> parse_rank_and_count(const std::string& text, const char* flag, const char* form,
                                             const char* example) {
  const auto colon = text.find(':');
  const char* end = text.data() + text.size();
  int rank = -1;
  int64_t count = 0;
  const auto r = std::from_chars(text.data(), text.data() + std::min(colon, text.size()), rank);
  const auto c = colon == std::string::npos ? std::from_chars_result{end, std::errc::invalid_argument}
                                            : std::from_chars(text.data() + colon + 1, end, count);
  DPB_CHECK(colon != std::string::npos && r.ec == std::errc() && r.ptr == text.data() + colon && c.ec == std::errc() &&
            c.ptr == end && rank >= 0 && count > 0)
      << flag << "='" << text << "': expected " << form << ", e.g. " << flag << "=" << example;
  return {rank, count};
}

// Flag combinations CLI11 cannot check on its own (for library callers too).
void validate(const BenchOptions& o) {
  DPB_CHECK(o.mode == "single" || o.mode == "dp" || o.mode == "ddp" || o.mode == "mp")
      << "mode '" << o.mode << "' is not available (valid: single, dp, ddp, mp)";
  const PipelineSchedule schedule = parse_pipeline_schedule(o.pipeline_schedule);
  DPB_CHECK(o.micro_batches >= 0) << "--micro-batches must be at least 1, got " << o.micro_batches;
  DPB_CHECK(schedule != PipelineSchedule::naive || o.micro_batches <= 1)
      << "--schedule=naive runs the whole batch through one stage at a time; --micro-batches=" << o.micro_batches
      << " needs --schedule=gpipe or --schedule=1f1b";
  DPB_CHECK(o.mode != "mp" || o.gpus >= 2) << "--mode=mp cuts the model over --gpus=2 or more devices, got --gpus="
                                           << o.gpus;
  DPB_CHECK(o.mode != "mp" || o.accum_steps == 1)
      << "--mode=mp accumulates over --micro-batches; --accum-steps is for single, dp and ddp";
  DPB_CHECK(o.accum_steps >= 1) << "--accum-steps must be at least 1, got " << o.accum_steps;
  DPB_CHECK(o.bucket_mb > 0) << "--bucket-mb must be positive, got " << o.bucket_mb;
  DPB_CHECK(o.sampler == "distributed" || o.sampler == "none")
      << "unknown --sampler '" << o.sampler << "' (valid: distributed, none)";
  DPB_CHECK(o.gpus >= 1) << "--gpus must be at least 1, got " << o.gpus;
  DPB_CHECK(o.mode != "single" || o.gpus == 1) << "--mode=single runs on one device; use --mode=dp or --mode=ddp "
                                                  "for --gpus="
                                               << o.gpus;
  DPB_CHECK(o.dp_forward == "scatter" || o.dp_forward == "bypass")
      << "unknown --dp-forward '" << o.dp_forward << "' (valid: scatter, bypass)";
  DPB_CHECK(o.devices == "cpu" || o.devices == "cuda") << "unknown --devices '" << o.devices << "' (valid: cpu, cuda)";
  const Precision precision = parse_precision(o.precision);
  DPB_CHECK(precision == Precision::fp32 || o.devices == "cuda")
      << "--precision=" << o.precision << " needs --devices=cuda (the CPU backend computes in fp32)";
  DPB_CHECK(!o.cuda_graph || (o.devices == "cuda" && o.mode == "single"))
      << "--cuda-graph needs --devices=cuda and --mode=single";
  DPB_CHECK(!(o.cuda_graph && o.op_profile))
      << "--op-profile times ops one at a time, which a CUDA graph replay does not allow; use one or the other";
  DPB_CHECK(!o.logical_gpus || (o.devices == "cuda" && (o.mode == "dp" || o.mode == "mp")))
      << "--logical-gpus places the devices of --mode=dp or --mode=mp on fewer GPUs: it needs --devices=cuda and one "
         "of those modes";
  if (o.devices == "cuda") {
    const CudaInfo info = cuda_info();
    DPB_CHECK(info.built) << "--devices=cuda: this build has no CUDA backend (configure with -DDPB_CUDA=ON on a "
                             "machine with the CUDA toolkit, cuDNN and NCCL)";
    // ddp's ranks may share GPUs (rank r on cuda:r mod count; dpdoctor says so), and so
    // may --logical-gpus; otherwise dp and mp have already been cut to the visible devices.
    DPB_CHECK(static_cast<int>(info.gpus.size()) >= (o.mode == "ddp" || o.logical_gpus ? 1 : o.gpus))
        << "--devices=cuda --gpus=" << o.gpus << ": " << info.gpus.size() << " CUDA device(s) visible"
        << (info.unavailable_reason.empty() ? "" : " (" + info.unavailable_reason + ")");
  }
  DPB_CHECK(o.straggler_rank < 0 || o.mode == "ddp") << "--straggler is for --mode=ddp (a rank that computes slower)";
  DPB_CHECK(o.device_map == "spread" || o.mode == "ddp")
      << "--device-map is for --mode=ddp (where each rank process is placed on a device)";
  DPB_CHECK(o.straggler_rank < 0 || o.straggler_rank < o.gpus)
      << "--straggler=" << o.straggler_rank << ":" << o.straggler_ms << " but there are " << o.gpus << " rank(s)";
  DPB_CHECK(o.eval == "auto" || o.eval == "on" || o.eval == "off")
      << "unknown --eval '" << o.eval << "' (valid: auto, on, off)";
}

// Devices dp and mp can use: the GPUs, or as many logical CPU devices as the engine has.
int visible_devices(const BenchOptions& o) {
  int n = o.devices == "cuda" ? cuda_device_count() : cpu::kMaxCpuDevices;
  if (o.visible_devices > 0) n = std::min(n, o.visible_devices);
  return n;
}

// dp and mp use the devices that exist: more requested than visible runs on fewer, as
// torch.nn.DataParallel(model) uses the visible GPUs (the run records both counts).
void apply_visible_devices(BenchOptions& o) {
  o.gpus_requested = o.gpus;
  if ((o.mode != "dp" && o.mode != "mp") || o.logical_gpus) return;
  const int visible = visible_devices(o);
  if (o.gpus <= visible) return;
  DPB_CHECK(visible >= 1) << "--gpus=" << o.gpus << " but no " << o.devices << " device is visible";
  log::warn("--gpus={} but only {} {} device(s) are visible: running on {}", o.gpus, visible, o.devices, visible);
  o.gpus = visible;
}

Device bench_device(const BenchOptions& o, int index) {
  return o.devices == "cuda" ? Device::cuda(index) : Device::cpu(index);
}

// Peak FLOP/s of the run's device for its precision (0 when unknown: no MFU).
double device_peak_flops(const BenchOptions& o) {
#if DPB_WITH_CUDA
  if (o.devices == "cuda") return cuda::DeviceContext::get(0).peak_flops(o.precision);
#endif
  return 0.0;
}

// Loader threads: on the CPU every core computes, so batches load in the training
// thread; a GPU step is short and its host is free, so loading moves to workers (up to 8,
// leaving a core for the training thread).
int loader_workers(const BenchOptions& o) {
  if (o.workers >= 0) return o.workers;
  if (o.devices != "cuda") return 0;
  return std::clamp(cpu::hardware_threads() - 1, 1, 8);
}

// --micro-batches=0: one for the naive schedule, else 4 (at most the batch).
int micro_batches(const BenchOptions& o) {
  if (o.micro_batches > 0) return o.micro_batches;
  if (o.pipeline_schedule == "naive") return 1;
  return static_cast<int>(std::min<int64_t>(4, o.batch));
}

RunSetup prepare_run(const BenchOptions& o, bool parallel) {
  RunSetup r;
  if (o.logical_gpus) place_cuda_devices(parallel ? o.gpus : 0);
  Generator init_gen(o.seed);
  ModelOptions mo;
  const Shape data_shape = dataset_sample_shape(o.dataset);
  if (data_shape.ndim() == 3 && o.model != "simple" && o.model != "widemlp") mo.image = data_shape;
  r.model = build_model(o.model, init_gen, mo);
  const ModelSpec& spec = r.model->spec();
  DatasetRequest dr;
  dr.name = o.dataset;
  dr.dir = o.data_dir;
  dr.augment = o.augment;
  dr.sample_shape = spec.input;
  dr.loss = spec.loss;
  dr.width = spec.outputs;
  dr.seed = o.seed;
  r.data = load_dataset(dr);

  TrainOptions& t = r.train;
  t.batch = o.batch;
  t.steps = o.steps;
  t.epochs = o.epochs;
  t.warmup = o.warmup;
  t.seed = o.seed;
  t.optim.name = o.optimizer;
  t.optim.lr = o.lr;
  t.optim.momentum = o.momentum;
  t.optim.weight_decay = o.weight_decay;
  t.schedule = o.lr_schedule;
  t.lr_warmup_steps = o.lr_warmup;
  t.lr_scale = o.lr_scale;
  t.base_batch = o.base_batch;
  t.device = bench_device(o, 0);
  if (parallel && o.mode == "mp") {
    for (int d = 0; d < o.gpus; ++d) t.mp_devices.push_back(bench_device(o, d));
    t.mp_split = o.split;
    t.mp_schedule = parse_pipeline_schedule(o.pipeline_schedule);
    t.micro_batches = micro_batches(o);
  }
  if (parallel && o.mode == "dp") {
    for (int d = 0; d < o.gpus; ++d) t.dp_devices.push_back(bench_device(o, d));
    t.dp_bypass = o.dp_forward == "bypass";
    t.dp_replicate_input = o.dp_input == "list";
  }
  t.cuda_graph = o.cuda_graph;
  t.workers = loader_workers(o);
  t.prefetch = o.prefetch;
  t.loader_delay_ms = o.loader_delay_ms;
  return r;
}

// The last measured step on the timeline (from its wait for data to its end), every
// device's or rank's intervals in seconds from the window's start: for the HTML report.
// Under DDP every rank sends its own (a collective: every rank calls this).
nlohmann::json timeline_excerpt(const StepRecord& step, comm::ProcessGroup* group, Device rank_device) {
  const int64_t lo = step.begin_ns - step.data_ns, hi = step.end_ns;
  // This process's intervals in the window; under DDP labelled with the rank.
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& i : trace::timeline().intervals()) {
    if (i.end_ns < lo || i.begin_ns > hi) continue;
    rows.push_back({{"device", group ? group->rank() : i.device},
                    {"lane", i.lane},
                    {"name", i.name},
                    {"cat", trace::category_name(i.cat)},
                    {"begin_s", reports::number(static_cast<double>(std::max(i.begin_ns, lo) - lo) * 1e-9)},
                    {"end_s", reports::number(static_cast<double>(std::min(i.end_ns, hi) - lo) * 1e-9)}});
  }
  nlohmann::json out = {{"span_s", reports::number(static_cast<double>(hi - lo) * 1e-9)}, {"step", step.step}};
  if (!group) {
    out["intervals"] = rows;
    return out;
  }
  // Each rank's rows are relative to its own window of the same step.
  out["intervals"] = nlohmann::json::array();
  for (const auto& text : gather_strings(*group, rows.dump(), rank_device))
    for (const auto& r : nlohmann::json::parse(text)) out["intervals"].push_back(r);
  return out;
}

// --trace: the timeline as Chrome/Perfetto JSON. One process per device; under DDP every
// rank sends its intervals and steps to rank 0, which writes one file with a process per
// rank (steady-clock times agree between processes on one node).
void write_trace(const BenchOptions& o, const TrainResult& result, const std::vector<std::string>& device_ids,
                 comm::ProcessGroup* group, Device rank_device) {
  auto steps_of = [&] {
    std::vector<trace::TraceStep> steps;
    for (const auto& r : result.steps) steps.push_back({r.step, r.warmup, r.begin_ns, r.end_ns});
    return steps;
  };
  std::vector<trace::TraceProcess> processes;
  if (group) {
    nlohmann::json steps = nlohmann::json::array();
    for (const auto& s : steps_of()) steps.push_back({s.step, s.warmup, s.begin_ns, s.end_ns});
    const nlohmann::json mine = {{"intervals", trace::intervals_json(trace::timeline().intervals())},
                                 {"steps", steps}};
    const auto all = gather_strings(*group, mine.dump(), rank_device);
    if (group->rank() != 0) return;
    for (size_t r = 0; r < all.size(); ++r) {
      const auto j = nlohmann::json::parse(all[r]);
      trace::TraceProcess p;
      p.pid = static_cast<int>(r);
      p.name = fmt::format("rank {} ({})", r, o.devices);
      p.intervals = trace::intervals_from_json(j["intervals"]);
      for (const auto& s : j["steps"]) p.steps.push_back({s[0].get<int64_t>(), s[1].get<bool>(), s[2].get<int64_t>(), s[3].get<int64_t>()});
      processes.push_back(std::move(p));
    }
  } else {
    const auto intervals = trace::timeline().intervals();
    for (int d = 0; d < o.gpus; ++d) {
      trace::TraceProcess p;
      p.pid = d;
      p.name = device_ids[static_cast<size_t>(d)];
      for (const auto& i : intervals)
        if (i.device == bench_device(o, d).index) p.intervals.push_back(i);
      if (d == 0) p.steps = steps_of();
      processes.push_back(std::move(p));
    }
  }
  int64_t origin = std::numeric_limits<int64_t>::max();
  for (const auto& p : processes) {
    for (const auto& i : p.intervals) origin = std::min(origin, i.begin_ns);
    for (const auto& s : p.steps) origin = std::min(origin, s.begin_ns);
  }
  if (origin == std::numeric_limits<int64_t>::max()) origin = 0;
  const nlohmann::json meta = {{"tool", "dpbench"}, {"mode", o.mode}, {"model", o.model}, {"devices", o.devices},
                               {"world_size", group ? group->size() : o.gpus}};
  reports::write_report(o.trace_path, trace::chrome_trace(processes, origin, meta));
  log::info("trace written to {} (open in ui.perfetto.dev)", o.trace_path);
}

nlohmann::json run_benchmark(const BenchOptions& o, const std::vector<std::string>& argv, std::ostream& out,
                             comm::ProcessGroup* group, Device rank_device) {
  validate(o);
  const int world = group ? group->size() : o.gpus;
  const int rank = group ? group->rank() : 0;
  if (!o.json_path.empty()) check_writable(o.json_path);
  if (!o.trace_path.empty()) check_writable(o.trace_path);
  if (!o.save_path.empty()) check_writable(o.save_path);
  trace::timeline().clear();
  const ProgressMode progress = rank == 0 ? parse_progress_mode(o.progress) : ProgressMode::none;
  set_precision(parse_precision(o.precision));
  set_deterministic(o.deterministic);

  const int threads = o.threads > 0 ? o.threads : cpu::hardware_threads();
  cpu::set_threads_per_device(threads);
  cpu::CpuDeviceScope scope(0);

  RunSetup setup = prepare_run(o, true);
  Model* model = setup.model.get();
  const ModelSpec& spec = model->spec();
  DatasetSplits& data = setup.data;
  const bool eval = o.eval == "on" || (o.eval == "auto" && o.dataset != "synthetic");
  std::vector<std::string> device_ids;
  if (group) {
    for (int r = 0; r < world; ++r)
      device_ids.push_back(o.devices == "cuda" ? fmt::format("cuda@rank{}", r) : fmt::format("cpu@rank{}", r));
  } else {
    for (int d = 0; d < o.gpus; ++d)
      device_ids.push_back(o.logical_gpus ? fmt::format("cuda:{} (GPU {})", d, cuda_physical_device(d))
                                          : bench_device(o, d).str());
  }
  TrainOptions& t = setup.train;
  if (group) {
    t.group = group;
    t.device = rank_device;
    t.ddp.bucket_bytes = static_cast<int64_t>(o.bucket_mb * 1024 * 1024);
    t.distributed_sampler = o.sampler == "distributed";
    t.sync_bn = o.sync_bn;
    if (group->rank() == o.straggler_rank) t.straggle_ms = o.straggler_ms;
  }
  t.accum_steps = o.accum_steps;
  t.save_path = o.save_path;
  t.resume_path = o.resume_path;
  t.progress = progress;
  Trainer trainer(*model, *data.train, t, eval ? data.test.get() : nullptr, data.augment.get());

  log::info("training {} ({} parameters) on {} ({} training samples{}) in mode {} on {} device(s) with {} thread(s) "
            "each, batch {}, {}",
            spec.name, model->parameter_count(), o.dataset, data.train->size(), data.dir.empty() ? "" : ", " + data.dir,
            o.mode, o.gpus, threads, o.batch,
            o.epochs > 0 ? fmt::format("{} epoch(s) = {} steps", o.epochs, trainer.planned_steps())
                         : fmt::format("{} steps + {} warm-up", o.steps, o.warmup));
  if (group) reset_peak_memory(rank_device);
  else
    for (int d = 0; d < o.gpus; ++d) reset_peak_memory(bench_device(o, d));
  ops::set_op_profiling(o.op_profile);
  trace::set_nvtx(o.nvtx);
  // Profilers attached with a capture range (nsys --capture-range=cudaProfilerApi,
  // ncu --profile-from-start off) see the measured steps only.
  const bool gpu = o.devices == "cuda";
  if (gpu && o.warmup == 0) trace::capture_begin();
  TrainResult result = trainer.run([&](const StepRecord& r) {
    if (r.warmup && r.step + 1 == o.warmup) {
      if (o.op_profile) ops::reset_op_profile();
      if (gpu) trace::capture_begin();
    }
  });
  if (gpu) trace::capture_end();
  ops::set_op_profiling(false);
  DPB_CHECK(!result.steps.empty()) << "no training step ran (the checkpoint is already at the end of --epochs)";

  auto measured = result.measured();
  if (measured.empty()) measured = result.steps;  // a run shorter than its warm-up
  std::vector<double> times;
  double data_s = 0, step_s = 0;
  for (const auto& r : measured) {
    times.push_back(r.seconds());
    step_s += r.seconds();
    data_s += static_cast<double>(r.data_ns) * 1e-9;
  }
  // Per device: samples over the whole run; busy fraction over the measured window.
  std::vector<int64_t> dev_samples(static_cast<size_t>(o.gpus), 0), dev_busy(static_cast<size_t>(o.gpus), 0);
  for (const auto& r : result.steps) {
    for (size_t d = 0; d < r.device_samples.size(); ++d) dev_samples[d] += r.device_samples[d];
  }
  // The measured window: from the first measured step's wait for data to the last one's
  // end. A device's busy time is the union of its intervals on the timeline within it.
  const int64_t window_lo = measured.front().begin_ns - measured.front().data_ns, window_hi = measured.back().end_ns;
  const double window_s = static_cast<double>(window_hi - window_lo) * 1e-9;
  for (int d = 0; d < o.gpus && !group; ++d)
    dev_busy[static_cast<size_t>(d)] = trace::timeline().busy_ns(bench_device(o, d).index, window_lo, window_hi);
  Summary st = summarize(times);
  // DDP: every rank's metrics; rank 0 reports. A step takes as long as its slowest rank.
  std::vector<RankMetrics> ranks;
  nlohmann::json last_step_timeline;
  std::vector<RankRecord> rank_records;  // ddp: where each rank ran, which samples it read
  if (group) {
    RankMetrics mine = rank_metrics(measured, result.steps, rank_device.index);
    if (world > 1) {
      // A/B: the same passes without the all-reduce (every rank runs them).
      const auto no_comm = trainer.time_without_communication(static_cast<int>(std::clamp<int64_t>(o.steps, 1, 5)));
      mine.step_no_comm_s = summarize(no_comm).median;
    }
    ranks = gather_metrics(*group, mine, rank_device);
    rank_records = gather_rank_records(*group, measured, rank_device);
    if (!o.trace_path.empty()) write_trace(o, result, device_ids, group, rank_device);
    last_step_timeline = timeline_excerpt(measured.back(), group, rank_device);
    if (rank != 0) return nlohmann::json();
    for (const auto& m : ranks) {
      st.median = std::max(st.median, m.step_median_s);
      st.p90 = std::max(st.p90, m.step_p90_s);
    }
    dev_samples.assign(static_cast<size_t>(world), 0);
    dev_busy.assign(static_cast<size_t>(world), 0);
    for (int r = 0; r < world; ++r) dev_samples[static_cast<size_t>(r)] = static_cast<int64_t>(ranks[static_cast<size_t>(r)].samples);
  }
  // mp: every stage handles the whole batch (its own layers of it).
  const int64_t per_device_batch = group ? o.batch : o.mode == "mp" ? o.batch : o.batch / o.gpus;
  const int64_t global_batch = (group ? o.batch * world : o.batch) * o.accum_steps;
  const double throughput = static_cast<double>(global_batch) / st.median;
  auto busy_of = [&](int d) {
    return group ? ranks[static_cast<size_t>(d)].busy_fraction
                 : static_cast<double>(dev_busy[static_cast<size_t>(d)]) * 1e-9 / window_s;
  };
  const double flops_per_sample = 3.0 * static_cast<double>(model->flops_per_sample());
  const double loss_first = result.steps.front().loss, loss_last = result.steps.back().loss;

  const std::string device_text = group      ? fmt::format("{} rank(s) on {}", world, o.devices)
                                  : o.gpus == 1 ? device_ids[0]
                                                : fmt::format("{}:0..{}", o.devices, o.gpus - 1);
  out << fmt::format("dpbench {} | model {} | {} | {} | {} | batch {} | {} steps{} | {}\n", o.mode, spec.name,
                     o.dataset, device_text, o.precision, o.batch, result.steps.size(),
                     measured.size() < result.steps.size()
                         ? fmt::format(" ({} warm-up)", result.steps.size() - measured.size())
                         : "",
                     o.devices == "cuda" ? fmt::format("{}", cuda_info().gpus[0].name)
                                         : fmt::format("{} thread(s) per device", threads));
  out << fmt::format("{:>6} {:>10} {:>8} {:>11} {:>11} {:>11} {:>7} {:>12} {:>10} {:>10}\n", "world", "batch/dev",
                     "global", "median", "p10", "p90", "cv", "samples/s", "loss[0]", "loss[-1]");
  out << fmt::format("{:>6} {:>10} {:>8} {:>11} {:>11} {:>11} {:>6.1f}% {:>12.1f} {:>10.4f} {:>10.4f}\n", world,
                     per_device_batch, global_batch, human_time(st.median), human_time(st.p10), human_time(st.p90),
                     st.cv * 100, throughput, loss_first, loss_last);
  if (result.test)
    out << fmt::format("test: accuracy {:.2f}%, loss {:.4f} on {} samples | trained {:.2f} epoch(s) in {:.1f} s\n",
                       100 * result.test->accuracy, result.test->loss, result.test->samples,
                       static_cast<double>(result.end.global_step) /
                           static_cast<double>(std::max<int64_t>(1, trainer.loader().batches_per_epoch())),
                       result.wall_seconds);
  if (world > 1) {
    std::string line = "devices:";
    for (int d = 0; d < world; ++d)
      line += fmt::format("  {} {:.0f}% busy, {} samples", device_ids[static_cast<size_t>(d)], 100.0 * busy_of(d),
                          dev_samples[static_cast<size_t>(d)]);
    out << line << "\n";
  }
  if (group && world > 1) {
    const RankMetrics& m0 = ranks[0];
    out << fmt::format("ddp: {} bucket(s) of up to {} MiB; rank 0 all-reduce {:.2f} ms/step, {:.0f}% of it during "
                       "backward, exposed {:.2f} ms/step ({:.1f}% of the step)\n",
                       result.steps.back().buckets.size(), o.bucket_mb, m0.comm_s * 1e3,
                       100 * m0.overlap_ratio, m0.exposed_comm_s * 1e3,
                       100 * m0.exposed_share);
    if (m0.step_no_comm_s > 0)
      out << fmt::format("ddp A/B: step {} with all-reduce, {} forward + backward without (no_sync) + {} optimizer: "
                         "{} exposed\n",
                         human_time(m0.step_median_s), human_time(m0.step_no_comm_s), human_time(m0.optimizer_s),
                         human_time(std::max(0.0, m0.step_median_s - m0.step_no_comm_s - m0.optimizer_s)));
  }
  // mp: what each stage holds, how much of each step it idled, against the theory.
  nlohmann::json pipeline_json, stages_json = nlohmann::json::array();
  if (PipelineParallel* pp = trainer.pipeline()) {
    const int p = static_cast<int>(pp->devices().size());
    std::vector<double> idle(static_cast<size_t>(p), 0.0);
    double bubble = 0;
    for (const auto& r : measured) {
      for (int s = 0; s < p; ++s) idle[static_cast<size_t>(s)] += r.pipeline.stage_idle[static_cast<size_t>(s)];
      bubble += r.pipeline.bubble;
    }
    for (auto& v : idle) v /= static_cast<double>(measured.size());
    bubble /= static_cast<double>(measured.size());
    const auto& last = measured.back().pipeline;
    const auto units = pp->stage_units();
    const auto params = pp->stage_parameters();
    out << fmt::format("mp: {} schedule, {} micro-batch(es) of {}; bubble {:.1f}% measured (mean stage idle share), "
                       "{:.1f}% in theory ((p-1)/(m+p-1), p={}, m={})\n",
                       pipeline_schedule_name(pp->options().schedule), last.micro_sizes.size(),
                       last.micro_sizes.front(), 100 * bubble, 100 * last.theory, p, last.micro_sizes.size());
    for (int s = 0; s < p; ++s) {
      const auto& u = units[static_cast<size_t>(s)];
      out << fmt::format("  stage {} {}: {}{} ({} parameters), idle {:.1f}%\n", s, device_ids[static_cast<size_t>(s)],
                         u.front(), u.size() > 1 ? ".." + u.back() : "", params[static_cast<size_t>(s)],
                         100 * idle[static_cast<size_t>(s)]);
      stages_json.push_back({{"stage", s},
                             {"device", device_ids[static_cast<size_t>(s)]},
                             {"units", u},
                             {"parameters", params[static_cast<size_t>(s)]},
                             {"busy_fraction", reports::number(busy_of(s))},
                             {"idle_share", reports::number(idle[static_cast<size_t>(s)])}});
    }
    std::vector<std::string> starts;
    for (int k : pp->split()) starts.push_back(pp->units()[static_cast<size_t>(k)].name);
    nlohmann::json costs = nullptr;
    if (!trainer.unit_costs().empty()) {
      costs = nlohmann::json::array();
      for (size_t k = 0; k < pp->units().size(); ++k)
        costs.push_back({{"unit", pp->units()[k].name}, {"seconds", reports::number(trainer.unit_costs()[k])}});
    }
    nlohmann::json events = nlohmann::json::array();
    for (const auto& e : last.events)
      events.push_back({{"stage", e.stage},
                        {"micro_batch", e.micro},
                        {"kind", std::string(1, e.kind)},
                        {"begin_s", reports::number(static_cast<double>(e.begin_ns - last.begin_ns) * 1e-9)},
                        {"end_s", reports::number(static_cast<double>(e.end_ns - last.begin_ns) * 1e-9)}});
    pipeline_json = {{"schedule", pipeline_schedule_name(pp->options().schedule)},
                     {"micro_batches", last.micro_sizes.size()},
                     {"micro_batch_sizes", last.micro_sizes},
                     {"split", starts},
                     {"split_by", o.split.empty() ? "measured time" : "--split"},
                     {"unit_costs", costs},
                     {"bubble", {{"measured", reports::number(bubble)}, {"theory", reports::number(last.theory)}}},
                     {"last_step_events", events}};
  }
  if (st.outliers > 0) out << fmt::format("note: {} of {} step times are outliers (median/MAD)\n", st.outliers, st.count);
  nlohmann::json op_rows = nlohmann::json::array();
  if (o.op_profile) {
    const auto prof = ops::op_profile();
    double total = 0;
    for (const auto& t : prof) total += t.seconds;
    const double steps = static_cast<double>(measured.size());
    out << fmt::format("op profile ({} measured steps; each op timed between device waits, so the profiled step "
                       "takes longer than the median above):\n",
                       measured.size());
    out << fmt::format("  {:<26} {:>10} {:>12} {:>7}\n", "op", "calls/step", "ms/step", "share");
    for (const auto& t : prof) {
      out << fmt::format("  {:<26} {:>10.1f} {:>12.3f} {:>6.1f}%\n", t.op, static_cast<double>(t.calls) / steps,
                         t.seconds * 1e3 / steps, 100.0 * t.seconds / total);
      op_rows.push_back({{"op", t.op},
                         {"calls_per_step", reports::number(static_cast<double>(t.calls) / steps)},
                         {"seconds_per_step", reports::number(t.seconds / steps)}});
    }
  }

  nlohmann::json report = reports::report_header(argv);
  report["config"] = {{"mode", o.mode},
                      {"model", spec.name},
                      {"dataset", o.dataset},
                      {"data_dir", data.dir.empty() ? nlohmann::json(nullptr) : nlohmann::json(data.dir)},
                      {"devices", o.devices},
                      {"gpus", o.gpus},
                      {"gpus_requested", o.gpus_requested > 0 ? o.gpus_requested : o.gpus},
                      {"visible_devices", visible_devices(o)},
                      {"logical_gpus", o.logical_gpus},
                      {"batchnorm", spec.has_batchnorm},
                      {"base_batch", o.base_batch},
                      {"device_list", device_ids},
                      {"dp_forward", o.mode == "dp" ? nlohmann::json(o.dp_forward) : nlohmann::json(nullptr)},
                      {"pipeline_schedule", o.mode == "mp" ? nlohmann::json(o.pipeline_schedule) : nlohmann::json(nullptr)},
                      {"micro_batches", o.mode == "mp" ? nlohmann::json(micro_batches(o)) : nlohmann::json(nullptr)},
                      {"batch_per_device", per_device_batch},
                      {"global_batch", global_batch},
                      {"world_size", world},
                      {"accum_steps", o.accum_steps},
                      {"precision", o.precision},
                      {"cuda_graph", o.cuda_graph},
                      {"deterministic", o.deterministic},
                      {"backend", group ? nlohmann::json(group->backend()) : nlohmann::json(nullptr)},
                      {"bucket_mb", group ? nlohmann::json(o.bucket_mb) : nlohmann::json(nullptr)},
                      {"sampler", group ? nlohmann::json(o.sampler) : nlohmann::json(nullptr)},
                      {"sync_bn", o.sync_bn},
                      {"threads_per_device", threads},
                      {"steps", o.epochs > 0 ? nlohmann::json(nullptr) : nlohmann::json(o.steps)},
                      {"epochs", o.epochs > 0 ? nlohmann::json(o.epochs) : nlohmann::json(nullptr)},
                      {"warmup", o.warmup},
                      {"seed", o.seed},
                      {"workers", loader_workers(o)},
                      {"optimizer", {{"name", o.optimizer}, {"lr", o.lr}, {"momentum", o.momentum}}},
                      {"lr_scale", o.lr_scale},
                      {"lr_effective", reports::number(result.lr)},
                      {"lr_schedule", o.lr_schedule},
                      {"parameters", model->parameter_count()},
                      {"resumed_from", o.resume_path.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.resume_path)}};
  const double achieved = flops_per_sample * throughput;
  const double peak = device_peak_flops(o);
  nlohmann::json run = {{"world_size", world},
                        {"batch_per_device", per_device_batch},
                        {"global_batch", global_batch},
                        {"steps", result.steps.size()},
                        {"throughput_samples_per_s", reports::number(throughput)},
                        {"step_time_s", reports::summary_json(st)},
                        {"scaling_efficiency", nullptr},
                        {"data_wait_share", reports::number(data_s / (data_s + step_s))},
                        {"wall_time_s", reports::number(result.wall_seconds)},
                        {"loss", {{"first", reports::number(loss_first)}, {"last", reports::number(loss_last)}}},
                        {"flops_per_sample", reports::number(flops_per_sample)},
                        {"achieved_flops_per_s", reports::number(achieved)},
                        {"mfu", peak > 0 ? reports::number(achieved / peak) : nlohmann::json(nullptr)},
                        {"peak_flops_per_s", peak > 0 ? reports::number(peak) : nlohmann::json(nullptr)}};
  if (result.test)
    run["accuracy"] = {{"test", reports::number(result.test->accuracy)}, {"test_loss", reports::number(result.test->loss)}};
  run["devices"] = nlohmann::json::array();
  for (int d = 0; d < world; ++d)
    run["devices"].push_back(
        {{"id", device_ids[static_cast<size_t>(d)]},
         {"samples", dev_samples[static_cast<size_t>(d)]},
         {"busy_fraction", reports::number(busy_of(d))},
         {"peak_memory_bytes", memory_stats(group ? rank_device : bench_device(o, d)).peak_bytes}});
  if (group) {
    nlohmann::json per_rank = nlohmann::json::array();
    for (int r = 0; r < world; ++r) {
      const RankMetrics& m = ranks[static_cast<size_t>(r)];
      per_rank.push_back({{"rank", r},
                          {"step_time_median_s", reports::number(m.step_median_s)},
                          {"step_time_p90_s", reports::number(m.step_p90_s)},
                          {"data_wait_share", reports::number(m.data_wait_share)},
                          {"busy_fraction", reports::number(m.busy_fraction)},
                          {"comm_s", reports::number(m.comm_s)},
                          {"overlap_ratio", reports::number(m.overlap_ratio)},
                          {"exposed_comm_s", reports::number(m.exposed_comm_s)},
                          {"compute_s", reports::number(m.compute_s)},
                          {"host", rank_records[static_cast<size_t>(r)].placement.host},
                          {"device", rank_records[static_cast<size_t>(r)].placement.device},
                          {"hardware", rank_records[static_cast<size_t>(r)].placement.hardware},
                          {"samples", static_cast<int64_t>(m.samples)}});
    }
    run["ranks"] = per_rank;
    run["data"] = same_data_json(rank_records);  // the missing DistributedSampler
    run["buckets"] = buckets_json(measured.back());
    run["overlap"] = {{"ratio", reports::number(ranks[0].overlap_ratio)},
                      {"exposed_comm_s", reports::number(ranks[0].exposed_comm_s)},
                      {"exposed_share", reports::number(ranks[0].exposed_share)}};
    if (ranks[0].step_no_comm_s > 0) {
      // Exposed communication by A/B: the step against the same passes without the
      // all-reduce plus the optimizer (rank 0's medians).
      const double exposed = std::max(0.0, ranks[0].step_median_s - ranks[0].step_no_comm_s - ranks[0].optimizer_s);
      run["overlap"]["ab"] = {{"step_s", reports::number(ranks[0].step_median_s)},
                              {"step_without_comm_s", reports::number(ranks[0].step_no_comm_s)},
                              {"optimizer_s", reports::number(ranks[0].optimizer_s)},
                              {"exposed_comm_s", reports::number(exposed)},
                              {"exposed_share", reports::number(exposed / ranks[0].step_median_s)}};
    }
  }
  if (!pipeline_json.is_null()) {
    run["pipeline"] = pipeline_json;
    run["stages"] = stages_json;
  }
  if (const DataParallel* dp = trainer.data_parallel()) {
    // The primary's own work (broadcast, scatter, gather, loss, gradient reduction,
    // optimizer) against its replica's, per measured step, from the timeline.
    std::vector<std::pair<int64_t, int64_t>> own, replica;
    for (const auto& i : trace::timeline().intervals()) {
      if (i.device != bench_device(o, 0).index || i.cat == trace::Category::data) continue;
      (i.lane == "replica" ? replica : own).emplace_back(i.begin_ns, i.end_ns);
    }
    const double per_step = 1e-9 / static_cast<double>(measured.size());
    run["dp"] = {{"forward", o.dp_forward},
                 {"input", o.dp_input},
                 {"scatter_calls", dp->stats().forwards},
                 {"last_chunks", dp->stats().last_chunks},
                 {"primary_only_s", reports::number(static_cast<double>(trace::union_ns(own, window_lo, window_hi)) * per_step)},
                 {"primary_replica_s", reports::number(static_cast<double>(trace::union_ns(replica, window_lo, window_hi)) * per_step)}};
  }
  nlohmann::json losses = nlohmann::json::array();
  for (const auto& r : result.steps) losses.push_back(reports::number(r.loss));
  run["loss_per_step"] = losses;
  run["step_times_s"] = nlohmann::json::array();
  for (double t : times) run["step_times_s"].push_back(reports::number(t));
  run["timeline"] = group ? last_step_timeline : timeline_excerpt(measured.back(), nullptr, Device::cpu());
  nlohmann::json epochs = nlohmann::json::array();
  for (const auto& e : result.epochs) {
    nlohmann::json je = {{"epoch", e.epoch}, {"train_loss", reports::number(e.train_loss)}, {"seconds", reports::number(e.seconds)}};
    if (e.test) je["test_accuracy"] = reports::number(e.test->accuracy);
    epochs.push_back(je);
  }
  run["epochs"] = epochs;
  if (o.op_profile) run["op_profile"] = op_rows;
  report["runs"] = nlohmann::json::array({run});
  report["findings"] = nlohmann::json::array();
  if (o.doctor) {
    // dpdoctor's rules on what this run measured: into the report and onto the console.
    const auto d = doctor::diagnose(report);
    for (const auto& f : d.findings) report["findings"].push_back(doctor::finding_json(f));
    out << "\ndpdoctor:\n";
    doctor::print_diagnosis(d, out);
  }
  if (!o.trace_path.empty() && !group) write_trace(o, result, device_ids, nullptr, Device::cpu());
  if (!o.json_path.empty()) {
    reports::write_report(o.json_path, report);
    log::info("report written to {}", o.json_path);
  }
  return report;
}

VerifyResult run_verify(const BenchOptions& o, std::ostream& out, comm::ProcessGroup* group, Device rank_device) {
  validate(o);
  DPB_CHECK(o.verify_steps >= 1) << "--verify-steps must be at least 1, got " << o.verify_steps;
  const int threads = o.threads > 0 ? o.threads : cpu::hardware_threads();
  cpu::set_threads_per_device(threads);
  cpu::CpuDeviceScope scope(0);
  set_precision(parse_precision(o.precision));
  set_deterministic(o.deterministic);
  const int world = group ? group->size() : 1;
  using Snapshot = std::vector<std::vector<float>>;
  auto snapshot = [](Model& m) {
    Snapshot p;
    for (auto& [name, q] : m.named_parameters()) p.push_back(q->data().to_vector());
    return p;
  };
  // Trains and returns the model with its parameters before training.
  auto train = [&](bool parallel, Snapshot* initial) {
    BenchOptions ob = o;
    // DDP's reference: one device on the union of the ranks' batches (the shards of a
    // DistributedSampler step are consecutive positions of the same permutation).
    if (group && !parallel) ob.batch = o.batch * world;
    RunSetup setup = prepare_run(ob, parallel);
    setup.train.steps = o.verify_steps;
    setup.train.epochs = 0;
    setup.train.warmup = 0;
    setup.train.accum_steps = o.accum_steps;
    if (group && parallel) {
      setup.train.group = group;
      setup.train.device = rank_device;
      setup.train.ddp.bucket_bytes = static_cast<int64_t>(o.bucket_mb * 1024 * 1024);
      setup.train.distributed_sampler = o.sampler == "distributed";
      setup.train.sync_bn = o.sync_bn;
    }
    if (initial) *initial = snapshot(*setup.model);
    Trainer trainer(*setup.model, *setup.data.train, setup.train, nullptr, setup.data.augment.get());
    trainer.run();
    return std::move(setup.model);
  };
  auto candidate = train(true, nullptr);
  VerifyResult v;
  if (group && group->rank() != 0) {
    v.passed = true;  // rank 0 compares and reports
    return v;
  }
  Snapshot initial;
  auto reference = train(false, &initial);
  // Each parameter's difference from single-device training, relative to how far
  // single-device training moved it (L2 norms): a scale-free measure that stays meaningful
  // for parameters that start at zero (biases) and over several steps.
  auto ref = reference->named_parameters(), got = candidate->named_parameters();
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
  const bool batch_stats = reference->spec().has_batchnorm && o.mode == "ddp" && o.sync_bn;
  const double tolerance = o.verify_tolerance >= 0 ? o.verify_tolerance : (batch_stats ? 2e-2 : 1e-3);
  v.passed = v.max_rel_diff <= tolerance;
  out << fmt::format("verify: {} steps of {} (--mode={}, {} {}) against --mode=single{} from the same start\n",
                     o.verify_steps, o.model, o.mode, world > 1 ? world : o.gpus, group ? "ranks" : "device(s)",
                     group ? fmt::format(" with the ranks' global batch of {}", o.batch * world) : "");
  out << fmt::format("difference from single-device training, relative to how far it moved the parameters: {:.3g} for "
                     "{} (the largest), {:.3g} for the whole model; largest element difference {:.3g}; "
                     "tolerance {:.3g}: {}\n",
                     v.max_rel_diff, v.worst_parameter.empty() ? "-" : v.worst_parameter, v.model_rel_diff,
                     v.max_abs_diff, tolerance, v.passed ? "PASS" : "FAIL");
  if (!v.passed && reference->spec().has_batchnorm && (o.mode == "dp" || (o.mode == "ddp" && !o.sync_bn)))
    out << "note: in " << o.mode << " each " << (o.mode == "dp" ? "replica" : "rank")
        << " normalises BatchNorm with its own batch's statistics (as PyTorch's "
        << (o.mode == "dp" ? "DataParallel" : "DistributedDataParallel without SyncBatchNorm")
        << " does), so models with BatchNorm differ from single-device training by design"
        << (o.mode == "ddp" ? "; --sync-bn makes them equal" : "") << "\n";
  if (!v.passed && reference->spec().has_batchnorm && o.mode == "mp" && micro_batches(o) > 1)
    out << "note: in mp each micro-batch is normalised by BatchNorm with its own statistics (as in GPipe and "
           "PyTorch's Pipe), so models with BatchNorm differ from single-device training by design; "
           "--schedule=naive (one micro-batch) makes them equal\n";
  if (!v.passed && batch_stats)
    out << "note: training with batch statistics at small batches is chaotic: float rounding (SyncBatchNorm sums in "
           "another order than one device) flips ReLUs at their kink and the difference grows every step; compare one "
           "step (--verify-steps=1)\n";
  if (!v.passed && o.mode == "ddp" && o.sampler == "none")
    out << "note: with --sampler=none every rank trains on the same samples, so the ranks' global batch is not the "
           "single run's\n";
  return v;
}

namespace {

// "8", "64K", "256M", "1G" (powers of 1024), as nccl-tests' -b/-e.
int64_t parse_bytes(const std::string& text) {
  DPB_CHECK(!text.empty()) << "empty size";
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    DPB_FAIL() << "size '" << text << "' is not a number of bytes (e.g. 8, 64K, 256M, 1G)";
  }
  const std::string suffix = text.substr(used);
  int64_t scale = 1;
  if (suffix == "K" || suffix == "k") scale = int64_t{1} << 10;
  else if (suffix == "M" || suffix == "m") scale = int64_t{1} << 20;
  else if (suffix == "G" || suffix == "g") scale = int64_t{1} << 30;
  else DPB_CHECK(suffix.empty()) << "size '" << text << "': unknown suffix '" << suffix << "' (valid: K, M, G)";
  DPB_CHECK(v >= 1) << "size '" << text << "' must be at least 1 byte";
  return v * scale;
}

void validate_collectives(const BenchOptions& o) {
  const std::string backend = o.backend.empty() ? (o.devices == "cuda" ? "nccl" : "gloo") : o.backend;
  DPB_CHECK(backend == "gloo" || o.devices == "cuda")
      << "--backend=" << backend << " runs on GPUs; with --devices=cpu use --backend=gloo";
  DPB_CHECK(o.timeout_s > 0) << "--timeout must be positive, got " << o.timeout_s;
  DPB_CHECK(o.nnodes >= 1 && o.node_rank >= 0 && o.node_rank < o.nnodes)
      << "--node-rank=" << o.node_rank << " is outside --nnodes=" << o.nnodes;
  DPB_CHECK(!o.logical_gpus || (o.devices == "cuda" && (o.mode == "dp" || o.mode == "mp")))
      << "--logical-gpus places the devices of --mode=dp or --mode=mp on fewer GPUs: it needs --devices=cuda and one "
         "of those modes";
  if (o.devices == "cuda") {
    const CudaInfo info = cuda_info();
    DPB_CHECK(info.built && !info.gpus.empty()) << "--devices=cuda: no usable GPU ("
                                                << (info.built ? info.unavailable_reason : "built without CUDA") << ")";
  }
}

}  // namespace

int main_cli(int argc, char** argv) {
  BenchOptions o;
  CLI::App app{"dpbench: measure how fast a training setup runs, how well it scales, and why not.\n"
               "On the CPU, devices are logical CPU devices (cpu:0, cpu:1, ...), each with its own thread budget."};
  app.option_defaults()->always_capture_default();
  app.add_option("--bench", o.bench,
                 "What to measure: train (a training setup) or collectives (all-reduce, all-gather, reduce-scatter, "
                 "broadcast over --gpus ranks, as nccl-tests)")
      ->check(CLI::IsMember({"train", "collectives"}));
  app.add_option("--mode", o.mode,
                 "Parallel mode: single (one device), dp (one process, --gpus devices, as torch.nn.DataParallel), ddp "
                 "(one process per rank, as DistributedDataParallel; --gpus ranks on this node), mp (one process, "
                 "the model cut into --gpus pipeline stages)")
      ->check(CLI::IsMember({"single", "dp", "ddp", "mp"}));
  std::string gpus_text = "1";
  app.add_option("--gpus", gpus_text,
                 "Devices (or ranks) to use, or a sweep such as 1,2,4 (one run each, with the scaling efficiency "
                 "E(N) = throughput(N) / (N x throughput(1)); dp and mp multiply --batch by N). With --devices=cpu "
                 "these are logical CPU devices cpu:0..N-1 (ddp: N ranks), each with --threads threads");
  app.add_option("--visible-devices", o.visible_devices,
                 "Devices that exist, as CUDA_VISIBLE_DEVICES leaves them (0: all): dp and mp asked for more run on "
                 "fewer; ddp ranks beyond them share devices")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--logical-gpus", o.logical_gpus,
               "dp and mp with --devices=cuda: run --gpus devices even where fewer GPUs exist, as logical devices "
               "placed round-robin on them (cuda:k on GPU k mod count), each with its own streams and memory pool");
  app.add_option("--repeat", o.repeat, "Run everything R times; the sweep and dashboards use the median throughput")
      ->check(CLI::Range(1, 100));
  app.add_option("--dp-forward", o.dp_forward,
                 "dp: scatter (through the wrapper) or bypass (call the wrapped module directly: the classic mistake)")
      ->check(CLI::IsMember({"scatter", "bypass"}));
  app.add_option("--dp-input", o.dp_input,
                 "dp: tensor (scattered) or list (a list of samples: replicated whole to every device, the mistake)")
      ->check(CLI::IsMember({"tensor", "list"}));
  auto* mp = app.add_option_group("Model parallel (--mode=mp)");
  mp->add_option("--split", o.split,
                 "First layer of each stage after the first, by index or name (e.g. layer3.0; a wrong one lists "
                 "them); default: balanced by each layer's measured forward + backward time");
  mp->add_option("--schedule", o.pipeline_schedule,
                 "naive (whole batch, one stage at a time), gpipe (all micro-batch forwards, then the backwards), "
                 "1f1b (one forward, one backward)")
      ->check(CLI::IsMember({"naive", "gpipe", "1f1b"}));
  mp->add_option("--micro-batches", o.micro_batches, "Micro-batches per step (default: 1 for naive, else 4)")
      ->check(CLI::PositiveNumber);
  app.add_option("--model", o.model, "Model: " + join(model_names()))->check(CLI::IsMember(model_names()));
  app.add_option("--dataset", o.dataset, "Dataset (synthetic: generated, learnable, no I/O)")
      ->check(CLI::IsMember(dataset_names()));
  app.add_option("--data-dir", o.data_dir,
                 "Dataset folder (default: fashion-mnist " + default_data_dir("fashion-mnist") + ", mnist " +
                     default_data_dir("mnist") + ", cifar10 " + default_data_dir("cifar10") + ")");
  app.add_option("--epochs", o.epochs, "Train whole epochs (overrides --steps)")->check(CLI::NonNegativeNumber);
  app.add_option("--workers", o.workers,
                 "DataLoader worker threads (0: load in the training thread; default: 0 on the CPU, up to 8 for GPUs)")
      ->check(CLI::Range(-1, 256));
  app.add_option("--prefetch", o.prefetch, "Batches in flight per worker")->check(CLI::PositiveNumber);
  app.add_option("--loader-delay-ms", o.loader_delay_ms, "Inject a delay per batch into the loader (slow input)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--eval", o.eval, "Evaluate on the test split (auto: for real datasets)")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  app.add_option("--augment", o.augment, "Random crop + flip for cifar10");
  app.add_option("--save", o.save_path, "Write a safetensors checkpoint at the end");
  app.add_option("--resume", o.resume_path, "Continue from a checkpoint written by --save");
  app.add_option("--progress", o.progress, "Progress on stderr (auto: a bar on a terminal, lines otherwise)")
      ->check(CLI::IsMember({"auto", "bar", "plain", "none"}));
  app.add_option("--devices", o.devices, "Device kind: cpu (logical CPU devices) or cuda (GPUs)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--precision", o.precision,
                 "Math precision: fp32 (strict), tf32 (TF32 tensor cores), bf16 (bf16 activations, fp32 master "
                 "weights, as torch.autocast); tf32 and bf16 need --devices=cuda")
      ->check(CLI::IsMember({"fp32", "tf32", "bf16"}));
  app.add_option("--batch", o.batch, "Batch size, as DataLoader(batch_size=...) in the PyTorch equivalent: per rank in ddp (global = ranks x batch), the whole batch handed to the model or wrapper in single, dp and mp")
      ->check(CLI::PositiveNumber);
  app.add_option("--steps", o.steps, "Measured optimizer steps")->check(CLI::PositiveNumber);
  app.add_option("--warmup", o.warmup, "Warm-up steps, excluded from measurements")->check(CLI::NonNegativeNumber);
  app.add_option("--threads", o.threads, "Threads per device (0: all hardware threads)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seed", o.seed, "Seed for weights and data order");
  app.add_option("--optimizer", o.optimizer, "Optimizer")->check(CLI::IsMember({"sgd", "adam", "adamw"}));
  app.add_option("--lr", o.lr, "Learning rate")->check(CLI::NonNegativeNumber);
  app.add_option("--momentum", o.momentum, "SGD momentum")->check(CLI::NonNegativeNumber);
  app.add_option("--weight-decay", o.weight_decay, "Weight decay (default: 0; AdamW 0.01)");
  app.add_option("--lr-schedule", o.lr_schedule, "Learning-rate schedule")
      ->check(CLI::IsMember({"constant", "step", "cosine"}));
  app.add_option("--lr-warmup", o.lr_warmup, "Linear learning-rate warm-up steps")->check(CLI::NonNegativeNumber);
  app.add_option("--lr-scale", o.lr_scale,
                 "none, or linear: lr x global batch / --base-batch, with warm-up (10% of the run unless --lr-warmup)")
      ->check(CLI::IsMember({"none", "linear"}));
  app.add_option("--base-batch", o.base_batch, "Batch the learning rate was tuned for (--lr-scale=linear)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--doctor", o.doctor,
               "Diagnose the run with dpdoctor's rules: findings in the report and after the summary");
  app.add_option("--trace", o.trace_path,
                 "Write the run's timeline as Chrome/Perfetto JSON (open in ui.perfetto.dev): a process per device or "
                 "rank, a lane per thread or stream, categories compute, comm, copy, data, optim");
  app.add_option("--json", o.json_path,
                 "Write the JSON report to this path (dpbench.report/1; dpbench.collectives/1 for --bench=collectives)");
  auto* ranks = app.add_option_group("Ranks", "Runs of several processes (--bench=collectives)");
  ranks->add_option("--backend", o.backend, "Communication backend (default: nccl on GPUs, gloo on the CPU)")
      ->check(CLI::IsMember({"gloo", "nccl"}));
  ranks->add_option("--timeout", o.timeout_s, "Seconds any collective or rendezvous may wait before failing");
  ranks->add_flag("--debug-collectives", o.debug_collectives,
                  "Check before every collective that all ranks call the same op with the same sizes (like "
                  "TORCH_DISTRIBUTED_DEBUG=DETAIL)");
  ranks->add_option("--nnodes", o.nnodes, "Nodes in the run (each runs dpbench with its --node-rank)")
      ->check(CLI::PositiveNumber);
  ranks->add_option("--node-rank", o.node_rank, "This node's index")->check(CLI::NonNegativeNumber);
  ranks->add_option("--master-addr", o.master_addr, "Address of node 0, where rank 0 hosts the store");
  ranks->add_option("--master-port", o.master_port, "Port of the store on node 0")->check(CLI::Range(1, 65535));
  ranks->add_option("--bucket-mb", o.bucket_mb, "DDP: gradient bucket size in MiB (the first bucket is 1 MiB)");
  ranks->add_option("--accum-steps", o.accum_steps,
                    "Batches per optimizer step (gradient accumulation; DDP skips the all-reduce on all but the last)")
      ->check(CLI::PositiveNumber);
  ranks->add_option("--sampler", o.sampler,
                    "DDP: distributed (each rank its shard) or none (every rank reads the whole dataset: the mistake)")
      ->check(CLI::IsMember({"distributed", "none"}));
  ranks->add_option("--device-map", o.device_map,
                    "ddp: spread (rank r on device r mod visible; on the CPU its own --threads cores) or same (every "
                    "rank on device 0: the mistake)")
      ->check(CLI::IsMember({"spread", "same"}));
  std::string straggler;
  ranks->add_option("--straggler", straggler,
                    "Fault injection, RANK:MS: that rank computes MS milliseconds slower every step");
  ranks->add_flag("--sync-bn", o.sync_bn,
                  "DDP: SyncBatchNorm, BatchNorm statistics over the global batch (torch.nn.SyncBatchNorm)");
  ranks->add_option("--rank", o.rank, "This process's rank (else from torchrun/Slurm/Open MPI variables)");
  ranks->add_option("--world-size", o.world_size, "Ranks in the run (with --rank)");
  ranks->add_option("--local-rank", o.local_rank, "This process's rank on its node (with --rank)");
  std::string ops_text = "allreduce,allgather,reduce_scatter,broadcast", min_bytes = "8", max_bytes = "256M",
              kill = "";
  auto* coll = app.add_option_group("Collectives", "--bench=collectives (nccl-tests' -b/-e/-f/-n/-w)");
  coll->add_option("--ops", ops_text, "Collectives, comma-separated: allreduce, allgather, reduce_scatter, broadcast");
  coll->add_option("--min-bytes,-b", min_bytes, "Smallest size (bytes; K, M, G suffixes)");
  coll->add_option("--max-bytes,-e", max_bytes, "Largest size");
  coll->add_option("--step-factor,-f", o.collectives.factor, "Size multiplier between steps")->check(CLI::Range(2, 1024));
  coll->add_option("--iters,-n", o.collectives.iters, "Timed iterations per size")->check(CLI::PositiveNumber);
  coll->add_option("--kill-rank", kill,
                   "Fault injection, RANK:N: that rank kills itself after N collectives (to see what the others "
                   "report)");
  app.add_flag("--cuda-graph", o.cuda_graph,
               "CUDA: after two eager steps, capture forward, loss and backward as a CUDA graph and replay it each "
               "step (the optimizer runs outside it)");
  app.add_flag("--deterministic", o.deterministic,
               "Deterministic algorithms only (like torch.backends.cudnn.deterministic): runs repeat bit for bit");
  app.add_flag("--nvtx", o.nvtx,
               "NVTX ranges (step, forward, backward, each layer, optimizer, data.h2d) for Nsight Systems: nsys "
               "profile --capture-range=cudaProfilerApi dpbench ... records the measured steps");
  app.add_flag("--op-profile", o.op_profile,
               "Time every op of the measured steps (waits for the device around each op) and print where the "
               "step's time goes");
  app.add_flag("--verify", o.verify,
               "Instead of benchmarking: train --verify-steps in --mode and in single mode from the same start, print "
               "each parameter's difference relative to how far training moved it, exit 1 above --verify-tolerance");
  app.add_option("--verify-steps", o.verify_steps, "Steps for --verify")->check(CLI::PositiveNumber);
  app.add_option("--verify-tolerance", o.verify_tolerance,
                 "Largest allowed difference of a parameter from single-device training for --verify, relative to how "
                 "far single-device training moved it (default 1e-3; 2e-2 with --sync-bn)")
      ->check(CLI::PositiveNumber);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  std::vector<std::string> args(argv, argv + argc);
  try {
    if (!straggler.empty())
      std::tie(o.straggler_rank, o.straggler_ms) = parse_rank_and_count(straggler, "--straggler", "RANK:MS", "1:30");
    const std::vector<int> sweep = parse_gpus(gpus_text);
    o.gpus = sweep.front();
    if (sweep.size() > 1 || o.repeat > 1) {
      DPB_CHECK(o.bench == "train" && !o.verify) << "--gpus lists and --repeat are for training benchmarks";
      // Every point checked before any runs.
      for (int n : sweep) {
        BenchOptions on = o;
        on.gpus = n;
        if (o.mode == "mp" && n == 1) on.mode = "single";
        if (o.mode == "single" && n > 1) on.mode = "dp";
        validate(on);
      }
      DPB_CHECK(o.mode != "single" || sweep.size() == 1) << "--mode=single runs on one device; sweep --gpus with "
                                                            "--mode=dp, ddp or mp";
      if (!o.json_path.empty()) check_writable(o.json_path);
      return run_sweep(o, sweep, args);
    }
    apply_visible_devices(o);
    if (o.bench == "collectives") {
      o.collectives.ops.clear();
      std::stringstream ss(ops_text);
      for (std::string op; std::getline(ss, op, ',');) {
        DPB_CHECK(std::find(collective_names().begin(), collective_names().end(), op) != collective_names().end())
            << "unknown collective '" << op << "' in --ops (valid: allreduce, allgather, reduce_scatter, broadcast)";
        o.collectives.ops.push_back(op);
      }
      o.collectives.min_bytes = parse_bytes(min_bytes);
      o.collectives.max_bytes = parse_bytes(max_bytes);
      o.collectives.warmup = static_cast<int>(o.warmup);
      if (!kill.empty())
        std::tie(o.collectives.kill_rank, o.collectives.kill_after) = parse_rank_and_count(kill, "--kill-rank", "RANK:N", "1:50");
      validate_collectives(o);
      if (!o.json_path.empty()) check_writable(o.json_path);
      const RankEnv env = rank_env(o);
      if (should_launch(o, env)) return launch_ranks(o, args);
      return run_collectives_rank(o, args);
    }
    if (o.mode == "ddp") {
      validate(o);
      if (!o.json_path.empty()) check_writable(o.json_path);
      const RankEnv env = rank_env(o);
      if (should_launch(o, env)) return launch_ranks(o, args);
      return run_ddp_rank(o, args);
    }
    if (o.verify) return run_verify(o, std::cout).passed ? 0 : 1;
    run_benchmark(o, args, std::cout);
  } catch (const Error& e) {
    std::cerr << "dpbench: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "dpbench: error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}

}  // namespace dpb::bench
