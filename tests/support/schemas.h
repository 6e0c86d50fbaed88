#pragma once
// Every document a test produces must fit its schema (the ones built into the tools).
#include <nlohmann/json.hpp>

#include <string>

namespace dpb::test {

// ADD_FAILUREs for every violation of `schema`, naming `what`.
void expect_fits(const nlohmann::json& schema, const nlohmann::json& doc, const std::string& what);
// The report at `path`, parsed and checked against dpbench.report/1.
nlohmann::json checked_report(const std::string& path);

}  // namespace dpb::test
