#include "benchmarks/dpbench/cli.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <csignal>
#include <charconv>
#include <iostream>
#include <optional>
#include <sstream>

#include "benchmarks/dpbench/launch.h"
#include "engine/backend/cpu/simd.h"
#include "engine/core/error.h"
#include "engine/core/text.h"
#include "engine/data/registry.h"
#include "engine/models/model.h"

namespace dpb::bench {

namespace {

// A value CLI11 has not yet converted, read as a number; empty when it is not one.
std::optional<double> as_number(const std::string& v) {
  try {
    size_t used = 0;
    const double x = std::stod(v, &used);
    if (used == v.size()) return x;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

// A number at least `lo` (or, `strict`, above it), said as such: CLI11's PositiveNumber
// names its range with all 309 digits of the largest double.
CLI::Validator bounded_below(double lo, bool strict) {
  return CLI::Validator(
      [lo, strict](std::string& v) -> std::string {
        const auto x = as_number(v);
        if (!x) return "'" + v + "' is not a number";
        if (strict ? *x > lo : *x >= lo) return "";
        return fmt::format("must be {} {:g}, got {}", strict ? "above" : "at least", lo, v);
      },
      fmt::format("{} {:g}", strict ? ">" : ">=", lo), strict ? "above" : "at least");
}
CLI::Validator at_least(double lo) { return bounded_below(lo, false); }

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// A mode's name from the registry, turned into its enum's value for CLI11 to store;
// anything else (a number too) is an error listing the names.
CLI::Validator parallel_mode_name_to_enum() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        for (const auto& [name, mode] : parallel_mode_choices())
          if (v == name) {
            v = std::to_string(static_cast<int>(mode));
            return "";
          }
        return "'" + escape_untrusted(v) + "' is not a parallel mode (valid: " + join(parallel_mode_names()) + ")";
      },
      "MODE", "parallel mode");
}
CLI::Validator above_zero() { return bounded_below(0, true); }

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  if (text.back() == ',') out.emplace_back();
  return out;
}

// The flags as CLI11 reads them; turned into BenchOptions once parsed.
struct Flags {
  std::string bench = "train", gpus = "1", devices = "cpu", precision = "fp32";
  std::optional<ParallelMode> mode;  // not given: single (ddp under --simulate)
  std::string device_timing = "auto", dp_forward = "scatter", dp_input = "tensor", split, schedule = "gpipe";
  std::string eval = "auto", progress = "auto", optimizer = "sgd", lr_schedule = "constant", lr_scale = "none";
  std::string save_format = "auto";
  std::string doctor;  // "", diagnose or prove
  std::string backend, sampler = "distributed", device_map = "spread", straggler, hang, host_allreduce = "shm";
  std::string ops = "allreduce,allgather,reduce_scatter,broadcast", kill;
  bool simulate = false;
  std::string links;
};

template <typename E>
E pick(const std::string& value, std::initializer_list<std::pair<const char*, E>> names) {
  for (const auto& [name, e] : names)
    if (value == name) return e;
  DPB_FAIL() << "unexpected value '" << escape_untrusted(value) << "'";
}

