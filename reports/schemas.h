#pragma once
// The JSON Schemas of reports/schema/, built into the binaries: readers check every
// document against its schema before reading it, wherever the binary runs.
#include <nlohmann/json.hpp>

#include <string>

namespace dpb::reports {

const nlohmann::json& report_schema();       // dpbench.report/1
const nlohmann::json& collectives_schema();  // dpbench.collectives/1
const nlohmann::json& findings_schema();     // dpdoctor.findings/1
const nlohmann::json& jobs_schema();         // dpdoctor.jobs/1

// Throws dpb::Error naming `document` and the first violations when `j` does not fit.
void check_schema(const nlohmann::json& schema, const nlohmann::json& j, const std::string& document);

}  // namespace dpb::reports
