#include "diagnostics/dpdoctor/doctor.h"

#include <fmt/format.h>

#include <algorithm>

#include "diagnostics/dpdoctor/pricing.h"
#include "diagnostics/dpdoctor/rules/rules.h"
#include "engine/core/error.h"
#include "engine/core/text.h"

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
      {"cold-start", check::cold_start},
      {"long-host-gaps", check::long_host_gaps},
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
      {"exposed-allgather", check::exposed_allgather},
      {"fsdp-unit-too-large", check::fsdp_unit_too_large},
      {"tp-across-slow-link", check::tp_across_slow_link},
      {"lr-not-scaled", check::lr_not_scaled},
      {"small-batch-batchnorm", check::small_batch_batchnorm},
      {"scaling-efficiency", check::scaling_efficiency},
  };
  return all;
}

Diagnosis diagnose(const reports::RunReport& report) { return diagnose(evidence_from_report(report)); }

namespace {

bool claim_matches(const reports::Claim& c, const std::optional<int>& rank, const std::string& device) {
  return c.rank && rank ? *c.rank == *rank : c.device == device;
}

// Where each rank's (device's) window went: from the device timelines where there are
// any (profiler traces), else from the breakdowns dpbench measured.
std::vector<reports::RankBudget> budget_of(const Evidence& e, const std::vector<Finding>& findings) {
  std::vector<reports::RankBudget> rows;
  if (!e.timelines.empty()) {
    for (const auto& t : e.timelines) {
      reports::RankBudget b;
      b.rank = t.rank;
      b.device = t.device;
      b.window_s = t.window_s();
      b.window = t.window;
      b.idle_share = t.breakdown.idle_share.value_or(0);
      b.exposed_comm_share = t.breakdown.overlap ? t.breakdown.comm_share.value_or(0) : 0.0;
      if (t.launches_known && t.idle.window_ns > 0)
        for (size_t c = 0; c < trace::kIdleCauses; ++c)
          if (t.idle.ns[c] > 0) b.idle_causes.emplace_back(trace::idle_cause_name(static_cast<trace::IdleCause>(c)), t.share(t.idle.ns[c]));
      rows.push_back(std::move(b));
    }
  } else {
    for (const auto& br : e.breakdown) {
      reports::RankBudget b;
      b.rank = br.rank;
      b.device = br.device;
      b.window_s = br.window_s;
      b.idle_share = br.idle_share.value_or(0);
      b.exposed_comm_share = br.comm_share.value_or(0);
      rows.push_back(std::move(b));
    }
  }
  for (auto& b : rows) {
    const double lost = std::min(1.0, b.idle_share + b.exposed_comm_share);
    double explained = 0;
    for (const auto& f : findings) {
      double share = 0;
      for (const auto& c : f.explains)
        if (claim_matches(c, b.rank, b.device)) share += c.share;
      share = std::min(share, lost - explained);
      if (share <= 0) continue;
      b.explained.emplace_back(f.id, share);
      explained += share;
    }
    b.unexplained_share = std::max(0.0, lost - explained);
  }
  return rows;
}

// Causes that account for a device's idle time by the structure of the run (a pipeline's
// schedule, DataParallel's primary or idle replicas, a rank the others wait for): where
// one of them claims a device's idle time, the host-side symptom on that device
// (gpu-starved-by-host: the host had not launched the next work) is the same time, seen
// from the host. The symptom keeps only what is left, and goes when that is small.
void yield_to_structure(std::vector<Finding>& findings) {
  static const std::vector<std::string> kStructural{
      "primary-device-hotspot", "naive-model-parallel",       "unbalanced-pipeline",      "pipeline-bubble",
      "dataparallel-idle-gpus", "batch-smaller-than-devices", "forward-bypasses-scatter", "straggler-rank",
      "ranks-share-device"};
  auto starved = std::find_if(findings.begin(), findings.end(), [](const Finding& f) { return f.id == "gpu-starved-by-host"; });
  if (starved == findings.end()) return;
  double most = 0;
  for (auto& c : starved->explains) {
    for (const auto& f : findings) {
      if (std::find(kStructural.begin(), kStructural.end(), f.id) == kStructural.end()) continue;
      for (const auto& s : f.explains)
        if (claim_matches(s, c.rank, c.device)) c.share = std::max(0.0, c.share - s.share);
    }
    most = std::max(most, c.share);
  }
  if (most < 0.01) findings.erase(starved);
  else if (most < 0.15) starved->severity = Severity::info;
}

// The most any one rank (device) owes to the finding: a share of its window, or seconds.
double largest_claim(const Finding& f, const std::vector<reports::RankBudget>& budget, bool seconds = false) {
  double most = 0;
  for (const auto& b : budget)
    for (const auto& [id, share] : b.explained)
      if (id == f.id) most = std::max(most, seconds && b.window_s > 0 ? share * b.window_s : share);
  return most;
}

// Symptoms rather than causes: the device waits for host work in general, or for nothing
// any rule names. A named cause explaining at least half as much time comes first.
bool generic(const Finding& f) { return f.id == "gpu-starved-by-host" || f.id == "unexplained-idle"; }

// The verdict's primary cause: the most severe finding, then the one that explains the
// most lost time on any one rank (a named cause before a generic one at half its size).
const Finding* primary_of(const std::vector<Finding>& findings, const std::vector<reports::RankBudget>& budget) {
  const Finding* best = nullptr;
  double best_time = -1;
  for (const auto& f : findings) {
    if (f.severity == Severity::info) continue;
    const double time = f.id == "unexplained-idle" ? 0.0 : largest_claim(f, budget, true) * (generic(f) ? 0.5 : 1.0);
    if (!best || f.severity > best->severity || (f.severity == best->severity && time > best_time)) {
      best = &f;
      best_time = time;
    }
  }
  return best;
}

}  // namespace

