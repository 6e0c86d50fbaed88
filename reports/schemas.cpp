#include "reports/schemas.h"

#include "dpb/schemas.h"
#include "engine/core/error.h"
#include "reports/schema_check.h"

namespace dpb::reports {

const nlohmann::json& report_schema() {
  static const nlohmann::json s = nlohmann::json::parse(generated::kReportSchemaText);
  return s;
}

const nlohmann::json& collectives_schema() {
  static const nlohmann::json s = nlohmann::json::parse(generated::kCollectivesSchemaText);
  return s;
}

const nlohmann::json& findings_schema() {
  static const nlohmann::json s = nlohmann::json::parse(generated::kFindingsSchemaText);
  return s;
}

const nlohmann::json& jobs_schema() {
  static const nlohmann::json s = nlohmann::json::parse(generated::kJobsSchemaText);
  return s;
}

void check_schema(const nlohmann::json& schema, const nlohmann::json& j, const std::string& document) {
  const auto violations = schema_violations(schema, j);
  if (violations.empty()) return;
  std::string text;
  for (size_t i = 0; i < violations.size() && i < 3; ++i) text += (i ? "; " : "") + violations[i];
  if (violations.size() > 3) text += "; and " + std::to_string(violations.size() - 3) + " more";
  DPB_FAIL() << document << " does not fit its schema " << schema.value("$id", std::string("?")) << ": " << text;
}

}  // namespace dpb::reports
