#include "benchmarks/dpbench/options.h"

#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "engine/backend/cpu/cpu_context.h"
#include "engine/backend/device_info.h"
#include "engine/core/error.h"
#include "engine/core/file_io.h"
#include "engine/core/log.h"
#include "engine/core/text.h"

namespace dpb::bench {

const char* device_kind_name(DeviceKind k) { return k == DeviceKind::cuda ? "cuda" : "cpu"; }

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::gloo:
      return "gloo";
    case Backend::nccl:
      return "nccl";
    case Backend::automatic:
      return "auto";
  }
  return "?";
}

Backend resolved_backend(const BenchOptions& o) {
  if (o.ranks.backend != Backend::automatic) return o.ranks.backend;
  return o.device.kind == DeviceKind::cuda ? Backend::nccl : Backend::gloo;
}

void validate(const BenchOptions& o) {
  const auto& d = o.device;
  const bool cuda = d.kind == DeviceKind::cuda;
  const std::string mode = parallel_mode_name(o.mode);
  const ModeInfo& m = mode_info(o.mode);
  const auto& p = o.pipeline;
  DPB_CHECK(p.micro_batches >= 0) << "--micro-batches must be at least 1, got " << p.micro_batches;
  DPB_CHECK(p.schedule != PipelineSchedule::naive || p.micro_batches <= 1)
      << "--schedule=naive runs the whole batch through one stage at a time; --micro-batches=" << p.micro_batches
      << " needs --schedule=gpipe or --schedule=1f1b";
  DPB_CHECK(!m.pipelines || d.count >= 2)
      << "--mode=mp cuts the model over --gpus=2 or more devices, got --gpus=" << d.count;
  DPB_CHECK(o.mode != ParallelMode::pipeline || o.train.accum_steps == 1)
      << "--mode=mp accumulates over --micro-batches; --accum-steps is for single and ddp";
  DPB_CHECK(o.mode != ParallelMode::dp || o.train.accum_steps == 1)
      << "--mode=dp does not accumulate gradients (as torch.nn.DataParallel); --accum-steps is for single and ddp";
  DPB_CHECK(o.train.accum_steps >= 1) << "--accum-steps must be at least 1, got " << o.train.accum_steps;
  DPB_CHECK(o.ddp.bucket_mb > 0 && o.ddp.bucket_mb <= 1024 * 1024)
      << "--bucket-mb must be positive (and at most 1048576), got " << o.ddp.bucket_mb;
  DPB_CHECK(d.count >= 1) << "--gpus must be at least 1, got " << d.count;
  DPB_CHECK(o.mode != ParallelMode::single || d.count == 1)
      << "--mode=single runs on one device; use --mode=dp or --mode=ddp for --gpus=" << d.count;
  DPB_CHECK(d.precision == Precision::fp32 || cuda)
      << "--precision=" << precision_name(d.precision) << " needs --devices=cuda (the CPU backend computes in fp32)";
  DPB_CHECK(!d.cuda_graph || (cuda && o.mode == ParallelMode::single))
      << "--cuda-graph needs --devices=cuda and --mode=single";
  DPB_CHECK(!(d.cuda_graph && o.out.op_profile))
      << "--op-profile times ops one at a time, which a CUDA graph replay does not allow; use one or the other";
  DPB_CHECK(!d.logical_gpus || (cuda && m.multi_device_process))
      << "--logical-gpus places the devices of --mode=dp or --mode=mp on fewer GPUs: it needs --devices=cuda and one "
         "of those modes";
  DPB_CHECK(d.timing == DeviceTiming::automatic || d.timing == DeviceTiming::off || cuda)
      << "--device-timing=" << (d.timing == DeviceTiming::cupti ? "cupti" : "events")
      << " times GPU work; on logical CPU devices the host clock is the device's (use auto or off)";
  // Checked before the GPUs are: a mistake in the flags is named on any machine.
  // A flag of another mode is an error, never silently ignored (the registry says whose).
  for (const ModeInfo& other : parallel_modes())
    for (const char* flag : other.options)
      DPB_CHECK(!o.given.count(flag) || o.mode == other.mode)
          << flag << " is for --mode=" << other.name << ", not --mode=" << mode;
  DPB_CHECK(!o.train.save_sharded || m.shards_state)
      << "--save-format=sharded is for --mode=fsdp (--mode=" << mode << " writes one full checkpoint)";
  // SyncBatchNorm needs whole BatchNorm layers on ranks that split the batch.
  DPB_CHECK(!m.distributed || m.all_reduces_gradients || !o.ddp.sync_bn) << "--sync-bn is for --mode=ddp";
  DPB_CHECK(o.ddp.tp == 1 || o.mode == ParallelMode::ddp)
      << "--tp=" << o.ddp.tp << " is for --mode=ddp (2D: data x tensor); --mode=tp cuts the model over every rank";
  DPB_CHECK(o.ddp.tp == 1 || (d.count * o.ranks.nnodes) % o.ddp.tp == 0)
      << "--tp=" << o.ddp.tp << " does not divide the " << d.count * o.ranks.nnodes << " rank(s) into tensor-parallel "
      << "groups";
  DPB_CHECK(o.ddp.tp == 1 || d.count % o.ddp.tp == 0)
      << "--tp=" << o.ddp.tp << " must divide the ranks of each node (" << d.count
      << "): a tensor-parallel group stays within one node";
  DPB_CHECK(o.ddp.tp == 1 || !o.ddp.sync_bn) << "--sync-bn does not combine with --tp (tensor parallelism cuts no "
                                                "BatchNorm)";
  DPB_CHECK(!m.splits_layers || o.ranks.nnodes == 1)
      << "--mode=tp runs within one node (its all-reduces sit between every layer's products); with --nnodes="
      << o.ranks.nnodes << " use --mode=ddp or fsdp across nodes";
  DPB_CHECK(m.splits_batch || !m.distributed || o.ddp.distributed_sampler)
      << "--sampler=none is for --mode=ddp: tensor-parallel ranks all train on the same batches";
  if (is_distributed(o.mode)) {
    // NCCL refuses two ranks on one GPU, and its collectives check nothing across ranks.
    const bool nccl = resolved_backend(o) == Backend::nccl;
    DPB_CHECK(!(nccl && o.ddp.device_map == DeviceMap::same && d.count > 1))
        << "--device-map=same puts every rank on GPU 0, which NCCL refuses (one communicator rank per GPU); use "
           "--backend=gloo to run several ranks on one GPU";
    DPB_CHECK(!(nccl && o.ranks.debug_collectives))
        << "--debug-collectives compares every collective across ranks through the store, which the NCCL backend "
           "does not do; use --backend=gloo to check collectives, or drop the flag";
  }
  if (cuda) {
    const CudaInfo info = cuda_info();
    DPB_CHECK(info.built) << "--devices=cuda: this build has no CUDA backend (configure with -DDPB_CUDA=ON on a "
                             "machine with the CUDA toolkit, cuDNN and NCCL)";
    // ddp's ranks may share GPUs (rank r on cuda:r mod count; dpdoctor says so), and so
    // may --logical-gpus; otherwise dp and mp have already been cut to the visible devices.
    DPB_CHECK(static_cast<int>(info.gpus.size()) >= (is_distributed(o.mode) || d.logical_gpus ? 1 : d.count))
        << "--devices=cuda --gpus=" << d.count << ": " << info.gpus.size() << " CUDA device(s) visible"
        << (info.unavailable_reason.empty() ? "" : " (" + info.unavailable_reason + ")");
  }
  DPB_CHECK(o.ddp.straggler_rank < 0 || is_distributed(o.mode))
      << "--straggler is for --mode=ddp, fsdp or tp (a rank that computes slower)";
  DPB_CHECK(o.ddp.device_map == DeviceMap::spread || is_distributed(o.mode))
      << "--device-map is for --mode=ddp, fsdp or tp (where each rank process is placed on a device)";
  DPB_CHECK(o.ddp.straggler_rank < 0 || o.ddp.straggler_rank < d.count * o.ranks.nnodes)
      << "--straggler=" << o.ddp.straggler_rank << ":" << o.ddp.straggler_ms << " but there are "
      << d.count * o.ranks.nnodes << " rank(s)";
  DPB_CHECK(o.ddp.hang_rank < 0 || (is_distributed(o.mode) && o.ddp.hang_rank < d.count * o.ranks.nnodes))
      << "--hang-rank=" << o.ddp.hang_rank << ":" << o.ddp.hang_step << " needs --mode=ddp, fsdp or tp and a rank below "
      << d.count * o.ranks.nnodes;
  DPB_CHECK(!o.verify.enabled || o.verify.steps >= 1) << "--verify-steps must be at least 1, got " << o.verify.steps;
  DPB_CHECK(!o.verify.enabled || (o.out.json_path.empty() && o.out.trace_path.empty()))
      << "--verify compares against single-device training and writes no report or trace: run the training with "
         "--json or --trace without --verify";
  DPB_CHECK(!o.out.layer_profile || (o.mode == ParallelMode::single && o.sweep.empty() && !d.cuda_graph))
      << "--layer-profile times one device's layers: it needs --mode=single, one --gpus count and no --cuda-graph";
}

