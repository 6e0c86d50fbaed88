// RunReport <-> JSON: the one place dpbench.report/1's keys are written and read.
#include <cmath>

#include "dpb/version.h"
#include "engine/core/error.h"
#include "engine/core/text.h"
#include "reports/json_view.h"
#include "reports/model_json_util.h"
#include "reports/model.h"
#include "reports/schemas.h"

namespace dpb::reports {

namespace {

using nlohmann::json;
using namespace json_util;

// --- runs ----------------------------------------------------------------------------------

json step_time_json(const StepTimeStats& s) {
  return {{"median", num(s.median)}, {"p10", num(s.p10)},       {"p90", num(s.p90)},
          {"mean", num(s.mean)},     {"stddev", num(s.stddev)}, {"cv", num(s.cv)},
          {"min", num(s.min)},       {"max", num(s.max)},       {"count", s.count},
          {"outliers", s.outliers}};
}

StepTimeStats step_time_from(const JsonView& j) {
  StepTimeStats s;
  s.median = j.maybe_number("median", 0, kBig);
  s.p10 = j.maybe_number("p10", 0, kBig);
  s.p90 = j.maybe_number("p90", 0, kBig);
  s.mean = j.maybe_number("mean", 0, kBig);
  s.stddev = j.maybe_number("stddev", 0, kBig);
  s.cv = j.maybe_number("cv", 0, kBig);
  s.min = j.maybe_number("min", 0, kBig);
  s.max = j.maybe_number("max", 0, kBig);
  s.count = j.maybe_integer("count", 0, kCount).value_or(0);
  s.outliers = j.maybe_integer("outliers", 0, kCount).value_or(0);
  return s;
}

json ranks_json(const std::vector<RankStats>& ranks) {
  json a = json::array();
  for (const auto& m : ranks)
    a.push_back({{"rank", m.rank},
                 {"step_time_median_s", num(m.step_time_median_s)},
                 {"step_time_p90_s", num(m.step_time_p90_s)},
                 {"data_wait_share", num(m.data_wait_share)},
                 {"busy_fraction", num(m.busy_fraction)},
                 {"comm_s", num(m.comm_s)},
                 {"overlap_ratio", num(m.overlap_ratio)},
                 {"exposed_comm_s", num(m.exposed_comm_s)},
                 {"compute_s", num(m.compute_s)},
                 {"host", m.host},
                 {"device", m.device},
                 {"hardware", m.hardware},
                 {"samples", m.samples},
                 {"compute_steps_s", nums(m.compute_steps_s)},
                 {"wait_for_peers_s", num(m.wait_for_peers_s)},
                 {"allreduce_s", num(m.allreduce_s)},
                 {"allreduce_handoff_s", num(m.allreduce_handoff_s)}});
  return a;
}

RankStats rank_from(const JsonView& j) {
  RankStats m;
  m.rank = static_cast<int>(j.integer("rank", 0, kMaxWorld - 1));
  m.step_time_median_s = j.maybe_number("step_time_median_s", 0, kBig);
  m.step_time_p90_s = j.maybe_number("step_time_p90_s", 0, kBig);
  m.data_wait_share = j.maybe_number("data_wait_share", 0, 1);
  m.busy_fraction = j.maybe_number("busy_fraction", 0, 1);
  m.comm_s = j.maybe_number("comm_s", 0, kBig);
  m.overlap_ratio = j.maybe_number("overlap_ratio", 0, 1);
  m.exposed_comm_s = j.maybe_number("exposed_comm_s", 0, kBig);
  m.compute_s = j.maybe_number("compute_s", 0, kBig);
  m.host = j.str("host", kName);
  m.device = j.str("device", kName);
  m.hardware = strings(j, "hardware", 1 << 12);
  m.samples = j.integer("samples", 0, kCount);
  m.compute_steps_s = maybe_nums(j, "compute_steps_s");
  m.wait_for_peers_s = j.maybe_number("wait_for_peers_s", 0, kBig);
  m.allreduce_s = j.maybe_number("allreduce_s", 0, kBig);
  m.allreduce_handoff_s = j.maybe_number("allreduce_handoff_s", 0, kBig);
  return m;
}

json buckets_json(const std::vector<BucketStats>& buckets) {
  json a = json::array();
  for (const auto& b : buckets)
    a.push_back({{"index", b.index},
                 {"bytes", b.bytes},
                 {"params", b.params},
                 {"ready_ms", num(b.ready_ms)},
                 {"launch_ms", num(b.launch_ms)},
                 {"comm_start_ms", num(b.comm_start_ms)},
                 {"comm_end_ms", num(b.comm_end_ms)},
                 {"done_ms", num(b.done_ms)}});
  return a;
}

BucketStats bucket_from(const JsonView& j) {
  BucketStats b;
  b.index = static_cast<int>(j.integer("index", 0, 1 << 20));
  b.bytes = j.integer("bytes", 0, kCount);
  b.params = static_cast<int>(j.integer("params", 0, 1 << 24));
  b.ready_ms = j.maybe_number("ready_ms", -kBig, kBig);
  b.launch_ms = j.maybe_number("launch_ms", -kBig, kBig);
  b.comm_start_ms = j.maybe_number("comm_start_ms", -kBig, kBig);
  b.comm_end_ms = j.maybe_number("comm_end_ms", -kBig, kBig);
  b.done_ms = j.maybe_number("done_ms", -kBig, kBig);
  return b;
}

json overlap_json(const OverlapStats& o) {
  json j = {{"ratio", num(o.ratio)}, {"exposed_comm_s", num(o.exposed_comm_s)}, {"exposed_share", num(o.exposed_share)}};
  if (o.ab)
    j["ab"] = {{"step_s", num(o.ab->step_s)},
               {"step_without_comm_s", num(o.ab->step_without_comm_s)},
               {"optimizer_s", num(o.ab->optimizer_s)},
               {"exposed_comm_s", num(o.ab->exposed_comm_s)},
               {"exposed_share", num(o.ab->exposed_share)}};
  return j;
}

OverlapStats overlap_from(const JsonView& j) {
  OverlapStats o;
  o.ratio = j.maybe_number("ratio", 0, 1);
  o.exposed_comm_s = j.maybe_number("exposed_comm_s", 0, kBig);
  o.exposed_share = j.maybe_number("exposed_share", 0, 1);
  if (auto ab = j.maybe_member("ab")) {
    OverlapAB a;
    a.step_s = ab->maybe_number("step_s", 0, kBig);
    a.step_without_comm_s = ab->maybe_number("step_without_comm_s", 0, kBig);
    a.optimizer_s = ab->maybe_number("optimizer_s", 0, kBig);
    a.exposed_comm_s = ab->maybe_number("exposed_comm_s", 0, kBig);
    a.exposed_share = ab->maybe_number("exposed_share", 0, kBig);
    o.ab = a;
  }
  return o;
}

json timeline_json(const TimelineExcerpt& t) {
  json rows = json::array();
  for (const auto& i : t.intervals)
    rows.push_back({{"device", i.device}, {"lane", i.lane}, {"name", i.name}, {"cat", i.cat},
                    {"begin_s", num(i.begin_s)}, {"end_s", num(i.end_s)}});
  json out = {{"source", trace::timeline_source_name(t.source)}, {"span_s", num(t.span_s)}, {"step", t.step}, {"intervals", rows}};
  if (!t.note.empty()) out["note"] = t.note;
  if (t.dropped_records) out["dropped_records"] = *t.dropped_records;
  if (t.clock_residual_s) out["clock_residual_s"] = num(t.clock_residual_s);
  return out;
}

TimelineExcerpt timeline_from(const JsonView& j) {
  TimelineExcerpt t;
  t.source = j.maybe_choice("source", kSources).value_or(trace::TimelineSource::host);
  t.span_s = j.maybe_number("span_s", 0, kBig);
  t.step = j.maybe_integer("step", 0, kCount).value_or(0);
  for (const auto& i : j.maybe_items("intervals", 1 << 22)) {
    // Kernel names (C++ templates) run to thousands of characters.
    t.intervals.push_back({static_cast<int>(i.integer("device", 0, kMaxWorld)), i.str("lane", kName), i.str("name"),
                           i.str("cat", 32), i.maybe_number("begin_s", 0, kBig), i.maybe_number("end_s", 0, kBig)});
  }
  t.note = j.maybe_str("note").value_or("");
  t.dropped_records = j.maybe_integer("dropped_records", 0, kCount);
  t.clock_residual_s = j.maybe_number("clock_residual_s", 0, kBig);
  return t;
}

json run_json(const RunMetrics& r) {
  json j = {{"world_size", r.world_size},
            {"batch_per_device", r.batch_per_device},
            {"global_batch", r.global_batch},
            {"steps", r.steps},
            {"throughput_samples_per_s", num(r.throughput_samples_per_s)},
            {"step_time_s", step_time_json(r.step_time_s)},
            {"scaling_efficiency", num(r.scaling_efficiency)},
            {"data_wait_share", num(r.data_wait_share)},
            {"wall_time_s", num(r.wall_time_s)},
            {"loss", {{"first", num(r.loss_first)}, {"last", num(r.loss_last)}}},
            {"flops_per_sample", num(r.flops_per_sample)},
            {"achieved_flops_per_s", num(r.achieved_flops_per_s)},
            {"mfu", num(r.mfu)},
            {"peak_flops_per_s", num(r.peak_flops_per_s)},
            {"loss_per_step", nums(r.loss_per_step)},
            {"step_times_s", nums(r.step_times_s)}};
  if (r.tokens_per_sample) {
    j["tokens_per_sample"] = *r.tokens_per_sample;
    j["throughput_tokens_per_s"] = num(r.throughput_tokens_per_s);
    j["flops_per_token"] = num(r.flops_per_token);
  }
  if (r.attention) {
    j["attention"] = {{"fused_calls", r.attention->fused_calls},
                      {"unfused_calls", r.attention->unfused_calls},
                      {"unfused_why", opt_text(r.attention->unfused_why)}};
  }
  if (r.accuracy) j["accuracy"] = {{"test", num(r.accuracy->test)}, {"test_loss", num(r.accuracy->test_loss)}};
  json devices = json::array();
  for (const auto& d : r.devices)
    devices.push_back({{"id", d.id},
                       {"samples", d.samples},
                       {"busy_fraction", num(d.busy_fraction)},
                       {"peak_memory_bytes", d.peak_memory_bytes},
                       {"cached_memory_bytes", num(d.cached_memory_bytes)},
                       {"peak_rss_bytes", num(d.peak_rss_bytes)},
                       {"shared_rss_bytes", num(d.shared_rss_bytes)}});
  j["devices"] = devices;
  if (r.ranks) j["ranks"] = ranks_json(*r.ranks);
  if (r.data) j["data"] = {{"compared_steps", r.data->compared_steps}, {"identical_steps", r.data->identical_steps}};
  if (r.buckets) j["buckets"] = buckets_json(*r.buckets);
  if (r.overlap) j["overlap"] = overlap_json(*r.overlap);
  if (r.dp) j["dp"] = dp_json(*r.dp);
  if (r.fsdp) j["fsdp"] = fsdp_json(*r.fsdp);
  if (r.tp) j["tp"] = tp_json(*r.tp);
  if (r.pipeline) j["pipeline"] = pipeline_json(*r.pipeline);
  if (r.stages) j["stages"] = stages_json(*r.stages);
  if (r.breakdown) {
    j["breakdown"] = json::array();
    for (const auto& b : *r.breakdown) j["breakdown"].push_back(breakdown_json(b));
  }
  if (r.timeline) j["timeline"] = timeline_json(*r.timeline);
  json epochs = json::array();
  for (const auto& e : r.epochs) {
    json je = {{"epoch", e.epoch}, {"train_loss", num(e.train_loss)}, {"seconds", num(e.seconds)}};
    if (e.test_accuracy) je["test_accuracy"] = num(e.test_accuracy);
    if (e.test_loss) je["test_loss"] = num(e.test_loss);
    epochs.push_back(je);
  }
  j["epochs"] = epochs;
  if (!r.evals.empty()) {
    json evals = json::array();
    for (const auto& e : r.evals)
      evals.push_back({{"step", e.step}, {"test_loss", num(e.test_loss)}, {"test_accuracy", num(e.test_accuracy)}});
    j["evals"] = evals;
  }
  if (r.op_profile) {
    json rows = json::array();
    for (const auto& o : *r.op_profile)
      rows.push_back({{"op", o.op}, {"calls_per_step", num(o.calls_per_step)}, {"seconds_per_step", num(o.seconds_per_step)}});
    j["op_profile"] = rows;
  }
  if (r.layer_profile) j["layer_profile"] = r.layer_profile->to_json();
  if (r.repeat) j["repeat"] = *r.repeat;
  if (r.mode) j["mode"] = parallel_mode_name(*r.mode);
  return j;
}

RunMetrics run_from(const JsonView& j) {
  RunMetrics r;
  r.world_size = static_cast<int>(j.integer("world_size", 1, kMaxWorld));
  r.batch_per_device = j.integer("batch_per_device", 0, kCount);
  r.global_batch = j.integer("global_batch", 1, kCount);
  r.steps = j.maybe_integer("steps", 0, kCount).value_or(0);
  r.throughput_samples_per_s = j.maybe_number("throughput_samples_per_s", 0, kBig);
  r.step_time_s = step_time_from(j.member("step_time_s"));
  r.scaling_efficiency = j.maybe_number("scaling_efficiency", 0, kBig);
  r.data_wait_share = j.maybe_number("data_wait_share", 0, 1);
  r.wall_time_s = j.maybe_number("wall_time_s", 0, kBig);
  if (auto l = j.maybe_member("loss")) {
    r.loss_first = l->maybe_number("first", -kBig, kBig);
    r.loss_last = l->maybe_number("last", -kBig, kBig);
  }
  r.flops_per_sample = j.maybe_number("flops_per_sample", 0, kBig);
  r.achieved_flops_per_s = j.maybe_number("achieved_flops_per_s", 0, kBig);
  r.mfu = j.maybe_number("mfu", 0, kBig);
  r.peak_flops_per_s = j.maybe_number("peak_flops_per_s", 0, kBig);
  if (j.has("tokens_per_sample")) {
    r.tokens_per_sample = j.integer("tokens_per_sample", 1, kCount);
    r.throughput_tokens_per_s = j.maybe_number("throughput_tokens_per_s", 0, kBig);
    r.flops_per_token = j.maybe_number("flops_per_token", 0, kBig);
  }
  if (auto a = j.maybe_member("attention")) {
    r.attention = AttentionStats{a->integer("fused_calls", 0, kCount), a->integer("unfused_calls", 0, kCount),
                                 a->maybe_str("unfused_why")};
  }
  if (auto a = j.maybe_member("accuracy")) r.accuracy = Accuracy{a->maybe_number("test", 0, 1), a->maybe_number("test_loss", 0, kBig)};
  for (const auto& d : j.items("devices", kMaxWorld))
    r.devices.push_back({d.str("id", kName), d.integer("samples", 0, kCount), d.maybe_number("busy_fraction", 0, 1),
                         d.integer("peak_memory_bytes", 0, kCount), d.maybe_number("cached_memory_bytes", 0, kBig),
                         d.maybe_number("peak_rss_bytes", 0, kBig), d.maybe_number("shared_rss_bytes", 0, kBig)});
  if (j.has("ranks")) {
    r.ranks.emplace();
    for (const auto& m : j.items("ranks", kMaxWorld)) r.ranks->push_back(rank_from(m));
  }
  if (auto d = j.maybe_member("data"))
    r.data = SameData{d->integer("compared_steps", 0, kCount), d->integer("identical_steps", 0, kCount)};
  if (j.has("buckets")) {
    r.buckets.emplace();
    for (const auto& b : j.items("buckets", 1 << 20)) r.buckets->push_back(bucket_from(b));
  }
  if (auto o = j.maybe_member("overlap")) r.overlap = overlap_from(*o);
  if (auto d = j.maybe_member("dp")) r.dp = dp_from(*d);
  if (auto f = j.maybe_member("fsdp")) r.fsdp = fsdp_from(*f);
  if (auto t = j.maybe_member("tp")) r.tp = tp_from(*t);
  if (auto p = j.maybe_member("pipeline")) r.pipeline = pipeline_from(*p);
  if (j.has("stages")) {
    r.stages.emplace();
    for (const auto& s : j.items("stages", 1 << 16)) r.stages->push_back(stage_from(s));
  }
  if (j.has("breakdown")) {
    r.breakdown.emplace();
    for (const auto& b : j.items("breakdown", kMaxWorld)) r.breakdown->push_back(breakdown_from_json(b));
  }
  if (auto t = j.maybe_member("timeline")) r.timeline = timeline_from(*t);
  r.loss_per_step = maybe_nums(j, "loss_per_step");
  r.step_times_s = maybe_nums(j, "step_times_s");
  for (const auto& e : j.maybe_items("epochs", 1 << 20)) {
    EpochStats es;
    es.epoch = e.integer("epoch", 0, kCount);
    es.train_loss = e.maybe_number("train_loss", -kBig, kBig);
    es.test_accuracy = e.maybe_number("test_accuracy", 0, 1);
    es.seconds = e.maybe_number("seconds", 0, kBig);
    es.test_loss = e.maybe_number("test_loss", 0, kBig);
    r.epochs.push_back(es);
  }
  for (const auto& e : j.maybe_items("evals", 1 << 20))
    r.evals.push_back({e.integer("step", 1, kCount), e.maybe_number("test_loss", 0, kBig),
                       e.maybe_number("test_accuracy", 0, 1)});
  if (j.has("op_profile")) {
    r.op_profile.emplace();
    for (const auto& o : j.items("op_profile", 1 << 16))
      r.op_profile->push_back({o.str("op", kName), o.maybe_number("calls_per_step", 0, kBig),
                               o.maybe_number("seconds_per_step", 0, kBig)});
  }
  if (j.has("layer_profile")) r.layer_profile = LayerProfile::from_json(j.member("layer_profile"));
  if (auto rep = j.maybe_integer("repeat", 0, 1 << 16)) r.repeat = static_cast<int>(*rep);
  r.mode = j.maybe_choice("mode", parallel_mode_choices());
  return r;
}

}  // namespace

StepTimeStats StepTimeStats::of(const Summary& s) {
  StepTimeStats t;
  t.median = s.median;
  t.p10 = s.p10;
  t.p90 = s.p90;
  t.mean = s.mean;
  t.stddev = s.stddev;
  t.cv = s.cv;
  t.min = s.min;
  t.max = s.max;
  t.count = s.count;
  t.outliers = s.outliers;
  return t;
}

json RunReport::to_json() const {
  json j;
  j["schema"] = kReportSchema;
  j["tool"] = {{"name", tool.name}, {"version", tool.version}, {"git", tool.git}};
  j["command"] = command;
  j["env"] = env_json(env);
  j["config"] = config_json(config, sweep.has_value());
  j["runs"] = json::array();
  for (const auto& r : runs) j["runs"].push_back(run_json(r));
  if (sweep) j["sweep"] = sweep_json(*sweep);
  if (simulation) j["simulation"] = *simulation;
  j["findings"] = json::array();
  for (const auto& f : findings) j["findings"].push_back(f.to_json());
  if (diagnosis) j["diagnosis"] = diagnosis->to_json();
  return j;
}

RunReport RunReport::from_json(const json& j, const std::string& document) {
  if (!j.is_object() || !j.contains("schema") || j["schema"] != kReportSchema)
    DPB_FAIL() << document << " is not a dpbench report (expected \"schema\": \"" << kReportSchema << "\")";
  check_schema(report_schema(), j, document);
  const JsonView root(j, document);
  RunReport r;
  const JsonView tool = root.member("tool");
  r.tool = {tool.str("name", 64), tool.str("version", 64), tool.str("git", 64)};
  r.command = strings(root, "command", 1 << 16);
  r.env = env_from(root.member("env"));
  r.config = config_from(root.member("config"));
  for (const auto& run : root.items("runs", 1 << 16)) r.runs.push_back(run_from(run));
  if (root.has("sweep")) {
    r.sweep.emplace();
    for (const auto& p : root.items("sweep", 1 << 16)) r.sweep->push_back(sweep_point_from(p));
  }
  for (const auto& f : root.items("findings", 1 << 16)) r.findings.push_back(Finding::from_json(f));
  if (root.has("diagnosis")) r.diagnosis = DiagnosisReport::from_json(j["diagnosis"], document + ", diagnosis");
  if (root.has("simulation")) {
    root.member("simulation").expect_object();
    r.simulation = j["simulation"];
  }
  DPB_CHECK(!r.runs.empty() || r.simulation)
      << document << ": runs is empty (only a prediction, with a simulation section, has no runs)";
  return r;
}

RunReport RunReport::read(const std::string& path) {
  const json j = read_json_file(path, "report", size_t{256} << 20);
  return from_json(j, "report '" + escape_untrusted(path) + "'");
}

const RunMetrics& RunReport::largest_run() const {
  DPB_CHECK(!runs.empty()) << "the report has no run (a --simulate prediction: dpreport show or html reads it)";
  const RunMetrics* largest = &runs.front();
  for (const auto& r : runs)
    if (r.world_size >= largest->world_size) largest = &r;
  return *largest;
}

ToolInfo this_tool() { return {"dpbench", kVersion, kGitCommit}; }

}  // namespace dpb::reports
