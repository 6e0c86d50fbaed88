#include "tests/support/schemas.h"

#include <gtest/gtest.h>

#include "reports/schema_check.h"
#include "reports/schemas.h"
#include "tests/support/process.h"

namespace dpb::test {

void expect_fits(const nlohmann::json& schema, const nlohmann::json& doc, const std::string& what) {
  for (const auto& v : reports::schema_violations(schema, doc)) ADD_FAILURE() << what << " violates its schema at " << v;
}

nlohmann::json checked_report(const std::string& path) {
  const auto rep = nlohmann::json::parse(slurp(path));
  expect_fits(reports::report_schema(), rep, path);
  return rep;
}

}  // namespace dpb::test