void validate_simulate(const BenchOptions& o) {
  const auto& s = o.simulate;
  DPB_CHECK(o.mode != ParallelMode::single)
      << "--simulate predicts a parallel mode at several device counts: give --mode=ddp, dp, mp, fsdp or tp";
  const int profiles = !s.profile_path.empty() + (s.single_step_s > 0) + !s.trace_path.empty();
  DPB_CHECK(profiles == 1)
      << (profiles == 0 ? "--simulate needs a one-device profile: --profile=REPORT (a dpbench --layer-profile report), "
                          "--from-trace=TRACE (a PyTorch profiler trace of the job) or --single-step-s=SECONDS with "
                          "--model, --batch and --hardware (an analytic profile)"
                        : "--profile, --from-trace and --single-step-s are three profiles; give one");
  DPB_CHECK(s.trace_path.empty() || mode_info(o.mode).splits_batch)
      << "--from-trace predicts --mode=ddp or --mode=fsdp (a trace gives the job's gradients, not its layers' "
         "activations or splits), got --mode=" << parallel_mode_name(o.mode);
  DPB_CHECK(s.trace_path.empty() || s.crowded_profile_path.empty())
      << "--crowded-profile goes with --profile, not --from-trace";
  DPB_CHECK(s.jitter < 1 && (s.jitter >= 0 || s.jitter == -1)) << "--sim-jitter is a relative standard deviation in [0, 1), got " << s.jitter;
  DPB_CHECK(s.contention < 0 || s.contention <= 100) << "--contention must be in [0, 100], got " << s.contention;
  DPB_CHECK(o.ddp.bucket_mb > 0 && o.ddp.bucket_mb <= 1024 * 1024)
      << "--bucket-mb must be positive (and at most 1048576), got " << o.ddp.bucket_mb;
  DPB_CHECK(!s.ranks.empty()) << "--simulate needs device counts (--gpus=2,4,8 or --gpus=2..1024)";
}