Diagnosis diagnose(const Evidence& e) {
  Diagnosis d;
  for (const auto& r : rules()) {
    if (auto f = r.rule(e)) {
      f->id = r.id;
      d.findings.push_back(std::move(*f));
    }
  }
  yield_to_structure(d.findings);
  d.budget = budget_of(e, d.findings);
  const auto warned = [&] {
    return std::any_of(d.findings.begin(), d.findings.end(), [](const Finding& f) { return f.severity != Severity::info; });
  };
  // The verdict follows the budget. Never healthy while a device loses a quarter of its
  // window (idle, or communication compute did not hide), or a sweep 15% of its
  // efficiency: when only advice was given, the finding that explains the most of that
  // time is the warning.
  const bool idle_quarter = std::any_of(d.budget.begin(), d.budget.end(), [](const reports::RankBudget& b) {
    return b.idle_share + b.exposed_comm_share >= 0.25;
  });
  const bool efficiency_lost = e.scaling_efficiency && *e.scaling_efficiency < 0.85;
  if (!warned() && (idle_quarter || efficiency_lost)) {
    Finding* best = nullptr;
    // A cause that explains next to nothing is not the answer (under a third of what the
    // device lost); nor, for a sweep's lost efficiency, one that explains less than half
    // of what was lost.
    double lost = 0;
    for (const auto& b : d.budget) lost = std::max(lost, b.idle_share + b.exposed_comm_share);
    double most = idle_quarter ? std::max(0.02, lost / 3) : std::max(0.02, 0.5 * (1 - *e.scaling_efficiency));
    for (auto& f : d.findings)
      if (const double c = largest_claim(f, d.budget); c > most) {
        best = &f;
        most = c;
      }
    if (best) {
      best->severity = Severity::warning;
      best->evidence["raised_to_warning"] =
          idle_quarter ? "a device loses 25% of its window or more, and this explains the most of it"
                       : fmt::format("the scaling efficiency is {:.2f}, and this explains the most lost time", *e.scaling_efficiency);
    }
  }
  // Last: time that nothing above explains.
  if (auto f = check::unexplained_idle(e, d.findings, d.budget)) {
    f->id = "unexplained-idle";
    d.findings.push_back(std::move(*f));
  }
  price_findings(e, d);
  for (const auto& f : d.findings)
    if (f.severity != Severity::info) d.healthy = false;
  std::stable_sort(d.findings.begin(), d.findings.end(),
                   [](const Finding& a, const Finding& b) { return a.severity > b.severity; });
  if (const Finding* p = primary_of(d.findings, d.budget)) d.primary = p->id;
  d.notes = e.notes;
  d.job = e.job;
  auto& s = d.summary;
  s.source = e.source;
  s.timeline_source = trace::timeline_source_name(e.timeline_source);
  s.mode = e.mode;
  s.parallelism = e.parallelism;
  s.parallelism_evidence = e.parallelism_evidence;
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
  const bool steps = std::any_of(e.timelines.begin(), e.timelines.end(),
                                 [](const TimelineEvidence& t) { return t.window == "profiled steps"; });
  if (steps) d.ranks_kernel_span = e.kernel_span;
  return d;
}

