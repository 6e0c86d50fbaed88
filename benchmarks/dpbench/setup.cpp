#include "benchmarks/dpbench/setup.h"

#include <fmt/format.h>
#include <sched.h>

#include <chrono>
#include <fstream>
#include <optional>
#include <thread>

#include "engine/backend/cpu/cpu_context.h"
#include "engine/backend/device_info.h"
#include "engine/backend/precision.h"
#include "engine/core/log.h"
#include "engine/nn/init.h"
#include "engine/parallel/tensor_parallel.h"
#if DPB_WITH_CUDA
#include "engine/backend/cuda/device_context.h"
#endif

namespace dpb::bench {

int apply_process_settings(const BenchOptions& o, int devices_on_node) {
  const int threads = threads_per_device(o, devices_on_node);
  cpu::set_threads_per_device(threads);
  set_precision(o.device.precision);
  set_deterministic(o.device.deterministic);
  return threads;
}

Device bench_device(const BenchOptions& o, int index) {
  return o.device.kind == DeviceKind::cuda ? Device::cuda(index) : Device::cpu(index);
}

std::vector<std::string> device_ids(const BenchOptions& o, const RankContext* rank) {
  std::vector<std::string> ids;
  if (rank) {
    for (int r = 0; r < rank->group->size(); ++r)
      ids.push_back(fmt::format("{}@rank{}", device_kind_name(o.device.kind), r));
    return ids;
  }
  for (int d = 0; d < o.device.count; ++d)
    ids.push_back(o.device.logical_gpus ? fmt::format("cuda:{} (GPU {})", d, cuda_physical_device(d))
                                        : bench_device(o, d).str());
  return ids;
}

double device_peak_flops(const BenchOptions& o) {
#if DPB_WITH_CUDA
  if (o.device.kind == DeviceKind::cuda) return cuda::DeviceContext::get(0).peak_flops(o.device.precision);
#endif
  (void)o;
  return 0.0;
}

std::vector<int> allowed_cores() {
  std::vector<int> cores;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cores.push_back(c);
  if (cores.empty())
    for (int c = 0; c < cpu::hardware_threads(); ++c) cores.push_back(c);
  return cores;
}

namespace {
int64_t host_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return 0;
}

// A language model's training memory on one device, estimated before the run so that a
// batch that cannot fit is an error naming the limit, not an allocation failure minutes
// in: the parameters with their gradients and optimizer state (f32), and what each
// token's forward keeps for the backward (per block about 19 activations of the width
// and a row of attention probabilities; the logits and their gradient).
void check_language_model_fits(Model& model, const BenchOptions& o, bool parallel) {
  const ModelSpec& spec = model.spec();
  if (!spec.per_position || spec.layers == 0) return;
  const double params = static_cast<double>(model.parameter_count());
  const double state = o.train.optimizer == OptimizerKind::sgd ? 3.0 : 4.0;
  const double T = static_cast<double>(spec.input[0]);
  const double act_bytes = o.device.precision == Precision::bf16 ? 2.0 : 4.0;
  const double probs = static_cast<double>(spec.heads) * T;  // attention probabilities per token
  const double tokens = static_cast<double>(o.train.batch) * T;
  const double per_token = static_cast<double>(spec.layers) * (19.0 * static_cast<double>(spec.width) + probs) +
                           2.0 * static_cast<double>(spec.outputs);
  const double weights = 4.0 * state * params;
  const double activations = act_bytes * tokens * per_token;
  const bool cuda = o.device.kind == DeviceKind::cuda;
  const int sharing = parallel ? std::max(1, o.device.count) : 1;
  double available = 0;
  std::string where;
  if (cuda) {
    const CudaInfo info = cuda_info();
    if (info.gpus.empty()) return;  // the run's own device check says why
    const int gpus = static_cast<int>(info.gpus.size());
    available = static_cast<double>(info.gpus[0].memory_bytes) / std::max(1, (sharing + gpus - 1) / gpus);
    where = info.gpus[0].name + (sharing > gpus ? " (shared by " + std::to_string(sharing) + " devices)" : "");
  } else {
    available = static_cast<double>(host_available_bytes()) / sharing;
    where = "this machine's available memory" + (sharing > 1 ? " shared by " + std::to_string(sharing) + " devices" : "");
  }
  if (available <= 0) return;
  // ddp: the batch is each rank's; dp splits the batch over its devices (each holds a
  // replica); the pipeline splits the model and its activations over its stages.
  const bool split_batch = parallel && o.mode == ParallelMode::dp;
  const bool split_all = parallel && o.mode == ParallelMode::pipeline;
  const double weights_here = split_all ? weights / sharing : weights;
  const double activations_here = split_all || split_batch ? activations / sharing : activations;
  const double per_device = weights_here + activations_here;
  const double gib = 1024.0 * 1024.0 * 1024.0;
  DPB_CHECK(per_device <= available)
      << spec.name << " at batch " << o.train.batch << " x " << spec.input[0] << " tokens needs about "
      << fmt::format("{:.1f}", per_device / gib) << " GiB per device (parameters, gradients and optimizer state "
      << fmt::format("{:.1f}", weights_here / gib) << " GiB; activations "
      << fmt::format("{:.1f}", activations_here / gib)
      << " GiB, estimated) but " << where << " is " << fmt::format("{:.1f}", available / gib)
      << " GiB: lower --batch or --seq";
}
}  // namespace

