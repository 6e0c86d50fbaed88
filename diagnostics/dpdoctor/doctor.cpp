#include "diagnostics/dpdoctor/doctor.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "diagnostics/dpdoctor/rules/rules.h"
#include "engine/core/error.h"

namespace dpb::doctor {

const char* severity_name(Severity s) {
  switch (s) {
    case Severity::info:
      return "info";
    case Severity::warning:
      return "warning";
    case Severity::error:
      return "error";
  }
  return "info";
}

namespace {

double num(const nlohmann::json& j, const char* key, double fallback = -1) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}

int64_t integer(const nlohmann::json& j, const char* key, int64_t fallback = 0) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<int64_t>() : fallback;
}

std::string str(const nlohmann::json& j, const char* key, const std::string& fallback = "") {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

// Share of the last step in which at least two stages were busy.
double stage_concurrency(const nlohmann::json& events) {
  std::map<int64_t, std::vector<std::pair<double, double>>> by_stage;
  double span = 0;
  for (const auto& e : events) {
    by_stage[integer(e, "stage")].emplace_back(num(e, "begin_s", 0), num(e, "end_s", 0));
    span = std::max(span, num(e, "end_s", 0));
  }
  std::vector<std::vector<std::pair<double, double>>> lanes;
  for (auto& [stage, iv] : by_stage) lanes.push_back(std::move(iv));
  return concurrency_share(lanes, 0, span);
}

}  // namespace

double concurrency_share(const std::vector<std::vector<std::pair<double, double>>>& lanes, double lo, double hi) {
  if (hi <= lo) return 0;
  std::vector<std::pair<double, int>> edges;  // (time, +1 start / -1 end)
  for (auto lane : lanes) {
    // Merge the lane's own overlaps (kernels on two streams of one GPU) first.
    std::sort(lane.begin(), lane.end());
    std::vector<std::pair<double, double>> merged;
    for (auto [b, e] : lane) {
      b = std::max(b, lo);
      e = std::min(e, hi);
      if (e <= b) continue;
      if (!merged.empty() && b <= merged.back().second) merged.back().second = std::max(merged.back().second, e);
      else merged.emplace_back(b, e);
    }
    for (const auto& [b, e] : merged) {
      edges.emplace_back(b, +1);
      edges.emplace_back(e, -1);
    }
  }
  std::sort(edges.begin(), edges.end(), [](const auto& a, const auto& c) {
    return a.first < c.first || (a.first == c.first && a.second < c.second);  // ends first
  });
  int open = 0;
  double last = lo, both = 0;
  for (const auto& [t, d] : edges) {
    if (open >= 2) both += t - last;
    open += d;
    last = t;
  }
  return both / (hi - lo);
}

std::string evidence_text(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) return fmt::format("{:.4g}", v.get<double>());
  if (v.is_array()) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + evidence_text(x);
    return "[" + s + "]";
  }
  if (v.is_object()) {
    // What the record is about first (rank 1, id cpu:1), then the rest by name.
    static const std::vector<std::string> lead{"rank", "id", "stage", "device"};
    std::string s;
    auto add = [&](const std::string& key, const nlohmann::json& value) {
      s += fmt::format("{}{} {}", s.empty() ? "" : ", ", key, evidence_text(value));
    };
    for (const auto& key : lead)
      if (v.contains(key)) add(key, v[key]);
    for (auto it = v.begin(); it != v.end(); ++it)
      if (std::find(lead.begin(), lead.end(), it.key()) == lead.end()) add(it.key(), it.value());
    return s;
  }
  return v.dump();
}

