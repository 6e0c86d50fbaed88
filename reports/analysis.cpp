#include "reports/analysis.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "engine/core/error.h"

namespace dpb::reports {

namespace {

Num median(std::vector<double> v) {
  if (v.empty()) return std::nullopt;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void add(std::vector<double>& to, const Num& v) {
  if (v) to.push_back(*v);
}

std::string fixed3(const Num& v) { return v ? fmt::format("{:.3f}", *v) : "-"; }

}  // namespace

std::string human_seconds(const Num& s) {
  if (!s) return "-";
  if (*s < 1e-3) return fmt::format("{:.1f} us", *s * 1e6);
  if (*s < 1) return fmt::format("{:.2f} ms", *s * 1e3);
  return fmt::format("{:.3f} s", *s);
}

std::string percent(const Num& v) { return v ? fmt::format("{:.1f}%", 100 * *v) : "-"; }

std::vector<Point> predicted_points(const RunReport& report) {
  DPB_CHECK(report.sweep && !report.sweep->empty()) << "the report has no run and no predicted sweep";
  std::vector<Point> out;
  for (const auto& s : *report.sweep) {
    Point p;
    p.world = s.world_size;
    p.model = report.config.model;
    p.mode = parallel_mode_name(s.mode);
    p.key = fmt::format("{} {} x{}", p.mode, p.model, p.world);
    p.global_batch = s.global_batch;
    p.throughput = s.throughput_samples_per_s.value_or(0);
    p.step_median_s = s.step_time_s;
    p.efficiency = s.scaling_efficiency;
    p.overlap = s.overlap;
    p.predicted = s.predicted;
    out.push_back(p);
  }
  return out;
}

std::vector<Point> report_points(const RunReport& report) {
  if (report.runs.empty()) return predicted_points(report);
  std::map<int, std::vector<const RunMetrics*>> by_world;
  for (const auto& r : report.runs) by_world[r.world_size].push_back(&r);
  std::vector<Point> out;
  for (const auto& [world, rs] : by_world) {
    Point p;
    p.world = world;
    p.model = report.config.model;
    p.mode = parallel_mode_name(rs.front()->mode.value_or(report.config.mode));
    p.key = fmt::format("{} {} x{}", p.mode, p.model, world);
    p.global_batch = rs.front()->global_batch;
    std::vector<double> thr, med, p90, eff, ovl, dw, mfu, bub;
    for (const auto* r : rs) {
      add(thr, r->throughput_samples_per_s);
      add(med, r->step_time_s.median);
      add(p90, r->step_time_s.p90);
      add(eff, r->scaling_efficiency);
      if (r->overlap) add(ovl, r->overlap->ratio);
      add(dw, r->data_wait_share);
      add(mfu, r->mfu);
      if (r->pipeline) add(bub, r->pipeline->bubble_measured);
    }
    p.repeats = static_cast<int>(rs.size());
    p.throughput = median(thr).value_or(0);
    p.step_median_s = median(med);
    p.step_p90_s = median(p90);
    p.efficiency = median(eff);
    p.overlap = median(ovl);
    p.data_wait_share = median(dw);
    p.mfu = median(mfu);
    p.bubble = median(bub);
    out.push_back(p);
  }
  // A sweep's efficiency is computed from the median throughputs: prefer it.
  if (report.sweep)
    for (const auto& s : *report.sweep)
      for (auto& p : out)
        if (p.world == s.world_size && s.scaling_efficiency) p.efficiency = s.scaling_efficiency;
  return out;
}

void show_report(const RunReport& report, std::ostream& out) {
  const auto points = report_points(report);
  const auto& cfg = report.config;
  out << fmt::format("{} | model {} | dataset {} | {} | batch/device {} | precision {}\n", parallel_mode_name(cfg.mode),
                     cfg.model, cfg.dataset, cfg.devices == DeviceKind::cuda ? "cuda" : "cpu", cfg.batch_per_device,
                     precision_name(cfg.precision));
  out << fmt::format("dpbench {} ({}) on {} ({} threads", report.tool.version, report.tool.git, report.env.cpu_model,
                     report.env.cpu_threads);
  if (report.env.kernels_isa)
    out << fmt::format("; kernels {}, oneDNN {}", *report.env.kernels_isa, report.env.onednn_isa.value_or("unknown"));
  out << ")";
  if (!report.env.gpus.empty()) out << fmt::format(", {}", report.env.gpus[0].name);
  out << "\n";
  out << fmt::format("{:>6} {:>8} {:>12} {:>11} {:>11} {:>8} {:>9} {:>10} {:>8}\n", "world", "global", "samples/s",
                     "median", "p90", "E(N)", "overlap", "data wait", "repeats");
  for (const auto& p : points)
    out << fmt::format("{:>6} {:>8} {:>12.1f} {:>11} {:>11} {:>8} {:>9} {:>10} {:>8}\n", p.world, p.global_batch,
                       p.throughput, human_seconds(p.step_median_s), human_seconds(p.step_p90_s), fixed3(p.efficiency),
                       percent(p.overlap), percent(p.data_wait_share), p.predicted ? "predicted" : std::to_string(p.repeats));
  if (report.runs.empty()) {
    out << "a prediction (dpbench --simulate): nothing ran; dpreport html MEASURED --predicted=THIS plots it against "
           "measurements\n";
    return;
  }
  const auto& last = report.runs.back();
  if (last.devices.size() > 1) {
    out << "devices (largest run):";
    for (const auto& d : last.devices)
      out << fmt::format("  {} {} busy, {} samples", d.id, percent(d.busy_fraction), d.samples);
    out << "\n";
  }
  if (last.pipeline)
    out << fmt::format("pipeline: {} with {} micro-batches, bubble {} measured vs {} theory\n",
                       pipeline_schedule_name(last.pipeline->schedule), last.pipeline->micro_batches,
                       percent(last.pipeline->bubble_measured), percent(last.pipeline->bubble_theory));
  if (report.findings.empty()) {
    out << "findings: none recorded (dpdoctor REPORT diagnoses it)\n";
  } else {
    for (const auto& f : report.findings)
      out << fmt::format("{}: {} [{}]\n", severity_name(f.severity), f.title, f.id);
  }
}

Comparison compare_reports(const RunReport& base, const RunReport& now, double max_regress) {
  DPB_CHECK(max_regress >= 0) << "--max-regress must not be negative";
  Comparison c;
  auto note = [&](const char* key, const std::string& a, const std::string& b) {
    if (a != b) c.notes.push_back(fmt::format("config.{} differs: {} vs {}", key, a, b));
  };
  const auto devices = [](const RunConfig& k) { return std::string(k.devices == DeviceKind::cuda ? "cuda" : "cpu"); };
  note("model", base.config.model, now.config.model);
  note("dataset", base.config.dataset, now.config.dataset);
  note("devices", devices(base.config), devices(now.config));
  note("precision", precision_name(base.config.precision), precision_name(now.config.precision));
  note("batch_per_device", std::to_string(base.config.batch_per_device), std::to_string(now.config.batch_per_device));
  const auto bp = report_points(base), np = report_points(now);
  for (const auto& b : bp) {
    auto it = std::find_if(np.begin(), np.end(), [&](const Point& p) { return p.key == b.key; });
    if (it == np.end()) {
      c.notes.push_back(fmt::format("{}: only in the base report", b.key));
      continue;
    }
    const Point& n = *it;
    auto add_change = [&](const char* metric, const char* unit, const Num& a, const Num& v, bool higher_better,
                          bool gated) {
      if (!a || !v) return;
      Change ch{b.key, metric, unit, *a, *v, 0, gated, false};
      if (*a > 0) ch.change = (higher_better ? *v - *a : *a - *v) / *a;
      ch.regression = gated && ch.change < -max_regress;
      c.regression = c.regression || ch.regression;
      c.changes.push_back(ch);
    };
    add_change("throughput", "samples/s", b.throughput, n.throughput, true, true);
    add_change("step time (median)", "s", b.step_median_s, n.step_median_s, false, true);
    add_change("scaling efficiency", "", b.efficiency, n.efficiency, true, true);
    add_change("step time (p90)", "s", b.step_p90_s, n.step_p90_s, false, false);
    add_change("overlap", "", b.overlap, n.overlap, true, false);
    add_change("data wait share", "", b.data_wait_share, n.data_wait_share, false, false);
    add_change("MFU", "", b.mfu, n.mfu, true, false);
    add_change("pipeline bubble", "", b.bubble, n.bubble, false, false);
  }
  for (const auto& n : np)
    if (std::none_of(bp.begin(), bp.end(), [&](const Point& p) { return p.key == n.key; }))
      c.notes.push_back(fmt::format("{}: only in the new report", n.key));
  return c;
}

void print_comparison(const Comparison& c, double max_regress, std::ostream& out) {
  for (const auto& n : c.notes) out << "note: " << n << "\n";
  out << fmt::format("{:<18} {:<20} {:>14} {:>14} {:>9}  {}\n", "point", "metric", "base", "new", "change", "");
  for (const auto& ch : c.changes) {
    auto show = [&](double v) {
      if (ch.unit == "s") return human_seconds(v);
      if (ch.unit.empty()) return fmt::format("{:.3f}", v);
      return fmt::format("{:.1f}", v);
    };
    const std::string verdict = ch.regression ? "REGRESSION" : !ch.gated ? "(not gated)" : ch.change > max_regress ? "better" : "ok";
    out << fmt::format("{:<18} {:<20} {:>14} {:>14} {:>+8.1f}%  {}\n", ch.point, ch.metric, show(ch.base), show(ch.now),
                       100 * ch.change, verdict);
  }
  out << (c.regression ? fmt::format("regression: a gated metric is more than {:.1f}% worse\n", 100 * max_regress)
                       : fmt::format("no regression beyond {:.1f}%\n", 100 * max_regress));
}

nlohmann::json github_benchmark(const RunReport& report, bool bigger_is_better) {
  nlohmann::json out = nlohmann::json::array();
  const auto& cfg = report.config;
  const std::string precision = precision_name(cfg.precision);
  const std::string devices = cfg.devices == DeviceKind::cuda ? "cuda" : "cpu";
  for (const auto& p : report_points(report)) {
    const std::string name = fmt::format("{} {} {} x{} ({}, batch {})", p.mode, p.model, devices, p.world, precision,
                                         p.global_batch);
    const std::string extra = fmt::format("repetitions: {}", p.repeats);
    if (bigger_is_better) {
      out.push_back({{"name", name + " throughput"}, {"unit", "samples/s"}, {"value", p.throughput}, {"extra", extra}});
      if (p.efficiency)
        out.push_back({{"name", name + " scaling efficiency"}, {"unit", "ratio"}, {"value", *p.efficiency}, {"extra", extra}});
    } else {
      if (p.step_median_s)
        out.push_back({{"name", name + " step time"}, {"unit", "ms"}, {"value", *p.step_median_s * 1e3}, {"extra", extra}});
      if (p.step_p90_s)
        out.push_back({{"name", name + " step time p90"}, {"unit", "ms"}, {"value", *p.step_p90_s * 1e3}, {"extra", extra}});
    }
  }
  return out;
}

}  // namespace dpb::reports