namespace {

std::string share(const std::optional<double>& v) { return v ? fmt::format("{:.1f}%", 100 * *v) : "-"; }

// The device timeline per rank (or device): where the window went.
void print_breakdown(const Diagnosis& d, std::ostream& out) {
  if (d.ranks.empty()) return;
  out << fmt::format("time per {} ({} times):\n", is_distributed(d.summary.mode) ? "rank" : "device",
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

// Which files are which rank, and why they were read together.
void print_job(const Diagnosis& d, std::ostream& out) {
  if (!d.job) return;
  const auto& j = *d.job;
  out << fmt::format("traces: {} file(s), {}: {}\n", j.files.size(), j.ranks ? "ranks of one job" : "one run", j.reason);
  if (!d.summary.parallelism.empty())
    out << fmt::format("parallelism: {} ({})\n", d.summary.parallelism, d.summary.parallelism_evidence);
  for (const auto& f : j.files)
    out << fmt::format("  {:<8} {}\n", f.rank ? fmt::format("rank {}", *f.rank) : "", escape_untrusted(f.path, 200));
}

// Whether a prediction was made for the budget row (its inputs name that rank or device).
bool predicted_for(const reports::Prediction& p, const reports::RankBudget& b) {
  if (!p.inputs.contains("device") || !p.inputs["device"].is_string()) return false;
  const std::string who = p.inputs["device"].get<std::string>();
  return who == b.device || (b.rank && who == fmt::format("rank {} ({})", *b.rank, b.device));
}

// What the finding's fix is worth: the step before and after, and how that was found.
void print_worth(const Finding& f, std::ostream& out, bool verbose) {
  if (!f.predicted) return;
  const auto& p = *f.predicted;
  if (!p.step_time_s || !p.measured_step_time_s) {
    if (verbose) out << "  worth: not predicted: " << p.reason << "\n";
    return;
  }
  out << "  worth: " << p.summary() << "\n";
  if (verbose) out << "    how: " << p.method << "\n";
}

// The fix run and timed (dpbench --doctor=prove).
void print_proof(const Finding& f, std::ostream& out) {
  if (f.proof) out << "  proved: " << f.proof->summary() << "\n";
}

// Where each window went: the share lost, each finding's part of it, what is left.
void print_budget(const Diagnosis& d, std::ostream& out) {
  if (d.budget.empty()) return;
  out << "where the time went (shares of each window; lost = idle + communication compute did not hide):\n";
  for (const auto& b : d.budget) {
    std::string parts;
    for (const auto& [id, share] : b.explained) {
      // What removing it would give back, where the finding's prediction is for this row.
      std::string back;
      for (const auto& f : d.findings)
        if (f.id == id && f.predicted && f.predicted->gain_share && predicted_for(*f.predicted, b))
          back = fmt::format(" (gives back {:.0f}% of the step)", 100 * *f.predicted->gain_share);
      parts += fmt::format("{} {:.1f}%{}, ", id, 100 * share, back);
    }
    out << fmt::format("  {:<22} lost {:5.1f}% = {}unexplained {:.1f}%\n",
                       b.rank ? fmt::format("rank {} ({})", *b.rank, b.device) : b.device,
                       100 * (b.idle_share + b.exposed_comm_share), parts, 100 * b.unexplained_share);
    if (!b.idle_causes.empty()) {
      std::string causes;
      for (const auto& [cause, share] : b.idle_causes)
        if (share >= 0.0005) causes += fmt::format("{}{} {:.1f}%", causes.empty() ? "" : ", ", cause, 100 * share);
      out << "    idle by cause: " << causes << "\n";
    }
  }
}

}  // namespace

void print_diagnosis(const Diagnosis& d, std::ostream& out, bool verbose) {
  const auto& s = d.summary;
  print_job(d, out);
  const bool samples = s.source != "PyTorch profiler trace";
  std::string devices;
  for (const auto& dev : s.devices)
    devices += fmt::format("{}{} {:.0f}% busy{}", devices.empty() ? "" : ", ", dev.id, 100 * dev.busy_fraction,
                           samples ? fmt::format(" ({} samples)", dev.samples) : "");
  if (!devices.empty()) devices += fmt::format(" ({} times)", s.timeline_source);
  for (const auto& f : d.findings) {
    out << fmt::format("{}[{}]: {}\n", severity_name(f.severity), f.id, f.title);
    if (!verbose) {
      out << "  fix: " << f.fix << "\n";
      print_worth(f, out, false);
      print_proof(f, out);
      continue;
    }
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
    print_worth(f, out, true);
    print_proof(f, out);
  }
  if (verbose) print_breakdown(d, out);
  print_budget(d, out);
  for (const auto& n : d.notes) out << "note: " << n << "\n";
  if (d.healthy) {
    const std::string mode = parallel_mode_name(s.mode);
    const std::string what = s.model.empty() ? mode : mode + " " + s.model;
    const std::string speed = s.throughput_samples_per_s
                                  ? fmt::format("{:.1f} samples/s", *s.throughput_samples_per_s)
                                  : fmt::format("{:.2f} ms per step", 1e3 * s.step_time_s);
    out << fmt::format("healthy: {} on {} device(s), {}; {}; data wait {:.1f}% of the time", what, s.world_size, speed,
                       devices.empty() ? "no device activity recorded" : devices, 100 * s.data_wait_share);
    if (s.overlap_ratio)
      out << fmt::format("; {:.0f}% of the {} overlapped", 100 * *s.overlap_ratio,
                         mode_info(s.mode).shards_state ? "all-gathers and reduce-scatters" : "all-reduce");
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
    out << fmt::format("problems: {} error(s), {} warning(s){}; {}\n", errors, warnings,
                       d.primary.empty() ? "" : fmt::format(", mainly {}", d.primary),
                       devices.empty() ? "no device activity recorded" : devices);
  }
}

}  // namespace dpb::doctor
