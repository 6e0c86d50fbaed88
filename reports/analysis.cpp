#include "reports/analysis.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "engine/core/error.h"

namespace dpb::reports {

namespace {

double num(const nlohmann::json& j, const char* key, double fallback = -1) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}

double median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string human_seconds(double s) {
  if (s < 0) return "-";
  if (s < 1e-3) return fmt::format("{:.1f} us", s * 1e6);
  if (s < 1) return fmt::format("{:.2f} ms", s * 1e3);
  return fmt::format("{:.3f} s", s);
}

std::string pct(double v) { return v < 0 ? "-" : fmt::format("{:.1f}%", 100 * v); }

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

const nlohmann::json& runs_of(const nlohmann::json& report) {
  DPB_CHECK(report.is_object() && report.value("schema", "") == "dpbench.report/1" && report.contains("runs") &&
            report["runs"].is_array())
      << "not a dpbench report (expected \"schema\": \"dpbench.report/1\" with runs[])";
  return report["runs"];
}

}  // namespace

std::vector<Point> report_points(const nlohmann::json& report) {
  const auto& runs = runs_of(report);
  const auto& cfg = report["config"];
  std::map<int, std::vector<const nlohmann::json*>> by_world;
  for (const auto& r : runs) by_world[r.value("world_size", 1)].push_back(&r);
  std::vector<Point> out;
  for (const auto& [world, rs] : by_world) {
    Point p;
    p.world = world;
    p.model = cfg.value("model", "?");
    p.mode = rs.front()->value("mode", cfg.value("mode", "?"));
    p.key = fmt::format("{} {} x{}", p.mode, p.model, world);
    p.global_batch = rs.front()->value("global_batch", int64_t{0});
    std::vector<double> thr, med, p90, eff, ovl, dw, mfu, bub;
    for (const auto* r : rs) {
      if (double v = num(*r, "throughput_samples_per_s"); v >= 0) thr.push_back(v);
      if (r->contains("step_time_s")) {
        if (double v = num((*r)["step_time_s"], "median"); v >= 0) med.push_back(v);
        if (double v = num((*r)["step_time_s"], "p90"); v >= 0) p90.push_back(v);
      }
      if (double v = num(*r, "scaling_efficiency"); v >= 0) eff.push_back(v);
      if (r->contains("overlap")) {
        if (double v = num((*r)["overlap"], "ratio"); v >= 0) ovl.push_back(v);
      }
      if (double v = num(*r, "data_wait_share"); v >= 0) dw.push_back(v);
      if (double v = num(*r, "mfu"); v >= 0) mfu.push_back(v);
      if (r->contains("pipeline") && (*r)["pipeline"].contains("bubble")) {
        if (double v = num((*r)["pipeline"]["bubble"], "measured"); v >= 0) bub.push_back(v);
      }
    }
    p.repeats = static_cast<int>(rs.size());
    p.throughput = std::max(0.0, median(thr));
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
  if (report.contains("sweep"))
    for (const auto& s : report["sweep"])
      for (auto& p : out)
        if (p.world == s.value("world_size", -1)) p.efficiency = num(s, "scaling_efficiency", p.efficiency);
  return out;
}

void show_report(const nlohmann::json& report, std::ostream& out) {
  const auto points = report_points(report);
  const auto& cfg = report["config"];
  out << fmt::format("{} | model {} | dataset {} | {} | batch/device {} | precision {}\n", cfg.value("mode", "?"),
                     cfg.value("model", "?"), cfg.value("dataset", "?"), cfg.value("devices", "?"),
                     cfg.value("batch_per_device", int64_t{0}), cfg.value("precision", "?"));
  if (report.contains("tool"))
    out << fmt::format("dpbench {} ({})", report["tool"].value("version", "?"), report["tool"].value("git", "?"));
  if (report.contains("env") && report["env"].contains("cpu") && report["env"]["cpu"].is_object()) {
    const auto& env = report["env"];
    out << fmt::format(" on {} ({} threads)", env["cpu"].value("model", "?"), env["cpu"].value("threads", 0));
    if (env.contains("gpus") && !env["gpus"].empty()) out << fmt::format(", {}", env["gpus"][0].value("name", "?"));
  }
  out << "\n";
  out << fmt::format("{:>6} {:>8} {:>12} {:>11} {:>11} {:>8} {:>9} {:>10} {:>8}\n", "world", "global", "samples/s",
                     "median", "p90", "E(N)", "overlap", "data wait", "repeats");
  for (const auto& p : points)
    out << fmt::format("{:>6} {:>8} {:>12.1f} {:>11} {:>11} {:>8} {:>9} {:>10} {:>8}\n", p.world, p.global_batch,
                       p.throughput, human_seconds(p.step_median_s), human_seconds(p.step_p90_s),
                       p.efficiency < 0 ? "-" : fmt::format("{:.3f}", p.efficiency), pct(p.overlap),
                       pct(p.data_wait_share), p.repeats);
  const auto& last = report["runs"].back();
  if (last.contains("devices") && last["devices"].size() > 1) {
    out << "devices (largest run):";
    for (const auto& d : last["devices"])
      out << fmt::format("  {} {} busy, {} samples", d.value("id", "?"), pct(num(d, "busy_fraction")),
                         d.value("samples", int64_t{0}));
    out << "\n";
  }
  if (last.contains("pipeline"))
    out << fmt::format("pipeline: {} with {} micro-batches, bubble {} measured vs {} theory\n",
                       last["pipeline"].value("schedule", "?"), last["pipeline"].value("micro_batches", 0),
                       pct(num(last["pipeline"]["bubble"], "measured")), pct(num(last["pipeline"]["bubble"], "theory")));
  const auto& findings = report.contains("findings") ? report["findings"] : nlohmann::json::array();
  if (findings.empty()) {
    out << "findings: none recorded (dpdoctor REPORT diagnoses it)\n";
  } else {
    for (const auto& f : findings)
      out << fmt::format("{}: {} [{}]\n", f.value("severity", "?"), f.value("title", "?"), f.value("id", "?"));
  }
}

Comparison compare_reports(const nlohmann::json& base, const nlohmann::json& now, double max_regress) {
  DPB_CHECK(max_regress >= 0) << "--max-regress must not be negative";
  Comparison c;
  for (const char* key : {"model", "dataset", "devices", "precision", "batch_per_device"}) {
    const auto& a = base["config"].contains(key) ? base["config"][key] : nlohmann::json();
    const auto& b = now["config"].contains(key) ? now["config"][key] : nlohmann::json();
    if (a != b) c.notes.push_back(fmt::format("config.{} differs: {} vs {}", key, a.dump(), b.dump()));
  }
  const auto bp = report_points(base), np = report_points(now);
  for (const auto& b : bp) {
    auto it = std::find_if(np.begin(), np.end(), [&](const Point& p) { return p.key == b.key; });
    if (it == np.end()) {
      c.notes.push_back(fmt::format("{}: only in the base report", b.key));
      continue;
    }
    const Point& n = *it;
    auto add = [&](const char* metric, const char* unit, double a, double v, bool higher_better, bool gated) {
      if (a < 0 || v < 0) return;
      Change ch{b.key, metric, unit, a, v, 0, gated, false};
      if (a > 0) ch.change = (higher_better ? v - a : a - v) / a;
      ch.regression = gated && ch.change < -max_regress;
      c.regression = c.regression || ch.regression;
      c.changes.push_back(ch);
    };
    add("throughput", "samples/s", b.throughput, n.throughput, true, true);
    add("step time (median)", "s", b.step_median_s, n.step_median_s, false, true);
    add("scaling efficiency", "", b.efficiency, n.efficiency, true, true);
    add("step time (p90)", "s", b.step_p90_s, n.step_p90_s, false, false);
    add("overlap", "", b.overlap, n.overlap, true, false);
    add("data wait share", "", b.data_wait_share, n.data_wait_share, false, false);
    add("MFU", "", b.mfu, n.mfu, true, false);
    add("pipeline bubble", "", b.bubble, n.bubble, false, false);
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

nlohmann::json github_benchmark(const nlohmann::json& report, bool bigger_is_better) {
  nlohmann::json out = nlohmann::json::array();
  const auto& cfg = report["config"];
  const std::string precision = cfg.value("precision", "fp32"), devices = cfg.value("devices", "cpu");
  for (const auto& p : report_points(report)) {
    const std::string name = fmt::format("{} {} {} x{} ({}, batch {})", p.mode, p.model, devices, p.world, precision,
                                         p.global_batch);
    const std::string extra = fmt::format("repetitions: {}", p.repeats);
    if (bigger_is_better) {
      out.push_back({{"name", name + " throughput"}, {"unit", "samples/s"}, {"value", p.throughput}, {"extra", extra}});
      if (p.efficiency >= 0)
        out.push_back({{"name", name + " scaling efficiency"}, {"unit", "ratio"}, {"value", p.efficiency}, {"extra", extra}});
    } else {
      if (p.step_median_s >= 0)
        out.push_back({{"name", name + " step time"}, {"unit", "ms"}, {"value", p.step_median_s * 1e3}, {"extra", extra}});
      if (p.step_p90_s >= 0)
        out.push_back({{"name", name + " step time p90"}, {"unit", "ms"}, {"value", p.step_p90_s * 1e3}, {"extra", extra}});
    }
  }
  return out;
}

// --- HTML ----------------------------------------------------------------------------------

namespace {

const char* category_color(const std::string& cat) {
  if (cat == "compute") return "#4e79a7";
  if (cat == "comm") return "#e15759";
  if (cat == "copy") return "#f28e2b";
  if (cat == "data") return "#bab0ac";
  if (cat == "optim") return "#59a14f";
  return "#76b7b2";
}

std::string scaling_chart(const std::vector<Point>& points) {
  const double W = 560, H = 300, L = 70, R = 20, T = 20, B = 50;
  double max_n = 1, max_t = 1;
  const Point& first = points.front();
  const double per_device = first.throughput / first.world;
  for (const auto& p : points) {
    max_n = std::max(max_n, static_cast<double>(p.world));
    max_t = std::max({max_t, p.throughput, per_device * p.world});
  }
  auto x = [&](double n) { return L + (W - L - R) * (n / max_n); };
  auto y = [&](double t) { return H - B - (H - T - B) * (t / (max_t * 1.05)); };
  std::ostringstream s;
  s << fmt::format(R"(<svg class="chart" id="scaling" width="{}" height="{}" viewBox="0 0 {} {}" role="img">)", W, H, W, H);
  s << "<title>Throughput against device count, with ideal linear scaling</title>";
  s << fmt::format(R"(<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#333"/>)", L, H - B, W - R, H - B);
  s << fmt::format(R"(<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#333"/>)", L, T, L, H - B);
  for (const auto& p : points)
    s << fmt::format(R"(<text x="{}" y="{}" text-anchor="middle" font-size="12">{}</text>)", x(p.world), H - B + 16, p.world);
  s << fmt::format(R"(<text x="{}" y="{}" text-anchor="middle" font-size="12">devices</text>)", (L + W - R) / 2, H - 12);
  for (int k = 0; k <= 4; ++k) {
    const double t = max_t * k / 4;
    s << fmt::format(R"(<text x="{}" y="{}" text-anchor="end" font-size="11">{:.0f}</text>)", L - 6, y(t) + 4, t);
  }
  s << fmt::format(R"~(<text x="14" y="{}" font-size="12" transform="rotate(-90 14 {})" text-anchor="middle">samples/s</text>)~",
                   (T + H - B) / 2, (T + H - B) / 2);
  // Ideal: N x throughput per device at the first point.
  s << fmt::format(R"(<line class="ideal" x1="{}" y1="{}" x2="{}" y2="{}" stroke="#999" stroke-dasharray="5,4"/>)", x(0), y(0),
                   x(max_n), y(per_device * max_n));
  std::string path;
  for (const auto& p : points) path += fmt::format("{}{:.1f},{:.1f} ", path.empty() ? "M" : "L", x(p.world), y(p.throughput));
  s << fmt::format(R"(<path class="measured" d="{}" fill="none" stroke="#4e79a7" stroke-width="2.5"/>)", path);
  for (const auto& p : points) {
    s << fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="4" fill="#4e79a7"><title>{} devices: {:.1f} samples/s, E = {}</title></circle>)",
                     x(p.world), y(p.throughput), p.world, p.throughput,
                     p.efficiency < 0 ? "-" : fmt::format("{:.3f}", p.efficiency));
    if (p.efficiency >= 0)
      s << fmt::format(R"(<text x="{:.1f}" y="{:.1f}" font-size="11" text-anchor="middle">E={:.2f}</text>)", x(p.world),
                       y(p.throughput) - 10, p.efficiency);
  }
  s << fmt::format(R"(<text x="{}" y="{}" font-size="11" fill="#999">ideal (N x one device)</text>)", L + 8, T + 10);
  s << "</svg>";
  return s.str();
}

std::string busy_chart(const nlohmann::json& run) {
  const auto& devs = run["devices"];
  const double W = 560, row = 26, L = 110, R = 60;
  const double H = 20 + row * static_cast<double>(devs.size());
  std::ostringstream s;
  s << fmt::format(R"(<svg class="chart" id="busy" width="{}" height="{}" viewBox="0 0 {} {}" role="img">)", W, H, W, H);
  s << "<title>Busy fraction of each device over the measured steps</title>";
  double yy = 10;
  for (const auto& d : devs) {
    const double b = std::clamp(num(d, "busy_fraction", 0), 0.0, 1.0);
    s << fmt::format(R"(<text x="{}" y="{}" text-anchor="end" font-size="12">{}</text>)", L - 8, yy + 15, esc(d.value("id", "?")));
    s << fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="#eee"/>)", L, yy + 3, W - L - R, row - 8);
    s << fmt::format(R"(<rect class="bar" x="{}" y="{}" width="{:.1f}" height="{}" fill="#4e79a7"><title>{}: {:.1f}% busy, {} samples</title></rect>)",
                     L, yy + 3, std::max(1.0, (W - L - R) * b), row - 8, esc(d.value("id", "?")), 100 * b,
                     d.value("samples", int64_t{0}));
    s << fmt::format(R"(<text x="{}" y="{}" font-size="12">{:.0f}%</text>)", W - R + 6, yy + 15, 100 * b);
    yy += row;
  }
  s << "</svg>";
  return s.str();
}

std::string steps_chart(const nlohmann::json& run) {
  std::vector<double> t;
  for (const auto& v : run["step_times_s"])
    if (v.is_number()) t.push_back(v.get<double>());
  const double W = 560, H = 240, L = 50, R = 20, T = 20, B = 40;
  std::ostringstream s;
  s << fmt::format(R"(<svg class="chart" id="steps" width="{}" height="{}" viewBox="0 0 {} {}" role="img">)", W, H, W, H);
  s << "<title>Distribution of the measured step times</title>";
  if (t.empty()) {
    s << R"(<text x="20" y="40">no measured steps</text></svg>)";
    return s.str();
  }
  const double lo = *std::min_element(t.begin(), t.end()), hi = *std::max_element(t.begin(), t.end());
  const int bins = std::clamp(static_cast<int>(t.size()) / 2, 5, 30);
  const double width = hi > lo ? (hi - lo) / bins : std::max(lo * 0.01, 1e-9);
  std::vector<int> count(static_cast<size_t>(bins), 0);
  for (double v : t) count[static_cast<size_t>(std::min(bins - 1, static_cast<int>((v - lo) / width)))]++;
  const int most = *std::max_element(count.begin(), count.end());
  const double bw = (W - L - R) / bins;
  for (int b = 0; b < bins; ++b) {
    const double h = (H - T - B) * count[static_cast<size_t>(b)] / std::max(1, most);
    s << fmt::format(R"(<rect class="bar" x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="#76b7b2"><title>{} .. {}: {} steps</title></rect>)",
                     L + b * bw + 1, H - B - h, bw - 2, std::max(h, 0.5), human_seconds(lo + b * width),
                     human_seconds(lo + (b + 1) * width), count[static_cast<size_t>(b)]);
  }
  s << fmt::format(R"(<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#333"/>)", L, H - B, W - R, H - B);
  s << fmt::format(R"(<text x="{}" y="{}" font-size="11">{}</text>)", L, H - B + 16, human_seconds(lo));
  s << fmt::format(R"(<text x="{}" y="{}" font-size="11" text-anchor="end">{}</text>)", W - R, H - B + 16, human_seconds(hi));
  const double med = num(run["step_time_s"], "median");
  if (med >= 0 && hi > lo) {
    const double xm = L + (W - L - R) * (med - lo) / (hi - lo + width);
    s << fmt::format(R"(<line x1="{:.1f}" y1="{}" x2="{:.1f}" y2="{}" stroke="#e15759" stroke-width="2"/>)", xm, T, xm, H - B);
    s << fmt::format(R"(<text x="{:.1f}" y="{}" font-size="11" fill="#e15759">median {}</text>)", xm + 4, T + 10, human_seconds(med));
  }
  s << fmt::format(R"(<text x="{}" y="{}" font-size="12" text-anchor="middle">step time ({} measured steps)</text>)",
                   (L + W - R) / 2, H - 8, t.size());
  s << "</svg>";
  return s.str();
}

std::string timeline_chart(const nlohmann::json& run, const nlohmann::json& config) {
  const auto& tl = run["timeline"];
  const double span = std::max(num(tl, "span_s", 0), 1e-9);
  // One row per (device, lane), in order of appearance.
  std::vector<std::pair<int, std::string>> rows;
  for (const auto& i : tl["intervals"]) {
    std::pair<int, std::string> k{i.value("device", 0), i.value("lane", "main")};
    if (std::find(rows.begin(), rows.end(), k) == rows.end()) rows.push_back(k);
  }
  std::sort(rows.begin(), rows.end());
  const double W = 760, row = 22, L = 150, R = 20, T = 10;
  const double H = T + row * static_cast<double>(std::max<size_t>(1, rows.size())) + 50;
  std::ostringstream s;
  s << fmt::format(R"(<svg class="chart" id="timeline" width="{}" height="{}" viewBox="0 0 {} {}" role="img">)", W, H, W, H);
  s << fmt::format("<title>Timeline of step {} (from its wait for data to its end)</title>", tl.value("step", int64_t{0}));
  // Devices by name (cpu:1), ranks by number.
  const bool ranks = config.value("mode", "") == "ddp";
  auto device_name = [&](int d) {
    if (ranks) return fmt::format("rank {}", d);
    if (config.contains("device_list") && d >= 0 && d < static_cast<int>(config["device_list"].size()))
      return config["device_list"][static_cast<size_t>(d)].get<std::string>();
    return fmt::format("device {}", d);
  };
  for (size_t r = 0; r < rows.size(); ++r)
    s << fmt::format(R"(<text x="{}" y="{}" text-anchor="end" font-size="11">{} {}</text>)", L - 6, T + row * r + 15,
                     esc(device_name(rows[r].first)), esc(rows[r].second));
  for (const auto& i : tl["intervals"]) {
    std::pair<int, std::string> k{i.value("device", 0), i.value("lane", "main")};
    const size_t r = static_cast<size_t>(std::find(rows.begin(), rows.end(), k) - rows.begin());
    const double b = num(i, "begin_s", 0), e = num(i, "end_s", 0);
    const double x0 = L + (W - L - R) * b / span, x1 = L + (W - L - R) * e / span;
    const std::string cat = i.value("cat", "compute");
    s << fmt::format(R"(<rect class="span" x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{}" fill="{}"><title>{} ({}): {} .. {}</title></rect>)",
                     x0, T + row * r + 3, std::max(1.0, x1 - x0), row - 6, category_color(cat), esc(i.value("name", "?")),
                     cat, human_seconds(b), human_seconds(e));
  }
  const double ly = T + row * static_cast<double>(rows.size()) + 20;
  double lx = L;
  for (const char* cat : {"compute", "comm", "copy", "data", "optim"}) {
    s << fmt::format(R"(<rect x="{}" y="{}" width="12" height="12" fill="{}"/><text x="{}" y="{}" font-size="11">{}</text>)", lx,
                     ly, category_color(cat), lx + 16, ly + 10, cat);
    lx += 90;
  }
  s << fmt::format(R"(<text x="{}" y="{}" font-size="11" text-anchor="end">{}</text>)", W - R, ly + 10, human_seconds(span));
  s << "</svg>";
  return s.str();
}

}  // namespace

std::string render_html(const nlohmann::json& report) {
  const auto points = report_points(report);
  const auto& cfg = report["config"];
  const auto& last = report["runs"].back();
  std::ostringstream h;
  const std::string title = fmt::format("dpbench: {} {} on {}", cfg.value("mode", "?"), cfg.value("model", "?"),
                                        cfg.value("devices", "?"));
  h << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" << esc(title) << "</title>\n";
  h << "<style>body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:980px}"
       "h1{font-size:22px}h2{font-size:17px;margin-top:28px}table{border-collapse:collapse;font-size:13px}"
       "td,th{border:1px solid #ddd;padding:4px 8px;text-align:right}th{background:#f4f4f4}"
       "td:first-child,th:first-child{text-align:left}.sev-error{color:#c00}.sev-warning{color:#b60}"
       "code{background:#f4f4f4;padding:1px 4px}</style></head><body>\n";
  h << "<h1>" << esc(title) << "</h1>\n";
  if (report.contains("command")) {
    std::string cmd;
    for (const auto& a : report["command"]) {
      if (!cmd.empty()) cmd += ' ';
      cmd += a.get<std::string>();
    }
    h << "<p><code>" << esc(cmd) << "</code></p>\n";
  }
  h << "<table><tr><th>devices</th><th>global batch</th><th>samples/s</th><th>step median</th><th>p90</th>"
       "<th>E(N)</th><th>overlap</th><th>data wait</th><th>repeats</th></tr>\n";
  for (const auto& p : points)
    h << fmt::format("<tr><td>{}</td><td>{}</td><td>{:.1f}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                     p.world, p.global_batch, p.throughput, human_seconds(p.step_median_s), human_seconds(p.step_p90_s),
                     p.efficiency < 0 ? "-" : fmt::format("{:.3f}", p.efficiency), pct(p.overlap),
                     pct(p.data_wait_share), p.repeats);
  h << "</table>\n";
  h << "<h2>Scaling</h2>\n" << scaling_chart(points) << "\n";
  if (points.size() < 2) h << "<p>One device count: run <code>--gpus=1,2,4</code> for a scaling curve.</p>\n";
  h << "<h2>Busy devices (" << last.value("world_size", 1) << " device(s), measured steps)</h2>\n" << busy_chart(last) << "\n";
  h << "<h2>Step times</h2>\n" << steps_chart(last) << "\n";
  if (last.contains("timeline")) h << "<h2>Timeline of the last measured step</h2>\n" << timeline_chart(last, cfg) << "\n";
  h << "<h2>Findings</h2>\n";
  const auto& findings = report.contains("findings") ? report["findings"] : nlohmann::json::array();
  if (findings.empty()) h << "<p>None recorded (<code>dpdoctor REPORT.json</code> diagnoses this report).</p>\n";
  for (const auto& f : findings) {
    const std::string sev = f.value("severity", "info");
    h << "<div class=\"finding\"><p class=\"sev-" << esc(sev) << "\"><b>" << esc(sev) << ": " << esc(f.value("title", ""))
      << "</b> [" << esc(f.value("id", "")) << "]</p><p>" << esc(f.value("explanation", "")) << "</p><p><b>fix:</b> "
      << esc(f.value("fix", "")) << "</p></div>\n";
  }
  if (report.contains("env")) h << "<h2>Environment</h2>\n<pre>" << esc(report["env"].dump(2)) << "</pre>\n";
  h << "</body></html>\n";
  return h.str();
}

}  // namespace dpb::reports