void convert(const Flags& f, BenchOptions& o) {
  o.bench = pick<BenchKind>(f.bench, {{"train", BenchKind::train}, {"collectives", BenchKind::collectives}});
  o.ranks.shared_memory = f.host_allreduce == "shm";
  // No --mode: one device; a prediction is of DistributedDataParallel, and says so.
  o.mode = f.mode.value_or(f.simulate ? ParallelMode::ddp : ParallelMode::single);
  o.simulate.mode_defaulted = f.simulate && !f.mode;
  o.device.kind = pick<DeviceKind>(f.devices, {{"cpu", DeviceKind::cpu}, {"cuda", DeviceKind::cuda}});
  o.device.precision = parse_precision(f.precision);
  o.device.timing = pick<DeviceTiming>(f.device_timing, {{"auto", DeviceTiming::automatic},
                                                         {"cupti", DeviceTiming::cupti},
                                                         {"events", DeviceTiming::events},
                                                         {"off", DeviceTiming::off}});
  o.dp.bypass = f.dp_forward == "bypass";
  o.dp.replicate_input = f.dp_input == "list";
  o.pipeline.split = split_commas(f.split);
  o.pipeline.schedule = parse_pipeline_schedule(f.schedule);
  o.data.eval = pick<EvalMode>(f.eval, {{"auto", EvalMode::automatic}, {"on", EvalMode::on}, {"off", EvalMode::off}});
  o.train.progress = parse_progress_mode(f.progress);
  o.train.save_sharded = f.save_format == "sharded" || (f.save_format == "auto" && mode_info(o.mode).shards_state);
  o.train.optimizer = parse_optimizer(f.optimizer);
  o.train.lr_schedule = parse_lr_schedule(f.lr_schedule);
  o.train.lr_scale = parse_lr_scaling(f.lr_scale);
  o.ranks.backend = f.backend.empty() ? Backend::automatic
                                      : pick<Backend>(f.backend, {{"gloo", Backend::gloo}, {"nccl", Backend::nccl}});
  o.ddp.distributed_sampler = f.sampler == "distributed";
  o.ddp.device_map = f.device_map == "same" ? DeviceMap::same : DeviceMap::spread;
  o.out.doctor = !f.doctor.empty();
  o.out.prove = f.doctor == "prove";
  if (!f.straggler.empty())
    std::tie(o.ddp.straggler_rank, o.ddp.straggler_ms) =
        parse_rank_and_count(f.straggler, "--straggler", "RANK:MS", "1:30");
  if (!f.hang.empty())
    std::tie(o.ddp.hang_rank, o.ddp.hang_step) = parse_rank_and_count(f.hang, "--hang-rank", "RANK:STEP", "1:20");
  if (f.simulate) {
    o.bench = BenchKind::simulate;
    o.simulate.ranks = parse_rank_counts(f.gpus);
    o.simulate.links = split_commas(f.links);
  } else {
    const std::vector<int> gpus = parse_gpus(f.gpus);
    o.device.count = gpus.front();
    if (gpus.size() > 1 || o.repeat > 1) o.sweep = gpus;
  }
  o.collectives.ops = split_commas(f.ops);
  for (const auto& op : o.collectives.ops) (void)collective_spec(op);
  o.collectives.warmup = static_cast<int>(o.train.warmup);
  if (!f.kill.empty())
    std::tie(o.collectives.kill_rank, o.collectives.kill_after) =
        parse_rank_and_count(f.kill, "--kill-rank", "RANK:N", "1:50");
}