void validate_collectives(const BenchOptions& o) {
  const Backend backend = resolved_backend(o);
  DPB_CHECK(backend == Backend::gloo || o.device.kind == DeviceKind::cuda)
      << "--backend=" << backend_name(backend) << " runs on GPUs; with --devices=cpu use --backend=gloo";
  DPB_CHECK(o.ranks.timeout_s > 0) << "--timeout must be positive, got " << o.ranks.timeout_s;
  DPB_CHECK(o.ranks.nnodes >= 1 && o.ranks.node_rank >= 0 && o.ranks.node_rank < o.ranks.nnodes)
      << "--node-rank=" << o.ranks.node_rank << " is outside --nnodes=" << o.ranks.nnodes;
  DPB_CHECK(!o.device.logical_gpus) << "--logical-gpus places the devices of --mode=dp or --mode=mp on fewer GPUs; "
                                       "--bench=collectives runs one rank per process";
  DPB_CHECK(!(backend == Backend::nccl && o.ranks.debug_collectives))
      << "--debug-collectives compares every collective across ranks through the store, which the NCCL backend does "
         "not do; use --backend=gloo to check collectives, or drop the flag";
  if (o.device.kind == DeviceKind::cuda) {
    const CudaInfo info = cuda_info();
    DPB_CHECK(info.built && !info.gpus.empty()) << "--devices=cuda: no usable GPU ("
                                                << (info.built ? info.unavailable_reason : "built without CUDA") << ")";
  }
  DPB_CHECK(!(o.collectives.load && o.device.kind == DeviceKind::cuda))
      << "--load keeps a host thread computing beside the collectives, as a CPU rank's backward does; on GPUs the "
         "backward runs on the device, which that thread does not load: use --load with --devices=cpu";
  for (const auto& op : o.collectives.ops) (void)collective_spec(op);
  DPB_CHECK(o.collectives.min_bytes >= 1 && o.collectives.max_bytes >= o.collectives.min_bytes)
      << "--min-bytes=" << o.collectives.min_bytes << " --max-bytes=" << o.collectives.max_bytes
      << ": need 1 <= min <= max";
}

