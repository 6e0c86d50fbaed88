#include "reports/render_html.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "engine/core/error.h"
#include "reports/analysis.h"

namespace dpb::reports {

namespace {

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

const char* category_color(const std::string& cat) {
  if (cat == "compute") return "#4e79a7";
  if (cat == "comm") return "#e15759";
  if (cat == "copy") return "#f28e2b";
  if (cat == "data") return "#bab0ac";
  if (cat == "optim") return "#59a14f";
  return "#76b7b2";
}

// dpdoctor's verdict on the run, and where each device's window went.
std::string diagnosis_html(const DiagnosisReport& d) {
  std::ostringstream h;
  const auto& s = d.summary;
  std::string devices;
  for (const auto& dev : s.devices)
    devices += (devices.empty() ? "" : ", ") + dev.id + " " + fmt::format("{:.0f}% busy", 100 * dev.busy_fraction);
  if (d.healthy) {
    h << "<p class=\"sev-info\"><b>dpdoctor: healthy</b>: " << esc(parallel_mode_name(s.mode)) << " "
      << esc(s.model) << " on " << s.world_size << " device(s)";
    if (s.throughput_samples_per_s) h << fmt::format(", {:.1f} samples/s", *s.throughput_samples_per_s);
    h << "; " << esc(devices) << " (" << esc(s.timeline_source) << " times)";
    h << fmt::format("; data wait {:.1f}% of the time", 100 * s.data_wait_share);
    if (s.overlap_ratio)
      h << fmt::format("; {:.0f}% of the {} overlapped", 100 * *s.overlap_ratio,
                         mode_info(s.mode).shards_state ? "all-gathers and reduce-scatters" : "all-reduce");
    h << ".</p>\n";
  } else {
    int errors = 0, warnings = 0;
    for (const auto& f : d.findings) {
      errors += f.severity == Severity::error;
      warnings += f.severity == Severity::warning;
    }
    h << "<p class=\"sev-warning\"><b>dpdoctor: " << errors << " error(s), " << warnings << " warning(s)</b>";
    if (!d.primary.empty()) h << ", mainly <code>" << esc(d.primary) << "</code>";
    h << "; " << esc(devices) << " (" << esc(s.timeline_source) << " times).</p>\n";
  }
  if (!d.budget.empty()) {
    h << "<table><tr><th>rank / device</th><th>lost (idle + exposed communication)</th><th>explained by</th>"
         "<th>unexplained</th></tr>\n";
    for (const auto& b : d.budget) {
      std::string parts;
      for (const auto& [id, share] : b.explained) {
        parts += fmt::format("{}{} {:.1f}%", parts.empty() ? "" : ", ", id, 100 * share);
        for (const auto& f : d.findings)
          if (f.id == id && f.predicted && !f.predicted->summary().empty())
            parts += " (fixed: " + f.predicted->summary() + ")";
      }
      h << "<tr><td>" << esc(b.rank ? fmt::format("rank {} ({})", *b.rank, b.device) : b.device) << "</td><td>"
        << fmt::format("{:.1f}%", 100 * (b.idle_share + b.exposed_comm_share)) << "</td><td>"
        << esc(parts.empty() ? "-" : parts) << "</td><td>" << fmt::format("{:.1f}%", 100 * b.unexplained_share)
        << "</td></tr>\n";
    }
    h << "</table>\n";
  }
  for (const auto& n : d.notes) h << "<p>note: " << esc(n) << "</p>\n";
  return h.str();
}

std::string scaling_chart(const std::vector<Point>& points, const std::vector<Point>& predicted) {
  const double W = 560, H = 300, L = 70, R = 20, T = 20, B = 50;
  double max_n = 1, max_t = 1;
  const Point& first = points.front();
  const double per_device = first.throughput / first.world;
  for (const auto* set : {&points, &predicted})
    for (const auto& p : *set) {
      max_n = std::max(max_n, static_cast<double>(p.world));
      max_t = std::max({max_t, p.throughput, per_device * p.world});
    }
  // Up to 16 devices a linear axis; beyond, a log2 axis (1, 2, 4 ... 1024 evenly spaced).
  const bool log_axis = max_n > 16;
  auto x = [&](double n) {
    if (!log_axis) return L + (W - L - R) * (n / max_n);
    return L + (W - L - R) * (std::log2(std::max(n, 1.0)) + 1) / (std::log2(max_n) + 1);
  };
  auto y = [&](double t) { return H - B - (H - T - B) * (t / (max_t * 1.05)); };
  std::ostringstream s;
  s << fmt::format(R"(<svg class="chart" id="scaling" width="{}" height="{}" viewBox="0 0 {} {}" role="img">)", W, H, W, H);
  s << "<title>Throughput against device count, with ideal linear scaling</title>";
  s << fmt::format(R"(<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#333"/>)", L, H - B, W - R, H - B);
  s << fmt::format(R"(<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#333"/>)", L, T, L, H - B);
  std::vector<int> ticks;
  for (const auto* set : {&points, &predicted})
    for (const auto& p : *set) ticks.push_back(p.world);
  std::sort(ticks.begin(), ticks.end());
  ticks.erase(std::unique(ticks.begin(), ticks.end()), ticks.end());
  double last_tick = -1e9;
  for (int n : ticks) {
    if (x(n) - last_tick < 18) continue;  // crowded: leave a label out
    last_tick = x(n);
    s << fmt::format(R"(<text x="{}" y="{}" text-anchor="middle" font-size="12">{}</text>)", x(n), H - B + 16, n);
  }
  s << fmt::format(R"(<text x="{}" y="{}" text-anchor="middle" font-size="12">devices</text>)", (L + W - R) / 2, H - 12);
  for (int k = 0; k <= 4; ++k) {
    const double t = max_t * k / 4;
    s << fmt::format(R"(<text x="{}" y="{}" text-anchor="end" font-size="11">{:.0f}</text>)", L - 6, y(t) + 4, t);
  }
  s << fmt::format(R"~(<text x="14" y="{}" font-size="12" transform="rotate(-90 14 {})" text-anchor="middle">samples/s</text>)~",
                   (T + H - B) / 2, (T + H - B) / 2);
  // Ideal: N x throughput per device at the first point.
  if (!log_axis) {
    s << fmt::format(R"(<line class="ideal" x1="{}" y1="{}" x2="{}" y2="{}" stroke="#999" stroke-dasharray="5,4"/>)", x(0),
                     y(0), x(max_n), y(per_device * max_n));
  } else {
    std::string ideal;
    for (double n = 1; n <= max_n * 1.0001; n *= 2)
      ideal += fmt::format("{}{:.1f},{:.1f} ", ideal.empty() ? "M" : "L", x(n), y(per_device * n));
    s << fmt::format(R"(<path class="ideal" d="{}" fill="none" stroke="#999" stroke-dasharray="5,4"/>)", ideal);
  }
  if (!predicted.empty()) {
    std::string pp;
    for (const auto& p : predicted) pp += fmt::format("{}{:.1f},{:.1f} ", pp.empty() ? "M" : "L", x(p.world), y(p.throughput));
    s << fmt::format(R"(<path class="predicted" d="{}" fill="none" stroke="#f28e2b" stroke-width="2" stroke-dasharray="6,3"/>)", pp);
    for (const auto& p : predicted)
      s << fmt::format(R"(<rect class="predicted-point" x="{:.1f}" y="{:.1f}" width="7" height="7" fill="#f28e2b"><title>predicted, {} devices: {:.1f} samples/s, E = {}</title></rect>)",
                       x(p.world) - 3.5, y(p.throughput) - 3.5, p.world, p.throughput,
                       p.efficiency ? fmt::format("{:.3f}", *p.efficiency) : "-");
    s << fmt::format(R"(<text x="{}" y="{}" font-size="11" fill="#f28e2b">predicted (dpbench --simulate)</text>)", L + 8, T + 24);
  }
  const bool all_predicted = std::all_of(points.begin(), points.end(), [](const Point& p) { return p.predicted; });
  std::string path;
  for (const auto& p : points) path += fmt::format("{}{:.1f},{:.1f} ", path.empty() ? "M" : "L", x(p.world), y(p.throughput));
  s << fmt::format(R"(<path class="{}" d="{}" fill="none" stroke="{}" stroke-width="2.5"{}/>)",
                   all_predicted ? "predicted" : "measured", path, all_predicted ? "#f28e2b" : "#4e79a7",
                   all_predicted ? R"( stroke-dasharray="6,3")" : "");
  for (const auto& p : points) {
    s << fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="4" fill="#4e79a7"><title>{} devices: {:.1f} samples/s, E = {}</title></circle>)",
                     x(p.world), y(p.throughput), p.world, p.throughput,
                     p.efficiency ? fmt::format("{:.3f}", *p.efficiency) : "-");
    if (p.efficiency)
      s << fmt::format(R"(<text x="{:.1f}" y="{:.1f}" font-size="11" text-anchor="middle">E={:.2f}</text>)", x(p.world),
                       y(p.throughput) - 10, *p.efficiency);
  }
  s << fmt::format(R"(<text x="{}" y="{}" font-size="11" fill="#999">ideal (N x one device)</text>)", L + 8, T + 10);
  s << "</svg>";
  return s.str();
}

std::string busy_chart(const RunMetrics& run) {
  const auto& devs = run.devices;
  const double W = 560, row = 26, L = 110, R = 60;
  const double H = 20 + row * static_cast<double>(devs.size());
  std::ostringstream s;
  s << fmt::format(R"(<svg class="chart" id="busy" width="{}" height="{}" viewBox="0 0 {} {}" role="img">)", W, H, W, H);
  s << "<title>Busy fraction of each device over the measured steps</title>";
  double yy = 10;
  for (const auto& d : devs) {
    const double b = std::clamp(d.busy_fraction.value_or(0), 0.0, 1.0);
    s << fmt::format(R"(<text x="{}" y="{}" text-anchor="end" font-size="12">{}</text>)", L - 8, yy + 15, esc(d.id));
    s << fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="#eee"/>)", L, yy + 3, W - L - R, row - 8);
    s << fmt::format(R"(<rect class="bar" x="{}" y="{}" width="{:.1f}" height="{}" fill="#4e79a7"><title>{}: {} busy, {} samples</title></rect>)",
                     L, yy + 3, std::max(1.0, (W - L - R) * b), row - 8, esc(d.id), percent(d.busy_fraction), d.samples);
    s << fmt::format(R"(<text x="{}" y="{}" font-size="12">{}</text>)", W - R + 6, yy + 15,
                     d.busy_fraction ? fmt::format("{:.0f}%", 100 * b) : "-");
    yy += row;
  }
  s << "</svg>";
  return s.str();
}

std::string steps_chart(const RunMetrics& run) {
  std::vector<double> t;
  for (const auto& v : run.step_times_s)
    if (v) t.push_back(*v);
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
  for (double v : t) count[static_cast<size_t>(std::clamp(static_cast<int>((v - lo) / width), 0, bins - 1))]++;
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
  const Num med = run.step_time_s.median;
  if (med && hi > lo) {
    const double xm = L + (W - L - R) * (*med - lo) / (hi - lo + width);
    s << fmt::format(R"(<line x1="{:.1f}" y1="{}" x2="{:.1f}" y2="{}" stroke="#e15759" stroke-width="2"/>)", xm, T, xm, H - B);
    s << fmt::format(R"(<text x="{:.1f}" y="{}" font-size="11" fill="#e15759">median {}</text>)", xm + 4, T + 10, human_seconds(med));
  }
  s << fmt::format(R"(<text x="{}" y="{}" font-size="12" text-anchor="middle">step time ({} measured steps)</text>)",
                   (L + W - R) / 2, H - 8, t.size());
  s << "</svg>";
  return s.str();
}

std::string timeline_chart(const TimelineExcerpt& tl, const RunConfig& config) {
  const double span = std::max(tl.span_s.value_or(0), 1e-9);
  // One row per (device, lane), in order of appearance.
  std::vector<std::pair<int, std::string>> rows;
  for (const auto& i : tl.intervals) {
    std::pair<int, std::string> k{i.device, i.lane};
    if (std::find(rows.begin(), rows.end(), k) == rows.end()) rows.push_back(k);
  }
  std::sort(rows.begin(), rows.end());
  const double W = 760, row = 22, L = 150, R = 20, T = 10;
  const double H = T + row * static_cast<double>(std::max<size_t>(1, rows.size())) + 50;
  std::ostringstream s;
  s << fmt::format(R"(<svg class="chart" id="timeline" width="{}" height="{}" viewBox="0 0 {} {}" role="img">)", W, H, W, H);
  s << fmt::format("<title>Timeline of step {} (from its wait for data to its end; {} times)</title>", tl.step,
                   trace::timeline_source_name(tl.source));
  // Devices by name (cpu:1), ranks by number.
  const bool ranks = is_distributed(config.mode);
  auto device_name = [&](int d) {
    if (ranks) return fmt::format("rank {}", d);
    if (d >= 0 && d < static_cast<int>(config.device_list.size())) return config.device_list[static_cast<size_t>(d)];
    return fmt::format("device {}", d);
  };
  for (size_t r = 0; r < rows.size(); ++r)
    s << fmt::format(R"(<text x="{}" y="{}" text-anchor="end" font-size="11">{} {}</text>)", L - 6, T + row * r + 15,
                     esc(device_name(rows[r].first)), esc(rows[r].second));
  for (const auto& i : tl.intervals) {
    const std::pair<int, std::string> k{i.device, i.lane};
    const size_t r = static_cast<size_t>(std::find(rows.begin(), rows.end(), k) - rows.begin());
    const double b = i.begin_s.value_or(0), e = i.end_s.value_or(0);
    const double x0 = L + (W - L - R) * b / span, x1 = L + (W - L - R) * e / span;
    s << fmt::format(R"(<rect class="span" x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{}" fill="{}"><title>{} ({}): {} .. {}</title></rect>)",
                     x0, T + row * r + 3, std::max(1.0, x1 - x0), row - 6, category_color(i.cat), esc(i.name), esc(i.cat),
                     human_seconds(b), human_seconds(e));
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

std::string environment_text(const Environment& e) {
  std::string s = fmt::format("host {}\ncpu {} ({} threads)\noneDNN {}\n", e.host, e.cpu_model, e.cpu_threads, e.onednn);
  s += fmt::format("CUDA {} (driver {}, cuDNN {}, NCCL {})\n", e.cuda.value_or("-"), e.driver.value_or("-"),
                   e.cudnn.value_or("-"), e.nccl.value_or("-"));
  for (const auto& g : e.gpus) s += fmt::format("gpu {}: {} ({} bytes, sm {}, {})\n", g.index, g.name, g.memory_bytes,
                                                g.compute_capability, g.pci_bus_id);
  return s;
}

}  // namespace

std::string render_html(const RunReport& report, const RunReport* prediction) {
  const auto points = report_points(report);
  std::vector<Point> predicted;
  if (prediction) {
    DPB_CHECK(prediction->runs.empty() && prediction->sweep)
        << "--predicted takes a dpbench --simulate report (predicted sweep points, no runs)";
    predicted = report_points(*prediction);
  }
  const auto& cfg = report.config;
  std::ostringstream h;
  const std::string title = fmt::format("dpbench: {} {} on {}", parallel_mode_name(cfg.mode), cfg.model,
                                        cfg.devices == DeviceKind::cuda ? "cuda" : "cpu");
  h << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" << esc(title) << "</title>\n";
  h << "<style>body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:980px}"
       "h1{font-size:22px}h2{font-size:17px;margin-top:28px}table{border-collapse:collapse;font-size:13px}"
       "td,th{border:1px solid #ddd;padding:4px 8px;text-align:right}th{background:#f4f4f4}"
       "td:first-child,th:first-child{text-align:left}.sev-error{color:#c00}.sev-warning{color:#b60}"
       "code{background:#f4f4f4;padding:1px 4px}</style></head><body>\n";
  h << "<h1>" << esc(title) << "</h1>\n";
  if (!report.command.empty()) {
    std::string cmd;
    for (const auto& a : report.command) cmd += (cmd.empty() ? "" : " ") + a;
    h << "<p><code>" << esc(cmd) << "</code></p>\n";
  }
  h << "<table><tr><th>devices</th><th>global batch</th><th>samples/s</th><th>step median</th><th>p90</th>"
       "<th>E(N)</th><th>overlap</th><th>data wait</th><th>repeats</th></tr>\n";
  for (const auto& p : points)
    h << fmt::format("<tr><td>{}</td><td>{}</td><td>{:.1f}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                     p.world, p.global_batch, p.throughput, human_seconds(p.step_median_s), human_seconds(p.step_p90_s),
                     p.efficiency ? fmt::format("{:.3f}", *p.efficiency) : "-", percent(p.overlap),
                     percent(p.data_wait_share), p.repeats);
  h << "</table>\n";
  h << "<h2>Scaling</h2>\n" << scaling_chart(points, predicted) << "\n";
  if (points.size() < 2 && predicted.empty())
    h << "<p>One device count: run <code>--gpus=1,2,4</code> for a scaling curve.</p>\n";
  if (report.runs.empty()) {
    h << "<p>A prediction (<code>dpbench --simulate</code>): nothing ran, so there are no device, step or timeline "
         "charts.</p>\n</body></html>\n";
    return h.str();
  }
  const auto& last = report.runs.back();
  const std::string source = last.timeline ? trace::timeline_source_name(last.timeline->source) : "host";
  h << "<h2>Busy devices (" << last.world_size << " device(s), measured steps; " << esc(source) << " times)</h2>\n"
    << busy_chart(last) << "\n";
  h << "<h2>Step times</h2>\n" << steps_chart(last) << "\n";
  if (last.timeline) h << "<h2>Timeline of the last measured step</h2>\n" << timeline_chart(*last.timeline, cfg) << "\n";
  h << "<h2>Findings</h2>\n";
  if (report.diagnosis) h << diagnosis_html(*report.diagnosis);
  else if (report.findings.empty())
    h << "<p>None recorded (<code>dpdoctor REPORT.json</code> diagnoses this report).</p>\n";
  for (const auto& f : report.findings) {
    const std::string sev = severity_name(f.severity);
    h << "<div class=\"finding\"><p class=\"sev-" << esc(sev) << "\"><b>" << esc(sev) << ": " << esc(f.title) << "</b> ["
      << esc(f.id) << "]</p><p>" << esc(f.explanation) << "</p><p><b>fix:</b> " << esc(f.fix) << "</p>";
    if (f.predicted && !f.predicted->summary().empty()) h << "<p><b>worth:</b> " << esc(f.predicted->summary()) << "</p>";
    if (f.proof) h << "<p class=\"proof\"><b>proved:</b> " << esc(f.proof->summary()) << "</p>";
    h << "</div>\n";
  }
  h << "<h2>Environment</h2>\n<pre>" << esc(environment_text(report.env)) << "</pre>\n";
  h << "</body></html>\n";
  return h.str();
}

}  // namespace dpb::reports