void add_flags(CLI::App& app, Flags& f, BenchOptions& o) {
  app.add_option("--bench", f.bench,
                 "What to measure: train (a training setup) or collectives (all-reduce, all-gather, reduce-scatter, "
                 "broadcast over --gpus ranks, as nccl-tests)")
      ->check(CLI::IsMember({"train", "collectives"}));
  std::string modes_help = "Parallel mode: ";
  for (const ModeInfo& m : parallel_modes())
    modes_help += fmt::format("{}{} ({})", m.mode == parallel_modes().front().mode ? "" : ", ", m.name, m.help);
  app.add_option("--mode", f.mode, modes_help)->transform(parallel_mode_name_to_enum());
  app.add_option("--gpus", f.gpus,
                 "Devices (or ranks) to use, or a sweep such as 1,2,4 (one run each, with the scaling efficiency "
                 "E(N) = throughput(N) / (N x throughput(1)); dp and mp multiply --batch by N). With --devices=cpu "
                 "these are logical CPU devices cpu:0..N-1 (ddp: N ranks), each with --threads threads");
  app.add_option("--visible-devices", o.device.visible,
                 "Devices that exist, as CUDA_VISIBLE_DEVICES leaves them (0: all): dp and mp asked for more run on "
                 "fewer; ddp ranks beyond them share devices")
      ->check(at_least(0));
  app.add_flag("--logical-gpus", o.device.logical_gpus,
               "dp and mp with --devices=cuda: run --gpus devices even where fewer GPUs exist, as logical devices "
               "placed round-robin on them (cuda:k on GPU k mod count), each with its own streams and memory pool");
  app.add_option("--repeat", o.repeat, "Run everything R times; the sweep and dashboards use the median throughput")
      ->check(CLI::Range(1, 100));
  app.add_option("--dp-forward", f.dp_forward,
                 "dp: scatter (through the wrapper) or bypass (call the wrapped module directly: the classic mistake)")
      ->check(CLI::IsMember({"scatter", "bypass"}))
      ->each([&o](const std::string&) { o.given.insert("--dp-forward"); });
  app.add_option("--dp-input", f.dp_input,
                 "dp: tensor (scattered) or list (a list of samples: replicated whole to every device, the mistake)")
      ->check(CLI::IsMember({"tensor", "list"}))
      ->each([&o](const std::string&) { o.given.insert("--dp-input"); });
  auto* mp = app.add_option_group("Model parallel (--mode=mp)");
  mp->add_option("--split", f.split,
                 "First layer of each stage after the first, by index or name (e.g. layer3.0; a wrong one lists "
                 "them); default: balanced by each layer's measured forward + backward time")
      ->each([&o](const std::string&) { o.given.insert("--split"); });
  mp->add_option("--schedule", f.schedule,
                 "naive (whole batch, one stage at a time), gpipe (all micro-batch forwards, then the backwards), "
                 "1f1b (one forward, one backward)")
      ->check(CLI::IsMember({"naive", "gpipe", "1f1b"}))
      ->each([&o](const std::string&) { o.given.insert("--schedule"); });
  mp->add_option("--micro-batches", o.pipeline.micro_batches, "Micro-batches per step (default: 1 for naive, else 4)")
      ->check(at_least(1))
      ->each([&o](const std::string&) { o.given.insert("--micro-batches"); });
  app.add_option("--model", o.data.model, "Model: " + join(model_names()))->check(CLI::IsMember(model_names()));
  app.add_option("--dataset", o.data.dataset, "Dataset (synthetic: generated, learnable, no I/O)")
      ->check(CLI::IsMember(dataset_names()));
  app.add_option_function<std::string>(
         "--data",
         [&o](const std::string& v) {
           // text:PATH (byte-level tokens of a file), or any dataset name
           if (v.rfind("text:", 0) == 0) {
             if (v.size() == 5) throw CLI::ValidationError("--data", "text:PATH needs a file after 'text:'");
             o.data.dataset = "text";
             o.data.dir = v.substr(5);
             return;
           }
           std::vector<std::string> names;
           for (const auto& n : dataset_names())
             if (n != "text") names.push_back(n);
           if (std::find(names.begin(), names.end(), v) == names.end())
             throw CLI::ValidationError("--data", "'" + v + "' is not one of: text:PATH, " + join(names));
           o.data.dataset = v;
         },
         "Training data: text:PATH (byte-level tokens of a text file, 90/10 train/validation split, for the "
         "gpt2 models) or a --dataset name")
      ->excludes("--dataset");
  app.add_option("--seq", o.data.seq, "Tokens per sequence for the gpt2 models (default: the model's context)")
      ->check(at_least(1));
  app.add_option("--data-dir", o.data.dir,
                 "Dataset folder (default: fashion-mnist " + default_data_dir("fashion-mnist") + ", mnist " +
                     default_data_dir("mnist") + ", cifar10 " + default_data_dir("cifar10") + ")");
  app.add_option("--epochs", o.train.epochs, "Train whole epochs (overrides --steps)")->check(at_least(0));
  app.add_option("--workers", o.data.workers,
                 "DataLoader worker threads (0: load in the training thread; default: 0 on the CPU, up to 8 for GPUs)")
      ->check(CLI::Range(-1, 256));
  app.add_option("--prefetch", o.data.prefetch, "Batches in flight per worker")->check(CLI::Range(1, 1024));
  app.add_option("--loader-delay-ms", o.data.loader_delay_ms, "Inject a delay per batch into the loader (slow input)")
      ->check(CLI::Range(int64_t{0}, int64_t{3600000}));
  app.add_option("--eval", f.eval, "Evaluate on the test split (auto: for real datasets)")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  app.add_option("--eval-every", o.data.eval_every,
                 "Also evaluate the test split every K optimizer steps (runs[].evals; a language model's validation "
                 "loss during training)")
      ->check(at_least(0));
  app.add_option("--augment", o.data.augment, "Random crop + flip for cifar10");
  app.add_option("--save", o.train.save_path, "Write a safetensors checkpoint at the end");
  app.add_option("--save-format", f.save_format,
                 "What --save writes: sharded (fsdp: a directory of one file per rank, each holding its rows of every "
                 "parameter; resumes at the same world size), full (one file, every parameter whole; resumes in any "
                 "mode and world size); auto: sharded for --mode=fsdp, full otherwise")
      ->check(CLI::IsMember({"auto", "full", "sharded"}));
  app.add_option("--resume", o.train.resume_path,
                 "Continue from a checkpoint written by --save (a full one, or a sharded one's directory)");
  app.add_option("--progress", f.progress, "Progress on stderr (auto: a bar on a terminal, lines otherwise)")
      ->check(CLI::IsMember({"auto", "bar", "plain", "none"}));
  app.add_option("--devices", f.devices, "Device kind: cpu (logical CPU devices) or cuda (GPUs)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--precision", f.precision,
                 "Math precision: fp32 (strict), tf32 (TF32 tensor cores), bf16 (bf16 activations, fp32 master "
                 "weights, as torch.autocast); tf32 and bf16 need --devices=cuda")
      ->check(CLI::IsMember({"fp32", "tf32", "bf16"}));
  app.add_option("--device-timing", f.device_timing,
                 "Where GPU times come from (runs[].timeline.source): cupti (CUPTI activity records: every kernel, "
                 "copy and launch on the GPU's clock), events (CUDA timing events around each span, where CUPTI cannot "
                 "subscribe), auto (cupti, else events, saying why), off (host spans: launch times, not run times). "
                 "Logical CPU devices always use the host clock, which is their device time")
      ->check(CLI::IsMember({"auto", "cupti", "events", "off"}));
  app.add_option("--batch", o.train.batch,
                 "Batch size, as DataLoader(batch_size=...) in the PyTorch equivalent: per rank in ddp (global = ranks "
                 "x batch), the whole batch handed to the model or wrapper in single, dp and mp")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--steps", o.train.steps, "Measured optimizer steps")->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  app.add_option("--warmup", o.train.warmup, "Warm-up steps, excluded from measurements")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  app.add_option("--threads", o.device.threads,
                 "Threads per device (0: this node's cores shared out over its devices; in a --gpus sweep over the "
                 "largest count, so every point has the same budget per device)")
      ->check(CLI::Range(0, 4096));
  app.add_option("--seed", o.train.seed, "Seed for weights and data order");
  app.add_option("--optimizer", f.optimizer, "Optimizer")->check(CLI::IsMember({"sgd", "adam", "adamw"}));
  app.add_option("--lr", o.train.lr, "Learning rate")->check(CLI::Range(0.0f, 1e6f));
  app.add_option("--momentum", o.train.momentum, "SGD momentum")->check(CLI::Range(0.0f, 1e6f));
  app.add_option("--weight-decay", o.train.weight_decay, "Weight decay (default: 0; AdamW 0.01)");
  app.add_option("--lr-schedule", f.lr_schedule, "Learning-rate schedule")
      ->check(CLI::IsMember({"constant", "step", "cosine"}));
  app.add_option("--clip-grad-norm", o.train.clip_grad_norm,
                 "Clip gradients to this global L2 norm before each step (0: off; under ddp the reduced gradient's)")
      ->check(CLI::Range(0.0, 1e12));
  app.add_option("--lr-warmup", o.train.lr_warmup, "Linear learning-rate warm-up steps")->check(at_least(0));
  app.add_option("--lr-scale", f.lr_scale,
                 "none, or linear: lr x global batch / --base-batch, with warm-up (10% of the run unless --lr-warmup)")
      ->check(CLI::IsMember({"none", "linear"}));
  app.add_option("--base-batch", o.train.base_batch, "Batch the learning rate was tuned for (--lr-scale=linear)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  app.add_flag("--doctor{diagnose}", f.doctor,
               "Diagnose the run with dpdoctor's rules: findings in the report and after the summary. "
               "--doctor=prove also proves each finding whose fix is a flag: the run again with the fix, alternated "
               "with the original --prove-pairs times, predicted against measured gain per finding")
      ->check(CLI::IsMember({"diagnose", "prove"}));
  app.add_option("--prove-pairs", o.out.prove_pairs,
                 "--doctor=prove: original and fixed runs alternated this many times per finding (A B, B A, ...)")
      ->check(CLI::Range(1, 20));
  app.add_option("--trace", o.out.trace_path,
                 "Write the run's timeline as Chrome/Perfetto JSON (open in ui.perfetto.dev): a process per device or "
                 "rank, a lane per thread or stream, categories compute, comm, copy, data, optim");
  app.add_option("--json", o.out.json_path,
                 "Write the JSON report to this path (dpbench.report/1; dpbench.collectives/1 for --bench=collectives)");
  auto* ranks = app.add_option_group("Ranks", "Runs of several processes (--mode=ddp, --bench=collectives)");
  ranks->add_option("--backend", f.backend, "Communication backend (default: nccl on GPUs, gloo on the CPU)")
      ->check(CLI::IsMember({"gloo", "nccl"}));
  ranks->add_option("--timeout", o.ranks.timeout_s, "Seconds any collective or rendezvous may wait before failing")
      ->check(CLI::Range(0.001, 86400.0 * 7));
  ranks->add_flag("--debug-collectives", o.ranks.debug_collectives,
                  "Check before every collective that all ranks call the same op with the same sizes (like "
                  "TORCH_DISTRIBUTED_DEBUG=DETAIL; Gloo)");
  ranks->add_option("--collective-spin-ms", o.ranks.spin_ms,
                    "Gloo: how long a rank waiting for a collective polls, yielding its core, before it sleeps (0: "
                    "sleep at once, as PyTorch's Gloo does; waking a sleeping core costs milliseconds on virtual "
                    "machines)")
      ->check(CLI::Range(0, 10000));
  ranks->add_option("--host-allreduce", f.host_allreduce,
                    "Gloo: how ranks that share a host all-reduce: shm (through shared memory) or tcp (Gloo's own, over "
                    "loopback, as PyTorch's Gloo group does)")
      ->check(CLI::IsMember({"shm", "tcp"}));
  ranks->add_option("--nnodes", o.ranks.nnodes, "Nodes in the run (each runs dpbench with its --node-rank)")
      ->check(CLI::Range(1, 1 << 16));
  ranks->add_option("--node-rank", o.ranks.node_rank, "This node's index")->check(CLI::Range(0, 1 << 16));
  ranks->add_option("--master-addr", o.ranks.master_addr,
                    "Address of node 0, where rank 0 hosts the store (over MASTER_ADDR when given)")
      ->each([&o](const std::string&) { o.ranks.master_addr_given = true; });
  ranks->add_option("--master-port", o.ranks.master_port, "Port of the store on node 0 (over MASTER_PORT when given)")
      ->check(CLI::Range(1, 65535))
      ->each([&o](const std::string&) { o.ranks.master_port_given = true; });
  ranks->add_option("--store-bind", o.ranks.store_bind,
                    "Address rank 0's store listens on (also DPB_STORE_BIND; default: every address when the job "
                    "spans nodes, else MASTER_ADDR's)");
  ranks->add_option("--bucket-mb", o.ddp.bucket_mb, "DDP: gradient bucket size in MiB (the first bucket is 1 MiB)")
      ->each([&o](const std::string&) { o.given.insert("--bucket-mb"); });
  ranks->add_option("--accum-steps", o.train.accum_steps,
                    "Batches per optimizer step (gradient accumulation; DDP skips the all-reduce on all but the last)")
      ->check(CLI::Range(1, 1 << 16));
  ranks->add_option("--sampler", f.sampler,
                    "DDP: distributed (each rank its shard) or none (every rank reads the whole dataset: the mistake)")
      ->check(CLI::IsMember({"distributed", "none"}));
  ranks->add_option("--device-map", f.device_map,
                    "ddp: spread (rank r on device r mod visible; on the CPU its own --threads cores) or same (every "
                    "rank on device 0: the mistake)")
      ->check(CLI::IsMember({"spread", "same"}));
  ranks->add_option("--straggler", f.straggler,
                    "Fault injection, RANK:MS: that rank computes MS milliseconds slower every step");
  ranks->add_option("--hang-rank", f.hang,
                    "Fault injection, RANK:STEP: from that step on, that rank never reaches its collectives (it "
                    "sleeps in its forward, as a rank stuck in its input pipeline or a deadlock would)");
  ranks->add_option("--fsdp-reshard", o.fsdp.reshard_after_forward,
                    "fsdp: free each layer's gathered parameters after its forward and gather them again for its "
                    "backward (true, as ZeRO-3), or keep them until its backward (false, as ZeRO-2)")
      ->each([&o](const std::string&) { o.given.insert("--fsdp-reshard"); });
  ranks->add_option("--fsdp-prefetch", o.fsdp.prefetch,
                    "fsdp: layers whose all-gather is issued ahead, while the current one computes (0: none)")
      ->check(CLI::Range(0, 64))
      ->each([&o](const std::string&) { o.given.insert("--fsdp-prefetch"); });
  ranks->add_option("--tp", o.ddp.tp,
                    "ddp: tensor-parallel groups of N adjacent ranks (each cuts the model as --mode=tp does), DDP "
                    "across the groups: 2D data x tensor parallelism, as Megatron-LM (N must divide the ranks)")
      ->check(CLI::Range(1, 1 << 16));
  ranks->add_flag("--sync-bn", o.ddp.sync_bn,
                  "DDP: SyncBatchNorm, BatchNorm statistics over the global batch (torch.nn.SyncBatchNorm)");
  ranks->add_option("--rank", o.ranks.rank, "This process's rank (else from torchrun/Slurm/Open MPI variables)")
      ->check(CLI::Range(0, 1 << 20));
  ranks->add_option("--world-size", o.ranks.world_size, "Ranks in the run (with --rank)")->check(CLI::Range(1, 1 << 20));
  ranks->add_option("--local-rank", o.ranks.local_rank, "This process's rank on its node (with --rank)")
      ->check(CLI::Range(0, 1 << 20));
  auto* coll = app.add_option_group("Collectives", "--bench=collectives (nccl-tests' -b/-e/-f/-n/-w)");
  coll->add_option("--ops", f.ops, "Collectives, comma-separated: allreduce, allgather, reduce_scatter, broadcast");
  // Sizes as nccl-tests writes them (8, 64K, 256M, 1G; K = 1024), up to 1 TiB.
  const auto size = [](CLI::Option* opt) {
    return opt->transform(CLI::AsSizeValue(false))->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  };
  size(coll->add_option("--min-bytes,-b", o.collectives.min_bytes,
                        "Smallest size in bytes (K, M, G: 1024, 1024^2, 1024^3), 1 byte to 1 TiB"));
  size(coll->add_option("--max-bytes,-e", o.collectives.max_bytes, "Largest size"));
  coll->add_option("--step-factor,-f", o.collectives.factor, "Size multiplier between steps")->check(CLI::Range(2, 1024));
  coll->add_option("--iters,-n", o.collectives.iters, "Timed iterations per size")->check(CLI::Range(1, 1 << 20));
  coll->add_flag("--load", o.collectives.load,
                 "Each rank keeps one compute thread busy while its collectives run, as DDP's backward does: the "
                 "times are a collective's under load, and each row says how much the collectives slowed that "
                 "thread (load_slowdown), what --simulate --link takes as contention");
  coll->add_option("--isolated", o.collectives.isolated,
                   "Per size, this many collectives more, each timed alone after a pause with the link idle (200 us; "
                   "--isolated-pause-us): the "
                   "cost of a collective that starts on an idle link (a DDP step's first bucket after compute) "
                   "against one queued behind another (isolated_us; what --simulate --link takes for a bucket "
                   "launched on an idle link)")
      ->check(CLI::Range(0, 1000));
  coll->add_option("--isolated-pause-us", o.collectives.isolated_pause_us,
                   "The pause before each --isolated collective, in microseconds")
      ->check(CLI::Range(int64_t{0}, int64_t{10'000'000}));
  coll->add_option("--kill-rank", f.kill,
                   "Fault injection, RANK:N: that rank kills itself after N collectives (to see what the others "
                   "report)");
  app.add_flag("--cuda-graph", o.device.cuda_graph,
               "CUDA: after two eager steps, capture forward, loss and backward as a CUDA graph and replay it each "
               "step (the optimizer runs outside it)");
  app.add_flag("--deterministic", o.device.deterministic,
               "Deterministic algorithms only (like torch.backends.cudnn.deterministic): runs repeat bit for bit");
  app.add_flag("--nvtx", o.out.nvtx,
               "NVTX ranges (step, forward, backward, each layer, optimizer, data.h2d) for Nsight Systems: nsys "
               "profile --capture-range=cudaProfilerApi dpbench ... records the measured steps");
  app.add_flag("--op-profile", o.out.op_profile,
               "Time every op of the measured steps (waits for the device around each op) and print where the "
               "step's time goes");
  auto* sim = app.add_option_group("Simulate", "--simulate: predict step time and scaling at --gpus counts");
  sim->add_flag("--simulate", f.simulate,
                "Predict instead of run: --mode=ddp (or dp, mp) at each --gpus count (e.g. --gpus=2..1024, doubling), "
                "from a one-device profile and a link model");
  sim->add_option("--profile", o.simulate.profile_path,
                  "--simulate: a single-device report recorded with --layer-profile (measured layer times)");
  sim->add_option("--single-step-s", o.simulate.single_step_s,
                  "--simulate: a measured or published one-device step time, split across --model's layers for "
                  "--batch on --hardware by FLOPs and bytes (an analytic profile)")
      ->check(CLI::Range(0.0, 1e6));
  sim->add_option("--from-trace", o.simulate.trace_path,
                  "--simulate: a PyTorch profiler trace of the job on one rank (a file, or a folder of one job's "
                  "ranks: rank 0's is read): its forward, backward, optimizer, gradients and other communication "
                  "become the one-device profile (--mode=ddp or fsdp); a dpbench report is read as --profile");
  sim->add_option("--hardware", o.simulate.hardware,
                  "--simulate: a preset (GPUs per node, fabrics, NICs, peak FLOP/s, memory bandwidth): dgx1-v100, "
                  "dgx-h100, pcie-a100-25gbe, cpu-gloo-local, or a preset file's path (default: with --from-trace "
                  "the trace's GPU's, else cpu-gloo-local)");
  sim->add_option("--link", f.links,
                  "--simulate: --bench=collectives reports (comma-separated, one per rank count) to fit the link on "
                  "instead of the preset's fabrics; one recorded with --load adds the all-reduce's time beside "
                  "compute and the measured contention");
  sim->add_option("--crowded-profile", o.simulate.crowded_profile_path,
                  "--simulate with --profile: the same --layer-profile run recorded while another rank trained on the "
                  "same machine at the same time; at 2 ranks or more compute takes as much longer as its layers did "
                  "(ranks sharing cores, caches or memory bandwidth slow each other), and the slowest rank's lag is that of "
                  "its steps (rank_lag) where it has one");
  sim->add_option("--sim-jitter", o.simulate.jitter,
                  "--simulate: relative standard deviation of each rank's compute per step (every collective waits "
                  "for the slowest rank; default: a measured profile's own steps, the slowest of N drawn from them, "
                  "else 0)");
  sim->add_option("--contention", o.simulate.contention,
                  "--simulate: how much slower compute runs while the step's all-reduces are in flight (0.1: 10 %; "
                  "default: the preset's fitted value)");
  app.add_flag("--layer-profile", o.out.layer_profile,
               "--mode=single: after the run, time each layer's forward and backward and the optimizer into the "
               "report (runs[0].layer_profile), the profile --simulate --profile replays");
  app.add_flag("--verify", o.verify.enabled,
               "Instead of benchmarking: train --verify-steps in --mode and in single mode from the same start, print "
               "each parameter's difference relative to how far training moved it, exit 1 above --verify-tolerance");
  app.add_option("--verify-steps", o.verify.steps, "Steps for --verify")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--verify-tolerance", o.verify.tolerance,
                 "Largest allowed difference of a parameter from single-device training for --verify, relative to how "
                 "far single-device training moved it (default 1e-3; 2e-2 with --sync-bn)")
      ->check(above_zero());
}

}  // namespace

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
      << flag << "='" << escape_untrusted(text) << "': expected " << form << ", e.g. " << flag << "=" << example;
  return {rank, count};
}

