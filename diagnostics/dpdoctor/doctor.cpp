#include "diagnostics/dpdoctor/doctor.h"

#include <fmt/format.h>

#include <algorithm>

#include "diagnostics/dpdoctor/rules/rules.h"
#include "engine/core/error.h"

namespace dpb::doctor {

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

const std::vector<RuleInfo>& rules() {
  static const std::vector<RuleInfo> all{
      {"batch-smaller-than-devices", check::batch_smaller_than_devices},
      {"uneven-scatter", check::uneven_scatter},
      {"forward-bypasses-scatter", check::forward_bypasses_scatter},
      {"non-tensor-input-replicated", check::non_tensor_input_replicated},
      {"dataparallel-idle-gpus", check::dataparallel_idle_gpus},
      {"fewer-devices-than-requested", check::fewer_devices_than_requested},
      {"ranks-share-device", check::ranks_share_device},
      {"missing-distributed-sampler", check::missing_distributed_sampler},
      {"input-bound", check::input_bound},
      {"gpu-starved-by-host", check::gpu_starved_by_host},
      {"host-sync-stalls", check::host_sync_stalls},
      {"pageable-copies", check::pageable_copies},
      {"primary-device-hotspot", check::primary_device_hotspot},
      {"naive-model-parallel", check::naive_model_parallel},
      {"unbalanced-pipeline", check::unbalanced_pipeline},
      {"pipeline-bubble", check::pipeline_bubble},
      {"exposed-communication", check::exposed_communication},
      {"straggler-rank", check::straggler_rank},
      {"lr-not-scaled", check::lr_not_scaled},
      {"small-batch-batchnorm", check::small_batch_batchnorm},
  };
  return all;
}

Diagnosis diagnose(const reports::RunReport& report) { return diagnose(evidence_from_report(report)); }

Diagnosis diagnose(const Evidence& e) {
  Diagnosis d;
  for (const auto& r : rules()) {
    if (auto f = r.rule(e)) {
      f->id = r.id;
      d.findings.push_back(std::move(*f));
    }
  }
  // A general symptom yields to the specific cause that produces it: a GPU waiting for its
  // host is what a slow loader, host syncs, DataParallel's primary, a naive pipeline or a
  // straggling rank look like from the device.
  static const std::vector<std::string> kStarvationCauses{
      "input-bound",          "host-sync-stalls",       "pageable-copies",      "primary-device-hotspot",
      "naive-model-parallel", "unbalanced-pipeline",    "pipeline-bubble",      "straggler-rank",       "dataparallel-idle-gpus",
      "ranks-share-device",   "batch-smaller-than-devices", "forward-bypasses-scatter"};
  const bool explained = std::any_of(d.findings.begin(), d.findings.end(), [](const Finding& f) {
    return std::find(kStarvationCauses.begin(), kStarvationCauses.end(), f.id) != kStarvationCauses.end();
  });
  if (explained)
    d.findings.erase(std::remove_if(d.findings.begin(), d.findings.end(),
                                    [](const Finding& f) { return f.id == "gpu-starved-by-host"; }),
                     d.findings.end());
  // Last: idle time that nothing above explains (never "healthy" while a device idles).
  if (auto f = check::unexplained_idle(e, d.findings)) {
    f->id = "unexplained-idle";
    d.findings.push_back(std::move(*f));
  }
  for (const auto& f : d.findings)
    if (f.severity != Severity::info) d.healthy = false;
  std::stable_sort(d.findings.begin(), d.findings.end(),
                   [](const Finding& a, const Finding& b) { return a.severity > b.severity; });
  auto& s = d.summary;
  s.source = e.source;
  s.timeline_source = trace::timeline_source_name(e.timeline_source);
  s.mode = e.mode;
  s.model = e.model;
  s.world_size = e.world;
  if (e.global_batch > 0) s.global_batch = e.global_batch;
  if (e.throughput > 0) s.throughput_samples_per_s = e.throughput;
  s.step_time_s = e.step_s;
  s.data_wait_share = e.data_wait_share;
  for (const auto& dev : e.device) s.devices.push_back({dev.id, dev.busy, dev.samples});
  if (e.overlap >= 0) s.overlap_ratio = e.overlap;
  if (e.bubble >= 0) {
    s.bubble_measured = e.bubble;
    s.bubble_theory = e.bubble_theory;
  }
  d.ranks = e.breakdown;
  return d;
}

namespace {

std::string share(const std::optional<double>& v) { return v ? fmt::format("{:.1f}%", 100 * *v) : "-"; }

// The device timeline per rank (or device): where the window went.
void print_breakdown(const Diagnosis& d, std::ostream& out) {
  if (d.ranks.empty()) return;
  out << fmt::format("time per {} ({} times):\n", d.summary.mode == ParallelMode::ddp ? "rank" : "device",
                     d.summary.timeline_source);
  out << fmt::format("  {:>5} {:<16} {:>10} {:>7} {:>8} {:>7} {:>7} {:>8} {:>10} {:>12} {:>7}\n", "rank", "device",
                     "window", "idle", "compute", "comm", "memory", "overlap", "host wait", "kernel wait", "other");
  for (const auto& b : d.ranks)
    out << fmt::format("  {:>5} {:<16} {:>10} {:>7} {:>8} {:>7} {:>7} {:>8} {:>10} {:>12} {:>7}\n",
                       b.rank ? std::to_string(*b.rank) : "-", b.device, fmt::format("{:.2f} ms", b.window_s * 1e3),
                       share(b.idle_share), share(b.compute_share), share(b.comm_share), share(b.memory_share),
                       share(b.overlap), share(b.idle_breakdown.host_wait), share(b.idle_breakdown.kernel_wait),
                       share(b.idle_breakdown.other));
}

}  // namespace

void print_diagnosis(const Diagnosis& d, std::ostream& out) {
  const auto& s = d.summary;
  const bool samples = s.source != "PyTorch profiler trace";
  std::string devices;
  for (const auto& dev : s.devices)
    devices += fmt::format("{}{} {:.0f}% busy{}", devices.empty() ? "" : ", ", dev.id, 100 * dev.busy_fraction,
                           samples ? fmt::format(" ({} samples)", dev.samples) : "");
  if (!devices.empty()) devices += fmt::format(" ({} times)", s.timeline_source);
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
  print_breakdown(d, out);
  if (d.healthy) {
    const std::string mode = parallel_mode_name(s.mode);
    const std::string what = s.model.empty() ? mode : mode + " " + s.model;
    const std::string speed = s.throughput_samples_per_s
                                  ? fmt::format("{:.1f} samples/s", *s.throughput_samples_per_s)
                                  : fmt::format("{:.2f} ms per step", 1e3 * s.step_time_s);
    out << fmt::format("healthy: {} on {} device(s), {}; {}; data wait {:.1f}% of the time", what, s.world_size, speed,
                       devices.empty() ? "no device activity recorded" : devices, 100 * s.data_wait_share);
    if (s.overlap_ratio) out << fmt::format("; {:.0f}% of the all-reduce overlapped", 100 * *s.overlap_ratio);
    if (s.bubble_measured)
      out << fmt::format("; pipeline bubble {:.0f}% (theory {:.0f}%)", 100 * *s.bubble_measured,
                         100 * s.bubble_theory.value_or(0));
    out << "\n";
  } else {
    int errors = 0, warnings = 0;
    for (const auto& f : d.findings) {
      errors += f.severity == Severity::error;
      warnings += f.severity == Severity::warning;
    }
    out << fmt::format("problems: {} error(s), {} warning(s); {}\n", errors, warnings,
                       devices.empty() ? "no device activity recorded" : devices);
  }
}

}  // namespace dpb::doctor
