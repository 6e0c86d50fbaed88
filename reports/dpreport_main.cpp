// dpreport: what to do with dpbench reports.
//   dpreport show REPORT
//   dpreport compare BASE NEW [--max-regress=5%]   exit 1 on a regression (a CI gate)
//   dpreport export REPORT --format=github-benchmark[-smaller] [-o FILE]
//   dpreport html REPORT -o FILE.html
#include <CLI/CLI.hpp>

#include <iostream>
#include <optional>

#include "engine/core/error.h"
#include "engine/core/file_io.h"
#include "engine/core/text.h"
#include "reports/analysis.h"
#include "reports/render_html.h"
#include "reports/report.h"

namespace {

dpb::reports::RunReport load(const std::string& path) { return dpb::reports::RunReport::read(path); }

// "5%", "5" (percent) or "0.05".
double parse_fraction(std::string text) {
  const bool percent = !text.empty() && text.back() == '%';
  if (percent) text.pop_back();
  double v = 0;
  try {
    size_t used = 0;
    v = std::stod(text, &used);
    DPB_CHECK(used == text.size()) << "";
  } catch (const std::exception&) {
    DPB_FAIL() << "--max-regress='" << dpb::escape_untrusted(text) << "': expected a percentage such as 5%";
  }
  DPB_CHECK(v >= 0) << "--max-regress must not be negative";
  return percent || v >= 1 ? v / 100 : v;
}

void write_text(const std::string& path, const std::string& text) {
  dpb::write_file_atomic(path, text);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dpreport: summaries, regression gates, dashboard exports and HTML pages from dpbench reports"};
  app.require_subcommand(1);
  std::string report, base, now, format = "github-benchmark", output, max_regress = "5%";
  auto* show = app.add_subcommand("show", "Summary of a report");
  show->add_option("REPORT", report, "dpbench report (--json)")->required();
  auto* cmp = app.add_subcommand("compare", "Compare two reports; exit 1 when a gated metric regressed");
  cmp->add_option("BASE", base, "The baseline report")->required();
  cmp->add_option("NEW", now, "The report to judge")->required();
  cmp->add_option("--max-regress", max_regress,
                  "Largest allowed loss of throughput, median step time or scaling efficiency (default 5%)");
  auto* exp = app.add_subcommand("export", "Dashboard formats");
  exp->add_option("REPORT", report, "dpbench report")->required();
  exp->add_option("--format", format,
                  "github-benchmark ([{name, unit, value}] for github-action-benchmark's customBiggerIsBetter: "
                  "throughput, scaling efficiency) or github-benchmark-smaller (customSmallerIsBetter: step times)")
      ->check(CLI::IsMember({"github-benchmark", "github-benchmark-smaller"}));
  exp->add_option("-o,--output", output, "Write to this file (default: standard output)");
  auto* html = app.add_subcommand("html", "One self-contained HTML page with SVG charts");
  html->add_option("REPORT", report, "dpbench report")->required();
  html->add_option("-o,--output", output, "The HTML file")->required();
  std::string predicted;
  html->add_option("--predicted", predicted,
                   "A dpbench --simulate report: its predicted points go on the scaling chart beside the measured ones");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (*show) {
      dpb::reports::show_report(load(report), std::cout);
    } else if (*cmp) {
      const double limit = parse_fraction(max_regress);
      const auto c = dpb::reports::compare_reports(load(base), load(now), limit);
      dpb::reports::print_comparison(c, limit, std::cout);
      return c.regression ? 1 : 0;
    } else if (*exp) {
      const auto j = dpb::reports::github_benchmark(load(report), format == "github-benchmark");
      if (output.empty()) std::cout << j.dump(2) << "\n";
      else dpb::reports::write_report(output, j);
    } else if (*html) {
      const auto measured = load(report);
      std::optional<dpb::reports::RunReport> prediction;
      if (!predicted.empty()) prediction = load(predicted);
      write_text(output, dpb::reports::render_html(measured, prediction ? &*prediction : nullptr));
      std::cerr << "dpreport: wrote " << output << "\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "dpreport: error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