std::vector<int> parse_gpus(const std::string& text) {
  std::vector<int> out;
  const std::string shown = escape_untrusted(text);
  for (const auto& item : split_commas(text)) {
    DPB_CHECK(!item.empty() && item.size() <= 3 &&
              std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; }))
        << "--gpus='" << shown << "': expected a device count or a list such as 1,2,4";
    const int n = std::stoi(item);
    DPB_CHECK(n >= 1 && n <= 64) << "--gpus='" << shown << "': " << n << " devices (each count must be 1..64)";
    DPB_CHECK(out.empty() || n > out.back()) << "--gpus='" << shown << "': list the counts in increasing order";
    out.push_back(n);
  }
  DPB_CHECK(!out.empty()) << "--gpus='" << shown << "': expected a device count or a list such as 1,2,4";
  return out;
}

std::vector<int> parse_rank_counts(const std::string& text) {
  const std::string shown = escape_untrusted(text);
  const auto count = [&](const std::string& item) {
    DPB_CHECK(!item.empty() && item.size() <= 7 &&
              std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; }))
        << "--gpus='" << shown << "': expected counts such as 2,4,8 or a doubling range such as 2..1024";
    const int n = std::stoi(item);
    DPB_CHECK(n >= 1 && n <= (1 << 20)) << "--gpus='" << shown << "': " << n << " (each count must be 1..1048576)";
    return n;
  };
  std::vector<int> out;
  const auto dots = text.find("..");
  if (dots != std::string::npos) {
    const int lo = count(text.substr(0, dots)), hi = count(text.substr(dots + 2));
    DPB_CHECK(lo <= hi) << "--gpus='" << shown << "': the range must go up";
    for (int64_t n = lo; n <= hi; n *= 2) out.push_back(static_cast<int>(n));
    if (out.back() != hi) out.push_back(hi);
    return out;
  }
  for (const auto& item : split_commas(text)) {
    const int n = count(item);
    DPB_CHECK(out.empty() || n > out.back()) << "--gpus='" << shown << "': list the counts in increasing order";
    out.push_back(n);
  }
  DPB_CHECK(!out.empty()) << "--gpus='" << shown << "': expected counts such as 2,4,8 or a doubling range such as 2..1024";
  return out;
}