int visible_devices(const BenchOptions& o) {
  int n = o.device.kind == DeviceKind::cuda ? cuda_device_count() : cpu::kMaxCpuDevices;
  if (o.device.visible > 0) n = std::min(n, o.device.visible);
  return n;
}

void apply_visible_devices(BenchOptions& o) {
  o.device.requested = o.device.count;
  if (!multi_device_process(o.mode) || o.device.logical_gpus) return;
  const int visible = visible_devices(o);
  if (o.device.count <= visible) return;
  DPB_CHECK(visible >= 1) << "--gpus=" << o.device.count << " but no " << device_kind_name(o.device.kind)
                          << " device is visible";
  log::warn("--gpus={} but only {} {} device(s) are visible: running on {}", o.device.count, visible,
            device_kind_name(o.device.kind), visible);
  o.device.count = visible;
}

BenchOptions sweep_point(const BenchOptions& o, int n) {
  BenchOptions p = o;
  p.sweep.clear();
  p.repeat = 1;
  p.device.count = n;
  if (o.mode == ParallelMode::pipeline && n == 1) {
    p.mode = ParallelMode::single;  // one stage: the pipeline's flags have nothing to cut
    for (const char* f : mode_info(ParallelMode::pipeline).options) p.given.erase(f);
  }
  if (o.mode == ParallelMode::single && n > 1) p.mode = ParallelMode::dp;
  if (multi_device_process(o.mode)) p.train.batch = o.train.batch * n;
  return p;
}

std::string sweep_run_value(const SweepRun& r) { return fmt::format("{}:{}:{}", r.devices, r.repeat, r.dir); }