Evidence read_evidence(const nlohmann::json& report) {
  DPB_CHECK(report.is_object() && str(report, "schema") == "dpbench.report/1" && report.contains("runs") &&
            report["runs"].is_array() && !report["runs"].empty())
      << "not a dpbench report with a run (expected \"schema\": \"dpbench.report/1\" and runs[])";
  const auto& cfg = report["config"];
  // A sweep's largest run is the one to diagnose.
  const nlohmann::json* largest = &report["runs"][0];
  for (const auto& r : report["runs"])
    if (integer(r, "world_size", 1) >= integer(*largest, "world_size", 1)) largest = &r;
  const auto& run = *largest;
  Evidence e;
  e.mode = str(run, "mode", str(cfg, "mode"));
  e.model = str(cfg, "model");
  e.devices = str(cfg, "devices", "cpu");
  e.world = static_cast<int>(integer(run, "world_size", 1));
  e.requested = static_cast<int>(integer(cfg, "gpus_requested", e.world));
  if (report.contains("sweep")) e.requested = e.world;  // each point asked for its own count
  e.visible = static_cast<int>(integer(cfg, "visible_devices", 0));
  e.batch_per_device = integer(run, "batch_per_device", integer(cfg, "batch_per_device"));
  e.global_batch = integer(run, "global_batch", integer(cfg, "global_batch"));
  e.base_batch = integer(cfg, "base_batch", 256);
  e.steps = integer(run, "steps");
  e.batchnorm = cfg.value("batchnorm", false);
  e.sync_bn = cfg.value("sync_bn", false);
  e.lr_scale = str(cfg, "lr_scale", "none");
  if (cfg.contains("optimizer")) e.lr = num(cfg["optimizer"], "lr", 0);
  e.lr_effective = num(cfg, "lr_effective", e.lr);
  if (run.contains("step_time_s")) e.step_s = num(run["step_time_s"], "median", 0);
  e.throughput = num(run, "throughput_samples_per_s", 0);
  e.data_wait_share = num(run, "data_wait_share", 0);
  if (run.contains("devices"))
    for (const auto& d : run["devices"])
      e.device.push_back({str(d, "id"), num(d, "busy_fraction", 0), integer(d, "samples")});
  if (run.contains("dp")) {
    const auto& dp = run["dp"];
    e.has_dp = true;
    e.dp_forward = str(dp, "forward");
    e.dp_input = str(dp, "input");
    e.scatter_calls = integer(dp, "scatter_calls");
    if (dp.contains("last_chunks"))
      for (const auto& c : dp["last_chunks"]) e.chunks.push_back(c.get<int64_t>());
    e.primary_only_s = num(dp, "primary_only_s");
    e.primary_replica_s = num(dp, "primary_replica_s");
  }
  if (run.contains("ranks"))
    for (const auto& r : run["ranks"]) {
      RankEvidence re{static_cast<int>(integer(r, "rank")), str(r, "host"), str(r, "device"), {},
                      num(r, "compute_s", 0),         num(r, "comm_s", 0),
                      num(r, "step_time_median_s", 0), num(r, "busy_fraction", 0)};
      if (r.contains("hardware") && r["hardware"].is_array())
        for (const auto& h : r["hardware"]) re.hardware.push_back(h.get<std::string>());
      e.ranks.push_back(std::move(re));
    }
  if (run.contains("overlap")) {
    e.overlap = num(run["overlap"], "ratio");
    e.exposed_share = num(run["overlap"], "exposed_share");
    if (run["overlap"].contains("ab")) e.exposed_share_ab = num(run["overlap"]["ab"], "exposed_share");
  }
  if (run.contains("buckets")) {
    e.buckets = static_cast<int64_t>(run["buckets"].size());
    for (const auto& b : run["buckets"]) e.bucket_bytes_max = std::max(e.bucket_bytes_max, integer(b, "bytes"));
  }
  e.bucket_mb = num(cfg, "bucket_mb", 0);
  if (run.contains("data")) {
    e.data_compared = integer(run["data"], "compared_steps");
    e.data_identical = integer(run["data"], "identical_steps");
  }
  if (run.contains("pipeline")) {
    const auto& p = run["pipeline"];
    e.has_pipeline = true;
    e.schedule = str(p, "schedule");
    e.split_by = str(p, "split_by");
    e.micro_batches = static_cast<int>(integer(p, "micro_batches", 1));
    if (p.contains("micro_batch_sizes"))
      for (const auto& m : p["micro_batch_sizes"]) e.micro_sizes.push_back(m.get<int64_t>());
    if (p.contains("bubble")) {
      e.bubble = num(p["bubble"], "measured");
      e.bubble_theory = num(p["bubble"], "theory");
    }
    if (p.contains("unit_costs") && p["unit_costs"].is_array())
      for (const auto& u : p["unit_costs"]) {
        e.unit_names.push_back(str(u, "unit"));
        e.unit_costs.push_back(num(u, "seconds", 0));
      }
    if (p.contains("last_step_events")) e.concurrency = stage_concurrency(p["last_step_events"]);
  }
  if (run.contains("stages"))
    for (const auto& s : run["stages"]) {
      e.stage_busy.push_back(1.0 - num(s, "idle_share", 0));
      std::vector<std::string> units;
      for (const auto& u : s["units"]) units.push_back(u.get<std::string>());
      e.stage_units.push_back(units);
    }
  return e;
}

const std::vector<RuleInfo>& rules() {
  static const std::vector<RuleInfo> all{
      {"batch-smaller-than-devices", check::batch_smaller_than_devices},
      {"uneven-scatter", check::uneven_scatter},
      {"forward-bypasses-scatter", check::forward_bypasses_scatter},
      {"non-tensor-input-replicated", check::non_tensor_input_replicated},
      {"fewer-devices-than-requested", check::fewer_devices_than_requested},
      {"ranks-share-device", check::ranks_share_device},
      {"missing-distributed-sampler", check::missing_distributed_sampler},
      {"input-bound", check::input_bound},
      {"primary-device-hotspot", check::primary_device_hotspot},
      {"naive-model-parallel", check::naive_model_parallel},
      {"unbalanced-pipeline", check::unbalanced_pipeline},
      {"communication-bound", check::communication_bound},
      {"straggler-rank", check::straggler_rank},
      {"lr-not-scaled", check::lr_not_scaled},
      {"small-batch-batchnorm", check::small_batch_batchnorm},
  };
  return all;
}