namespace {

struct Parser {
  BenchOptions o;
  Flags f;
  CLI::App app{"dpbench: measure how fast a training setup runs, how well it scales, and why not.\n"
               "On the CPU, devices are logical CPU devices (cpu:0, cpu:1, ...), each with its own thread budget."};
  Parser() {
    // A flag given twice takes its last value, so wrappers (scripts/run.sh) can be overridden.
    app.option_defaults()->always_capture_default()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    add_flags(app, f, o);
  }
};

}  // namespace

// An empty word is no flag (CLI11 loops forever on one followed by an unknown flag).
void check_words(const std::vector<std::string>& args) {
  for (size_t i = 1; i < args.size(); ++i)
    DPB_CHECK(!args[i].empty()) << "argument " << i << " is empty (a variable that expanded to nothing?)";
}

BenchOptions parse_options(const std::vector<std::string>& args) {
  check_words(args);
  Parser p;
  std::vector<std::string> rev(args.rbegin(), args.rend());
  if (!rev.empty()) rev.pop_back();  // the program
  p.app.parse(rev);
  convert(p.f, p.o);
  return p.o;
}

int main_cli(int argc, char** argv) {
  // A write past the file-size limit (ulimit -f) fails with EFBIG, said as "File too
  // large" by whatever was writing, instead of killing the process with SIGXFSZ.
  ::signal(SIGXFSZ, SIG_IGN);
  try {
    check_words(std::vector<std::string>(argv, argv + argc));
  } catch (const std::exception& e) {
    std::cerr << "dpbench: error: " << e.what() << "\n";
    return 2;
  }
  Parser p;
  try {
    p.app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return p.app.exit(e);
  }
  const std::vector<std::string> args(argv, argv + argc);
  try {
    convert(p.f, p.o);
    // A held ISA that names nothing fails here, not in the first kernel of a worker thread.
    (void)cpu::simd_isa();
    return run(p.o, args);
  } catch (const std::exception& e) {
    std::cerr << "dpbench: error: " << e.what() << "\n";
    return 2;
  }
}

}  // namespace dpb::bench
