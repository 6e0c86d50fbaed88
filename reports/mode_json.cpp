// The parallel modes' sections of a run (dp, mp's stages and pipeline, tp, fsdp) <-> JSON,
// for model_json.cpp.
#include "reports/model.h"
#include "reports/model_json_util.h"

namespace dpb::reports::json_util {

using nlohmann::json;

namespace {

json collective_step_json(const CollectiveStepStats& c) {
  return {{"kind", c.kind}, {"count", c.count}, {"bytes", c.bytes}, {"seconds", num(c.seconds)}, {"waited_s", num(c.waited_s)}};
}

CollectiveStepStats collective_step_from(const JsonView& c) {
  CollectiveStepStats s;
  s.kind = c.choice<std::string>(
      "kind", {{"all-gather", "all-gather"}, {"reduce-scatter", "reduce-scatter"}, {"all-reduce", "all-reduce"}});
  s.count = c.integer("count", 0, kCount);
  s.bytes = c.integer("bytes", 0, kCount);
  s.seconds = c.maybe_number("seconds", 0, kBig);
  s.waited_s = c.maybe_number("waited_s", 0, kBig);
  return s;
}

}  // namespace

json dp_json(const DpStats& d) {
  return {{"forward", d.forward},
          {"input", d.input},
          {"scatter_calls", d.scatter_calls},
          {"last_chunks", d.last_chunks},
          {"full_chunks", d.full_chunks},
          {"primary_only_s", num(d.primary_only_s)},
          {"primary_replica_s", num(d.primary_replica_s)},
          {"host_only_s", num(d.host_only_s)},
          {"replica_s", nums(d.replica_s)},
          {"replica_waited_s", nums(d.replica_waited_s)}};
}

DpStats dp_from(const JsonView& j) {
  DpStats d;
  d.forward = j.str("forward", 16);
  d.input = j.str("input", 16);
  d.scatter_calls = j.integer("scatter_calls", 0, kCount);
  d.last_chunks = integers(j, "last_chunks", 0, kCount);
  if (j.has("full_chunks")) d.full_chunks = integers(j, "full_chunks", 0, kCount);
  d.primary_only_s = j.maybe_number("primary_only_s", 0, kBig);
  d.primary_replica_s = j.maybe_number("primary_replica_s", 0, kBig);
  d.host_only_s = j.maybe_number("host_only_s", 0, kBig);
  if (j.has("replica_s")) d.replica_s = maybe_nums(j, "replica_s", 0, kBig);
  if (j.has("replica_waited_s")) d.replica_waited_s = maybe_nums(j, "replica_waited_s", 0, kBig);
  return d;
}

json stages_json(const std::vector<StageStats>& stages) {
  json a = json::array();
  for (const auto& s : stages)
    a.push_back({{"stage", s.stage},
                 {"device", s.device},
                 {"units", s.units},
                 {"parameters", s.parameters},
                 {"busy_fraction", num(s.busy_fraction)},
                 {"idle_share", num(s.idle_share)}});
  return a;
}

StageStats stage_from(const JsonView& j) {
  StageStats s;
  s.stage = static_cast<int>(j.integer("stage", 0, 1 << 16));
  s.device = j.str("device", kName);
  s.units = strings(j, "units");
  s.parameters = j.integer("parameters", 0, kCount);
  s.busy_fraction = j.maybe_number("busy_fraction", 0, kBig);
  s.idle_share = j.maybe_number("idle_share", 0, 1);
  return s;
}

json tp_json(const TpStats& t) {
  json ranks = json::array(), colls = json::array();
  for (const auto& r : t.ranks)
    ranks.push_back({{"rank", r.rank},
                     {"parameter_bytes", r.parameter_bytes},
                     {"optimizer_state_bytes", r.optimizer_state_bytes},
                     {"peak_memory_bytes", r.peak_memory_bytes}});
  for (const auto& c : t.collectives) colls.push_back(collective_step_json(c));
  return {{"full_parameter_bytes", t.full_parameter_bytes},
          {"replicated_bytes", t.replicated_bytes},
          {"ranks", ranks},
          {"collectives", colls}};
}

TpStats tp_from(const JsonView& j) {
  TpStats t;
  t.full_parameter_bytes = j.integer("full_parameter_bytes", 0, kCount);
  t.replicated_bytes = j.integer("replicated_bytes", 0, kCount);
  for (const auto& r : j.items("ranks", kMaxWorld)) {
    TpRankMemory m;
    m.rank = static_cast<int>(r.integer("rank", 0, kMaxWorld));
    m.parameter_bytes = r.integer("parameter_bytes", 0, kCount);
    m.optimizer_state_bytes = r.integer("optimizer_state_bytes", 0, kCount);
    m.peak_memory_bytes = r.integer("peak_memory_bytes", 0, kCount);
    t.ranks.push_back(m);
  }
  for (const auto& c : j.items("collectives", 16)) t.collectives.push_back(collective_step_from(c));
  return t;
}

json fsdp_json(const FsdpStats& f) {
  json ranks = json::array(), colls = json::array();
  for (const auto& r : f.ranks)
    ranks.push_back({{"rank", r.rank},
                     {"shard_parameter_bytes", r.shard_parameter_bytes},
                     {"shard_gradient_bytes", r.shard_gradient_bytes},
                     {"optimizer_state_bytes", r.optimizer_state_bytes},
                     {"peak_gathered_parameter_bytes", r.peak_gathered_parameter_bytes},
                     {"peak_unsharded_gradient_bytes", r.peak_unsharded_gradient_bytes},
                     {"activation_bytes", num(r.activation_bytes)},
                     {"peak_memory_bytes", r.peak_memory_bytes},
                     {"allgather_waited_s", num(r.allgather_waited_s)},
                     {"reduce_scatter_waited_s", num(r.reduce_scatter_waited_s)}});
  for (const auto& c : f.collectives) colls.push_back(collective_step_json(c));
  return {{"reshard_after_forward", f.reshard_after_forward},
          {"prefetch", f.prefetch},
          {"param_dtype", f.param_dtype},
          {"units", f.units},
          {"full_parameter_bytes", f.full_parameter_bytes},
          {"largest_unit_bytes", f.largest_unit_bytes},
          {"ranks", ranks},
          {"collectives", colls}};
}

FsdpStats fsdp_from(const JsonView& j) {
  FsdpStats f;
  f.reshard_after_forward = j.boolean("reshard_after_forward");
  f.prefetch = static_cast<int>(j.integer("prefetch", 0, 1 << 16));
  // Reports written before the bf16 policy gathered f32.
  f.param_dtype = j.maybe_choice<std::string_view>("param_dtype", {{"f32", "f32"}, {"bf16", "bf16"}}).value_or("f32");
  f.units = static_cast<int>(j.integer("units", 0, kCount));
  f.full_parameter_bytes = j.integer("full_parameter_bytes", 0, kCount);
  f.largest_unit_bytes = j.integer("largest_unit_bytes", 0, kCount);
  for (const auto& r : j.items("ranks", kMaxWorld)) {
    FsdpRankMemory m;
    m.rank = static_cast<int>(r.integer("rank", 0, kMaxWorld));
    m.shard_parameter_bytes = r.integer("shard_parameter_bytes", 0, kCount);
    m.shard_gradient_bytes = r.integer("shard_gradient_bytes", 0, kCount);
    m.optimizer_state_bytes = r.integer("optimizer_state_bytes", 0, kCount);
    m.peak_gathered_parameter_bytes = r.integer("peak_gathered_parameter_bytes", 0, kCount);
    m.peak_unsharded_gradient_bytes = r.integer("peak_unsharded_gradient_bytes", 0, kCount);
    m.activation_bytes = r.maybe_number("activation_bytes", 0, static_cast<double>(kCount));
    m.peak_memory_bytes = r.integer("peak_memory_bytes", 0, kCount);
    m.allgather_waited_s = r.maybe_number("allgather_waited_s", 0, kBig);
    m.reduce_scatter_waited_s = r.maybe_number("reduce_scatter_waited_s", 0, kBig);
    f.ranks.push_back(m);
  }
  for (const auto& c : j.items("collectives", 16)) f.collectives.push_back(collective_step_from(c));
  return f;
}

json pipeline_json(const PipelineStats& p) {
  json costs = nullptr;
  if (p.unit_costs) {
    costs = json::array();
    for (const auto& u : *p.unit_costs) costs.push_back({{"unit", u.unit}, {"seconds", num(u.seconds)}});
  }
  json events = json::array();
  for (const auto& e : p.last_step_events)
    events.push_back({{"stage", e.stage},
                      {"micro_batch", e.micro_batch},
                      {"kind", std::string(1, e.kind)},
                      {"begin_s", num(e.begin_s)},
                      {"end_s", num(e.end_s)}});
  return {{"schedule", pipeline_schedule_name(p.schedule)},
          {"micro_batches", p.micro_batches},
          {"micro_batch_sizes", p.micro_batch_sizes},
          {"split", p.split},
          {"split_by", p.split_by},
          {"unit_costs", costs},
          {"bubble", {{"measured", num(p.bubble_measured)}, {"theory", p.bubble_theory}}},
          {"last_step_events", events}};
}

PipelineStats pipeline_from(const JsonView& j) {
  PipelineStats p;
  p.schedule = j.choice("schedule", kSchedules);
  p.micro_batches = static_cast<int>(j.integer("micro_batches", 1, 1 << 20));
  p.micro_batch_sizes = integers(j, "micro_batch_sizes", 1, kCount);
  p.split = strings(j, "split");
  p.split_by = j.str("split_by", 32);
  if (j.has("unit_costs")) {
    p.unit_costs.emplace();
    for (const auto& u : j.items("unit_costs", 1 << 16))
      p.unit_costs->push_back({u.str("unit", kName), u.maybe_number("seconds", 0, kBig)});
  }
  const JsonView bubble = j.member("bubble");
  p.bubble_measured = bubble.maybe_number("measured", 0, 1);
  p.bubble_theory = bubble.number("theory", 0, 1);
  for (const auto& e : j.items("last_step_events", 1 << 20)) {
    PipelineEventStats ev;
    ev.stage = static_cast<int>(e.integer("stage", 0, 1 << 16));
    ev.micro_batch = static_cast<int>(e.integer("micro_batch", 0, 1 << 20));
    ev.kind = e.choice<char>("kind", {{"F", 'F'}, {"B", 'B'}});
    ev.begin_s = e.maybe_number("begin_s", -kBig, kBig);
    ev.end_s = e.maybe_number("end_s", -kBig, kBig);
    p.last_step_events.push_back(ev);
  }
  return p;
}

}  // namespace dpb::reports::json_util