Diagnosis diagnose(const nlohmann::json& report) { return diagnose(read_evidence(report)); }

Diagnosis diagnose(const Evidence& e) {
  Diagnosis d;
  for (const auto& r : rules()) {
    if (auto f = r.rule(e)) {
      f->id = r.id;
      if (f->severity != Severity::info) d.healthy = false;
      d.findings.push_back(std::move(*f));
    }
  }
  std::stable_sort(d.findings.begin(), d.findings.end(),
                   [](const Finding& a, const Finding& b) { return a.severity > b.severity; });
  nlohmann::json devices = nlohmann::json::array();
  for (const auto& dev : e.device)
    devices.push_back({{"id", dev.id}, {"busy_fraction", dev.busy}, {"samples", dev.samples}});
  d.summary = {{"source", e.source},
               {"mode", e.mode},
               {"model", e.model},
               {"world_size", e.world},
               {"global_batch", e.global_batch},
               {"throughput_samples_per_s", e.throughput > 0 ? nlohmann::json(e.throughput) : nlohmann::json(nullptr)},
               {"step_time_s", e.step_s},
               {"data_wait_share", e.data_wait_share},
               {"devices", devices}};
  if (e.overlap >= 0) d.summary["overlap_ratio"] = e.overlap;
  if (e.bubble >= 0) d.summary["pipeline_bubble"] = {{"measured", e.bubble}, {"theory", e.bubble_theory}};
  return d;
}

nlohmann::json finding_json(const Finding& f) {
  return {{"id", f.id},
          {"severity", severity_name(f.severity)},
          {"title", f.title},
          {"evidence", f.evidence},
          {"explanation", f.explanation},
          {"fix", f.fix}};
}

nlohmann::json diagnosis_json(const Diagnosis& d) {
  nlohmann::json findings = nlohmann::json::array();
  for (const auto& f : d.findings) findings.push_back(finding_json(f));
  return {{"schema", kFindingsSchema},
          {"verdict", d.healthy ? "healthy" : "problems"},
          {"summary", d.summary},
          {"findings", findings}};
}

void print_diagnosis(const Diagnosis& d, std::ostream& out) {
  const auto& s = d.summary;
  std::string devices;
  for (const auto& dev : s["devices"])
    devices += fmt::format("{}{} {:.0f}% busy ({} samples)", devices.empty() ? "" : ", ", dev["id"].get<std::string>(),
                           100 * dev["busy_fraction"].get<double>(), dev["samples"].get<int64_t>());
  for (const auto& f : d.findings) {
    out << fmt::format("{}[{}]: {}\n", severity_name(f.severity), f.id, f.title);
    out << "  evidence:\n";
    for (auto it = f.evidence.begin(); it != f.evidence.end(); ++it) {
      if (it.value().is_array() && !it.value().empty() && it.value().front().is_object()) {
        out << "    " << it.key() << ":\n";  // a table: one record a line
        for (const auto& row : it.value()) out << "      - " << evidence_text(row) << "\n";
      } else {
        out << "    " << it.key() << ": " << evidence_text(it.value()) << "\n";
      }
    }
    out << "  why: " << f.explanation << "\n";
    out << "  fix: " << f.fix << "\n";
  }
  if (d.healthy) {
    const std::string what = s["model"].get<std::string>().empty()
                                 ? s["mode"].get<std::string>()
                                 : s["mode"].get<std::string>() + " " + s["model"].get<std::string>();
    const std::string speed = s["throughput_samples_per_s"].is_number()
                                  ? fmt::format("{:.1f} samples/s", s["throughput_samples_per_s"].get<double>())
                                  : fmt::format("{:.2f} ms per step", 1e3 * s["step_time_s"].get<double>());
    out << fmt::format("healthy: {} on {} device(s), {}; {}; data wait {:.1f}% of the time", what,
                       s["world_size"].get<int>(), speed, devices.empty() ? "-" : devices,
                       100 * s["data_wait_share"].get<double>());
    if (s.contains("overlap_ratio")) out << fmt::format("; {:.0f}% of the all-reduce overlapped", 100 * s["overlap_ratio"].get<double>());
    if (s.contains("pipeline_bubble"))
      out << fmt::format("; pipeline bubble {:.0f}% (theory {:.0f}%)", 100 * s["pipeline_bubble"]["measured"].get<double>(),
                         100 * s["pipeline_bubble"]["theory"].get<double>());
    out << "\n";
  } else {
    int errors = 0, warnings = 0;
    for (const auto& f : d.findings) {
      errors += f.severity == Severity::error;
      warnings += f.severity == Severity::warning;
    }
    out << fmt::format("problems: {} error(s), {} warning(s); {}\n", errors, warnings, devices.empty() ? "-" : devices);
  }
}

}  // namespace dpb::doctor
