#pragma once
// Checks a JSON document against a JSON Schema, for the keywords dpbench's schemas
// use: type (one or a list), enum, required, properties, additionalProperties (a schema),
// items, minItems, minimum, maximum. Other keywords are ignored. Each violation names its JSON pointer.
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace dpb::reports {

std::vector<std::string> schema_violations(const nlohmann::json& schema, const nlohmann::json& document);

}  // namespace dpb::reports
