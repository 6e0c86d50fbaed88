// The report's env, config and sweep <-> JSON (the rest: model_json.cpp).
#include "reports/model.h"
#include "reports/model_json_util.h"

namespace dpb::reports::json_util {

using nlohmann::json;

std::vector<std::string> strings(const JsonView& j, std::string_view key, size_t max_items) {
  std::vector<std::string> out;
  for (const auto& s : j.items(key, max_items)) out.push_back(s.text(kName));
  return out;
}

std::vector<int64_t> integers(const JsonView& j, std::string_view key, int64_t lo, int64_t hi) {
  std::vector<int64_t> out;
  for (const auto& v : j.items(key, 1 << 20)) out.push_back(v.integer(lo, hi));
  return out;
}

json env_json(const Environment& e) {
  json gpus = json::array();
  for (const auto& g : e.gpus)
    gpus.push_back({{"index", g.index},
                    {"name", g.name},
                    {"memory_bytes", g.memory_bytes},
                    {"compute_capability", g.compute_capability},
                    {"pci_bus_id", g.pci_bus_id}});
  return {{"host", e.host},
          {"cpu",
           {{"model", e.cpu_model},
            {"threads", e.cpu_threads},
            {"kernels_isa", opt_text(e.kernels_isa)},
            {"onednn_isa", opt_text(e.onednn_isa)}}},
          {"onednn", e.onednn},
          {"cuda_built", e.cuda_built},
          {"cuda", opt_text(e.cuda)},
          {"driver", opt_text(e.driver)},
          {"cudnn", opt_text(e.cudnn)},
          {"nccl", opt_text(e.nccl)},
          {"gpus", gpus}};
}

Environment env_from(const JsonView& j) {
  Environment e;
  e.host = j.str("host", kName);
  const JsonView cpu = j.member("cpu");
  e.cpu_model = cpu.str("model", kName);
  e.cpu_threads = static_cast<int>(cpu.integer("threads", 0, 1 << 20));
  e.kernels_isa = cpu.maybe_str("kernels_isa", 32);
  e.onednn_isa = cpu.maybe_str("onednn_isa", 32);
  e.onednn = j.str("onednn", 64);
  e.cuda_built = j.boolean_or("cuda_built", false);
  e.cuda = j.maybe_str("cuda", 64);
  e.driver = j.maybe_str("driver", 64);
  e.cudnn = j.maybe_str("cudnn", 64);
  e.nccl = j.maybe_str("nccl", 64);
  for (const auto& g : j.items("gpus", 1 << 12)) {
    GpuDescription d;
    d.index = static_cast<int>(g.integer("index", 0, 1 << 16));
    d.name = g.str("name", kName);
    d.memory_bytes = g.integer("memory_bytes", 0, kCount);
    d.compute_capability = g.maybe_str("compute_capability", 32).value_or("");
    d.pci_bus_id = g.maybe_str("pci_bus_id", 64).value_or("");
    e.gpus.push_back(std::move(d));
  }
  return e;
}

json config_json(const RunConfig& c, bool sweep) {
  json j = {{"mode", parallel_mode_name(c.mode)},
            {"model", c.model},
            {"dataset", c.dataset},
            {"data_dir", opt_text(c.data_dir)},
            {"devices", c.devices == DeviceKind::cuda ? "cuda" : "cpu"},
            {"gpus", sweep ? json(c.gpus) : json(c.gpus.empty() ? 1 : c.gpus.front())},
            {"gpus_requested", c.gpus_requested},
            {"visible_devices", c.visible_devices},
            {"logical_gpus", c.logical_gpus},
            {"batchnorm", c.batchnorm},
            {"base_batch", c.base_batch},
            {"device_list", c.device_list},
            {"dp_forward", opt_text(c.dp_forward)},
            {"pipeline_schedule",
             c.pipeline_schedule ? json(pipeline_schedule_name(*c.pipeline_schedule)) : json(nullptr)},
            {"micro_batches", c.micro_batches ? json(*c.micro_batches) : json(nullptr)},
            {"batch_per_device", c.batch_per_device},
            {"global_batch", c.global_batch},
            {"world_size", c.world_size},
            {"accum_steps", c.accum_steps},
            {"precision", precision_name(c.precision)},
            {"cuda_graph", c.cuda_graph},
            {"deterministic", c.deterministic},
            {"backend", opt_text(c.backend)},
            {"bucket_mb", num(c.bucket_mb)},
            {"tensor_parallel", c.tensor_parallel ? json(*c.tensor_parallel) : json(nullptr)},
            {"sampler", opt_text(c.sampler)},
            {"sync_bn", c.sync_bn},
            {"threads_per_device", c.threads_per_device},
            {"steps", c.steps ? json(*c.steps) : json(nullptr)},
            {"epochs", c.epochs ? json(*c.epochs) : json(nullptr)},
            {"warmup", c.warmup},
            {"seed", c.seed},
            {"workers", c.workers},
            {"optimizer", {{"name", c.optimizer.name}, {"lr", c.optimizer.lr}, {"momentum", c.optimizer.momentum}}},
            {"lr_scale", c.lr_scale},
            {"lr_effective", num(c.lr_effective)},
            {"lr_schedule", c.lr_schedule},
            {"parameters", c.parameters},
            {"resumed_from", opt_text(c.resumed_from)}};
  if (c.repeat) j["repeat"] = *c.repeat;
  if (c.sweep_batch) j["sweep_batch"] = *c.sweep_batch;
  return j;
}

RunConfig config_from(const JsonView& j) {
  RunConfig c;
  c.mode = j.choice("mode", parallel_mode_choices());
  c.model = j.str("model", kName);
  c.dataset = j.str("dataset", kName);
  c.data_dir = j.maybe_str("data_dir", 4096);
  c.devices = j.choice<DeviceKind>("devices", {{"cpu", DeviceKind::cpu}, {"cuda", DeviceKind::cuda}});
  c.gpus.clear();
  if (auto g = j.maybe_member("gpus")) {
    if (g->raw().is_array())
      for (const auto& n : g->items(64)) c.gpus.push_back(static_cast<int>(n.integer(1, kMaxWorld)));
    else
      c.gpus.push_back(static_cast<int>(g->integer(1, kMaxWorld)));
  }
  c.device_list = strings(j, "device_list", kMaxWorld);
  c.batch_per_device = j.integer("batch_per_device", 0, kCount);
  c.global_batch = j.integer("global_batch", 1, kCount);
  c.world_size = static_cast<int>(j.maybe_integer("world_size", 1, kMaxWorld).value_or(1));
  if (c.gpus.empty()) c.gpus.push_back(c.world_size);
  c.gpus_requested = static_cast<int>(j.maybe_integer("gpus_requested", 1, kMaxWorld).value_or(c.gpus.back()));
  c.visible_devices = static_cast<int>(j.maybe_integer("visible_devices", 0, kMaxWorld).value_or(0));
  c.logical_gpus = j.boolean_or("logical_gpus", false);
  c.batchnorm = j.boolean_or("batchnorm", false);
  c.base_batch = j.maybe_integer("base_batch", 1, kCount).value_or(256);
  c.dp_forward = j.maybe_str("dp_forward", 16);
  c.pipeline_schedule = j.maybe_choice("pipeline_schedule", kSchedules);
  if (auto m = j.maybe_integer("micro_batches", 1, 1 << 20)) c.micro_batches = static_cast<int>(*m);
  c.accum_steps = static_cast<int>(j.maybe_integer("accum_steps", 1, 1 << 20).value_or(1));
  c.precision = j.choice<Precision>("precision", {{"fp32", Precision::fp32}, {"tf32", Precision::tf32}, {"bf16", Precision::bf16}});
  c.cuda_graph = j.boolean_or("cuda_graph", false);
  c.deterministic = j.boolean_or("deterministic", false);
  c.backend = j.maybe_str("backend", 16);
  c.bucket_mb = j.maybe_number("bucket_mb", 0, 1e9);
  if (auto t = j.maybe_integer("tensor_parallel", 1, 1 << 20)) c.tensor_parallel = static_cast<int>(*t);
  c.sampler = j.maybe_str("sampler", 32);
  c.sync_bn = j.boolean_or("sync_bn", false);
  c.threads_per_device = static_cast<int>(j.maybe_integer("threads_per_device", 0, 1 << 20).value_or(1));
  c.steps = j.maybe_integer("steps", 0, kCount);
  c.epochs = j.maybe_integer("epochs", 0, kCount);
  c.warmup = j.maybe_integer("warmup", 0, kCount).value_or(0);
  if (auto s = j.maybe_member("seed")) c.seed = s->raw().is_number_unsigned() ? s->raw().get<uint64_t>()
                                                                            : static_cast<uint64_t>(s->integer(0, INT64_MAX));
  c.workers = static_cast<int>(j.maybe_integer("workers", -1, 1 << 16).value_or(0));
  if (auto o = j.maybe_member("optimizer")) {
    c.optimizer.name = o->maybe_str("name", 32).value_or("sgd");
    c.optimizer.lr = o->maybe_number("lr", 0, kBig).value_or(0);
    c.optimizer.momentum = o->maybe_number("momentum", 0, kBig).value_or(0);
  }
  c.lr_scale = j.maybe_str("lr_scale", 16).value_or("none");
  c.lr_effective = j.maybe_number("lr_effective", 0, kBig);
  c.lr_schedule = j.maybe_str("lr_schedule", 32).value_or("constant");
  c.parameters = j.maybe_integer("parameters", 0, kCount).value_or(0);
  c.resumed_from = j.maybe_str("resumed_from", 4096);
  if (auto r = j.maybe_integer("repeat", 1, 1 << 16)) c.repeat = static_cast<int>(*r);
  c.sweep_batch = j.maybe_str("sweep_batch", 64);
  return c;
}

json sweep_json(const std::vector<SweepPoint>& sweep) {
  json a = json::array();
  for (const auto& p : sweep) {
    json e{{"world_size", p.world_size},
           {"mode", parallel_mode_name(p.mode)},
           {"global_batch", p.global_batch},
           {"batch_per_device", p.batch_per_device},
           {"throughput_samples_per_s", num(p.throughput_samples_per_s)},
           {"throughput_min", num(p.throughput_min)},
           {"throughput_max", num(p.throughput_max)},
           {"repeats", p.repeats},
           {"scaling_efficiency", num(p.scaling_efficiency)}};
    if (p.predicted) {
      e["predicted"] = true;
      e["step_time_s"] = num(p.step_time_s);
      e["exposed_comm_s"] = num(p.exposed_comm_s);
      e["overlap"] = num(p.overlap);
    }
    a.push_back(std::move(e));
  }
  return a;
}

SweepPoint sweep_point_from(const JsonView& j) {
  SweepPoint p;
  p.world_size = static_cast<int>(j.integer("world_size", 1, kMaxWorld));
  p.mode = j.choice("mode", parallel_mode_choices());
  p.global_batch = j.integer("global_batch", 1, kCount);
  p.batch_per_device = j.maybe_integer("batch_per_device", 0, kCount).value_or(0);
  p.throughput_samples_per_s = j.maybe_number("throughput_samples_per_s", 0, kBig);
  p.throughput_min = j.maybe_number("throughput_min", 0, kBig);
  p.throughput_max = j.maybe_number("throughput_max", 0, kBig);
  p.repeats = static_cast<int>(j.integer("repeats", 0, 1 << 16));
  p.scaling_efficiency = j.maybe_number("scaling_efficiency", 0, kBig);
  p.predicted = j.boolean_or("predicted", false);
  p.step_time_s = j.maybe_number("step_time_s", 0, kBig);
  p.exposed_comm_s = j.maybe_number("exposed_comm_s", 0, kBig);
  p.overlap = j.maybe_number("overlap", 0, 1);
  return p;
}

}  // namespace dpb::reports::json_util