std::optional<SweepRun> sweep_run_from_environment() {
  const char* v = std::getenv(kSweepRunVariable);
  if (!v || !*v) return std::nullopt;
  const std::string text(v);
  const auto number = [&](size_t from, size_t to) {
    const std::string digits = text.substr(from, to - from);
    DPB_CHECK(!digits.empty() && digits.size() <= 7 &&
              std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
        << kSweepRunVariable << "='" << escape_untrusted(text) << "': expected DEVICES:REPETITION:DIR";
    return std::stoi(digits);
  };
  const size_t a = text.find(':'), b = a == std::string::npos ? a : text.find(':', a + 1);
  DPB_CHECK(b != std::string::npos && b + 1 < text.size())
      << kSweepRunVariable << "='" << escape_untrusted(text) << "': expected DEVICES:REPETITION:DIR";
  return SweepRun{number(0, a), number(a + 1, b), text.substr(b + 1)};
}

namespace {
std::string with_suffix(const std::string& path, const std::string& suffix) {
  const std::filesystem::path p(path);
  return (p.parent_path() / (p.stem().string() + suffix + p.extension().string())).string();
}
}  // namespace

BenchOptions sweep_run(const BenchOptions& o, const SweepRun& r) {
  DPB_CHECK(std::find(o.sweep.begin(), o.sweep.end(), r.devices) != o.sweep.end() && r.repeat < o.repeat)
      << kSweepRunVariable << ": " << r.devices << " devices, repetition " << r.repeat
      << " is no run of this sweep (--gpus=" << fmt::format("{}", fmt::join(o.sweep, ",")) << ", --repeat="
      << o.repeat << ")";
  BenchOptions p = sweep_point(o, r.devices);
  // The same thread budget per device at every point: at the largest count every device
  // of this node gets its share of the cores, and the smaller points get no more.
  p.device.threads = threads_per_device(o, o.sweep.back());
  p.out.json_path = (std::filesystem::path(r.dir) / fmt::format("gpus{}-r{}.json", r.devices, r.repeat)).string();
  if (!o.out.trace_path.empty())
    p.out.trace_path = with_suffix(o.out.trace_path, fmt::format("-gpus{}{}", r.devices,
                                                                  o.repeat > 1 ? fmt::format("-r{}", r.repeat) : ""));
  p.out.doctor = false;
  return p;
}

int micro_batches(const BenchOptions& o) {
  if (o.pipeline.micro_batches > 0) return o.pipeline.micro_batches;
  if (o.pipeline.schedule == PipelineSchedule::naive) return 1;
  return static_cast<int>(std::min<int64_t>(4, o.train.batch));
}

int loader_workers(const BenchOptions& o) {
  if (o.data.workers >= 0) return o.data.workers;
  if (o.device.kind != DeviceKind::cuda) return 0;
  return std::clamp(cpu::hardware_threads() - 1, 1, 8);
}

int threads_per_device(const BenchOptions& o, int devices_on_node) {
  if (o.device.threads > 0) return o.device.threads;
  return std::max(1, cpu::hardware_threads() / std::max(1, devices_on_node));
}

int64_t bucket_bytes(const BenchOptions& o) { return static_cast<int64_t>(o.ddp.bucket_mb * 1024 * 1024); }

void check_checkpoint_writable(const BenchOptions& o) {
  const std::string& p = o.train.save_path;
  if (p.empty()) return;
  if (!o.train.save_sharded || !std::filesystem::exists(p)) return check_writable(p);
  DPB_CHECK(std::filesystem::is_directory(p))
      << "--save=" << p << ": a sharded checkpoint is a directory (one file per rank), and this is a file "
      << "(--save-format=full writes one file)";
  DPB_CHECK(::access(p.c_str(), W_OK) == 0) << "--save=" << p << ": the directory is not writable";
}

std::vector<std::string> without_options(const std::vector<std::string>& args, const std::vector<std::string>& valued,
                                         const std::vector<std::string>& flags) {
  std::vector<std::string> out;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    const std::string name = a.substr(0, a.find('='));
    if (std::find(flags.begin(), flags.end(), name) != flags.end()) continue;
    bool drop = false;
    for (const auto& o : valued) {
      if (a == o) {
        drop = true;
        ++i;  // its value
        break;
      }
      if (a.rfind(o + "=", 0) == 0) {
        drop = true;
        break;
      }
    }
    if (!drop) out.push_back(a);
  }
  return out;
}

}  // namespace dpb::bench
