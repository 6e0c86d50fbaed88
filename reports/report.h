#pragma once
// The dpbench report (schema "dpbench.report/1", reports/schema/): building blocks
// for its JSON and the atomic writer. Numbers that are not finite become null, so
// every report is valid JSON that dashboards can ingest.
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "engine/core/stats.h"

namespace dpb::reports {

inline constexpr const char* kReportSchema = "dpbench.report/1";

// A finite number, or null.
nlohmann::json number(double v);
// {median, p10, p90, mean, stddev, cv, min, max, count, outliers}
nlohmann::json summary_json(const Summary& s);

// schema, tool{name, version, git}, command, env: the part of a report that
// describes how and where it was produced.
nlohmann::json report_header(const std::vector<std::string>& argv);

// Writes the report atomically (temp file, fsync, rename). Throws dpb::Error naming
// the path on failure; the previous file, if any, is left intact.
void write_report(const std::string& path, const nlohmann::json& report);

}  // namespace dpb::reports