namespace {
ModelOptions model_options(const BenchOptions& o) {
  ModelOptions mo;
  const Shape data_shape = dataset_sample_shape(o.data.dataset);
  if (data_shape.ndim() == 3 && o.data.model != "simple" && o.data.model != "widemlp") mo.image = data_shape;
  mo.seq = o.data.seq;
  return mo;
}
}  // namespace

void check_tensor_parallel(const BenchOptions& o) {
  const bool whole = mode_info(o.mode).splits_layers;  // every rank holds a part (else --tp's groups)
  const int ranks = whole ? o.device.count * o.ranks.nnodes : o.ddp.tp;
  const std::string flag = whole ? std::string("--mode=") + parallel_mode_name(o.mode) : "--tp=" + std::to_string(o.ddp.tp);
  // A transformer from its description (GPT-2 124M's parameters would take 638 MiB here,
  // in the launcher); other models have their layers' widths read from a built model.
  if (const auto spec = describe_transformer(o.data.model, model_options(o))) {
    const std::string why = TensorParallel::cannot_split(*spec, ranks, flag);
    DPB_CHECK(why.empty()) << why;
    return;
  }
  Generator g(o.train.seed);
  auto model = build_model(o.data.model, g, model_options(o));
  const std::string why = TensorParallel::cannot_split(*model, ranks, flag);
  DPB_CHECK(why.empty()) << why;
}

RunSetup prepare_run(const BenchOptions& o, bool parallel, const RankContext* rank) {
  RunSetup r;
  if (o.device.logical_gpus) place_cuda_devices(parallel ? o.device.count : 0);
  Generator init_gen(o.train.seed);
  {
    // FSDP's ranks build the model without its parameters' memory (meta-device
    // initialisation): each draws only its shards' rows.
    std::optional<init::DeferredInit> deferred;
    if (parallel && mode_info(o.mode).shards_state) deferred.emplace();
    r.model = build_model(o.data.model, init_gen, model_options(o));
  }
  check_language_model_fits(*r.model, o, parallel);
  const ModelSpec& spec = r.model->spec();
  DatasetRequest dr;
  dr.name = o.data.dataset;
  dr.dir = o.data.dir;
  dr.augment = o.data.augment;
  dr.sample_shape = spec.input;
  dr.loss = spec.loss;
  dr.input_dtype = spec.input_dtype;
  dr.width = spec.outputs;
  dr.seed = o.train.seed;
  r.data = load_dataset(dr);

  const auto& tr = o.train;
  TrainOptions& t = r.train;
  t.batch = tr.batch;
  t.steps = tr.steps;
  t.epochs = tr.epochs;
  t.warmup = tr.warmup;
  t.seed = tr.seed;
  t.optim.kind = tr.optimizer;
  t.optim.lr = tr.lr;
  t.optim.momentum = tr.momentum;
  t.optim.weight_decay = tr.weight_decay;
  t.schedule = tr.lr_schedule;
  t.lr_warmup_steps = tr.lr_warmup;
  t.lr_scale = tr.lr_scale;
  t.base_batch = tr.base_batch;
  t.accum_steps = tr.accum_steps;
  t.clip_grad_norm = tr.clip_grad_norm;
  t.eval_every = o.data.eval_every;
  t.device = bench_device(o, 0);
  t.mode = parallel ? o.mode : ParallelMode::single;
  if (t.mode == ParallelMode::pipeline) {
    for (int d = 0; d < o.device.count; ++d) t.devices.push_back(bench_device(o, d));
    t.pipeline.split = o.pipeline.split;
    t.pipeline.schedule = o.pipeline.schedule;
    t.pipeline.micro_batches = micro_batches(o);
  }
  if (t.mode == ParallelMode::dp) {
    for (int d = 0; d < o.device.count; ++d) t.devices.push_back(bench_device(o, d));
    t.dp.bypass = o.dp.bypass;
    t.dp.replicate_input = o.dp.replicate_input;
  }
  if (t.mode == ParallelMode::fsdp) {
    t.fsdp.reshard_after_forward = o.fsdp.reshard_after_forward;
    t.fsdp.prefetch = o.fsdp.prefetch;
  }
  if (is_distributed(t.mode)) {
    DPB_CHECK(rank) << "--mode=" << parallel_mode_name(t.mode) << " runs as ranks";
    t.device = rank->device;
    t.ddp.group = rank->data_group ? rank->data_group : rank->group;
    t.tp_group = rank->tensor_group;
    t.ddp.reducer.bucket_bytes = bucket_bytes(o);
    t.ddp.distributed_sampler = o.ddp.distributed_sampler;
    t.ddp.sync_bn = o.ddp.sync_bn;
    // Fault injection (--straggler): this rank computes slower every step, inside its
    // forward, as a rank on a throttled or shared device would.
    if (rank->group->rank() == o.ddp.straggler_rank) {
      const auto delay = std::chrono::milliseconds(o.ddp.straggler_ms);
      t.hooks.in_forward = [delay](int64_t) { std::this_thread::sleep_for(delay); };
    }
    // Fault injection (--hang-rank): from that step on, this rank sleeps in its forward
    // and never reaches the step's collectives; the others must time out naming it.
    if (rank->group->rank() == o.ddp.hang_rank) {
      const int64_t from = o.ddp.hang_step;
      t.hooks.in_forward = [from](int64_t step) {
        if (step < from) return;
        log::warn("fault injection (--hang-rank): this rank stops at step {}, before its collectives", step);
        for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
      };
    }
  }
  t.cuda_graph = o.device.cuda_graph;
  t.workers = loader_workers(o);
  t.prefetch = o.data.prefetch;
  t.loader_delay_ms = o.data.loader_delay_ms;
  return r;
}

}  // namespace dpb::bench
