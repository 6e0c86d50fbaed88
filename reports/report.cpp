#include "reports/report.h"

#include <cmath>

#include "dpb/version.h"
#include "engine/core/file_io.h"
#include "reports/environment.h"

namespace dpb::reports {

nlohmann::json number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

nlohmann::json summary_json(const Summary& s) {
  return {{"median", number(s.median)}, {"p10", number(s.p10)},       {"p90", number(s.p90)},
          {"mean", number(s.mean)},     {"stddev", number(s.stddev)}, {"cv", number(s.cv)},
          {"min", number(s.min)},       {"max", number(s.max)},       {"count", s.count},
          {"outliers", s.outliers}};
}

nlohmann::json report_header(const std::vector<std::string>& argv) {
  nlohmann::json h;
  h["schema"] = kReportSchema;
  h["tool"] = {{"name", "dpbench"}, {"version", kVersion}, {"git", kGitCommit}};
  h["command"] = argv;
  h["env"] = collect_environment();
  return h;
}

void write_report(const std::string& path, const nlohmann::json& report) {
  write_file_atomic(path, report.dump(2) + "\n");
}

}  // namespace dpb::reports
