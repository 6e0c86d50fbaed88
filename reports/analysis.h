#pragma once
// What dpreport does with dpbench reports: a summary, a comparison that gates CI on
// regressions, the github-action-benchmark export (and the HTML page, render_html.h).
//
// A report's measured points: one per device count (a --gpus sweep has several), with
// the median over --repeat repetitions. Comparisons match points by mode, model and
// device count.
#include <nlohmann/json.hpp>

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "reports/model.h"

namespace dpb::reports {

struct Point {
  std::string key;  // "ddp lenet x2"
  std::string mode, model;
  int world = 1;
  int64_t global_batch = 0;
  double throughput = 0;  // samples/s (median over repetitions)
  Num step_median_s, step_p90_s;  // medians over repetitions
  Num efficiency;                 // scaling efficiency
  Num overlap;                    // ddp overlap ratio
  Num data_wait_share, mfu;
  Num bubble;                     // mp measured bubble
  int repeats = 0;
  bool predicted = false;         // dpbench --simulate: a prediction, nothing ran
};

// The report's points, in increasing device count: its runs, or for a prediction
// (dpbench --simulate, no runs) its predicted sweep points.
std::vector<Point> report_points(const RunReport& report);

// Human summary (`dpreport show`).
void show_report(const RunReport& report, std::ostream& out);

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
Comparison compare_reports(const RunReport& base, const RunReport& now, double max_regress);
void print_comparison(const Comparison& c, double max_regress, std::ostream& out);

// [{name, unit, value}] for github-action-benchmark: "bigger" (customBiggerIsBetter:
// throughput, scaling efficiency) or "smaller" (customSmallerIsBetter: step times).
nlohmann::json github_benchmark(const RunReport& report, bool bigger_is_better);

// Shared by the summaries: "12.34 ms", "-" for a figure not measured.
std::string human_seconds(const Num& s);
std::string percent(const Num& v);

}  // namespace dpb::reports
