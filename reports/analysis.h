#pragma once
// What dpreport does with dpbench reports: a summary, a comparison that gates CI on
// regressions, the github-action-benchmark export, and a self-contained HTML page.
//
// A report's measured points: one per device count (a --gpus sweep has several), with
// the median over --repeat repetitions. Comparisons match points by mode, model and
// device count.
#include <nlohmann/json.hpp>

#include <ostream>
#include <string>
#include <vector>

namespace dpb::reports {

struct Point {
  std::string key;  // "ddp lenet x2"
  std::string mode, model;
  int world = 1;
  int64_t global_batch = 0;
  double throughput = 0;       // samples/s (median over repetitions)
  double step_median_s = 0;    // (median over repetitions)
  double step_p90_s = 0;
  double efficiency = -1;      // scaling efficiency, -1: not measured
  double overlap = -1;         // ddp overlap ratio
  double data_wait_share = -1;
  double mfu = -1;
  double bubble = -1;          // mp measured bubble
  int repeats = 0;
};

// The report's points, in increasing device count. Throws dpb::Error for a document that
// is not a dpbench report.
std::vector<Point> report_points(const nlohmann::json& report);

// Human summary (`dpreport show`).
void show_report(const nlohmann::json& report, std::ostream& out);

struct Change {
  std::string point, metric, unit;
  double base = 0, now = 0;
  double change = 0;         // relative, signed: positive = better
  bool gated = false;        // counts for the verdict
  bool regression = false;   // gated and worse than the threshold
};

struct Comparison {
  std::vector<Change> changes;
  std::vector<std::string> notes;     // configuration differences, unmatched points
  bool regression = false;
};

// `max_regress`: the largest allowed loss as a fraction (0.05 = 5%) of throughput, step
// time (median) and scaling efficiency; other metrics are shown, not gated.
Comparison compare_reports(const nlohmann::json& base, const nlohmann::json& now, double max_regress);
void print_comparison(const Comparison& c, double max_regress, std::ostream& out);

// [{name, unit, value}] for github-action-benchmark: "bigger" (customBiggerIsBetter:
// throughput, scaling efficiency) or "smaller" (customSmallerIsBetter: step times).
nlohmann::json github_benchmark(const nlohmann::json& report, bool bigger_is_better);

// One self-contained HTML page (inline SVG, no scripts fetched): the scaling curve
// against ideal, per-device busy bars, the step-time distribution, a timeline excerpt of
// the last measured step, and the findings.
std::string render_html(const nlohmann::json& report);

}  // namespace dpb::reports
