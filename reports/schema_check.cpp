#include "reports/schema_check.h"

#include "engine/core/text.h"

namespace dpb::reports {

namespace {

constexpr size_t kMaxViolations = 100;

// A value as a message shows it: untrusted strings escaped and cut, containers by type.
std::string shown(const nlohmann::json& v) {
  if (v.is_string()) return "\"" + escape_untrusted(v.get_ref<const std::string&>(), 60) + "\"";
  if (v.is_object()) return "an object";
  if (v.is_array()) return "an array";
  return v.dump();
}

bool has_type(const nlohmann::json& v, const std::string& type) {
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "string") return v.is_string();
  if (type == "integer") return v.is_number_integer();
  if (type == "number") return v.is_number();
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  return false;
}

void check(const nlohmann::json& s, const nlohmann::json& v, const std::string& at, std::vector<std::string>& out) {
  if (out.size() >= kMaxViolations) return;
  const std::string where = at.empty() ? "/" : at;
  if (s.contains("type")) {
    const auto& t = s["type"];
    bool ok = false;
    std::string expected;
    for (const auto& one : t.is_array() ? t : nlohmann::json::array({t})) {
      ok = ok || has_type(v, one.get<std::string>());
      expected += (expected.empty() ? "" : " or ") + one.get<std::string>();
    }
    if (!ok) {
      out.push_back(where + ": expected " + expected + ", found " + v.type_name());
      return;
    }
  }
  if (s.contains("enum")) {
    bool ok = false;
    for (const auto& e : s["enum"]) ok = ok || e == v;
    if (!ok) out.push_back(where + ": " + shown(v) + " is not one of " + s["enum"].dump());
  }
  if (s.contains("const") && s["const"] != v) out.push_back(where + ": " + shown(v) + " is not " + s["const"].dump());
  if (v.is_number()) {
    if (s.contains("minimum") && v.get<double>() < s["minimum"].get<double>())
      out.push_back(where + ": " + v.dump() + " is below the minimum " + s["minimum"].dump());
    if (s.contains("maximum") && v.get<double>() > s["maximum"].get<double>())
      out.push_back(where + ": " + v.dump() + " is above the maximum " + s["maximum"].dump());
  }
  if (v.is_object()) {
    if (s.contains("required"))
      for (const auto& r : s["required"])
        if (!v.contains(r.get<std::string>())) out.push_back(where + ": missing required field '" + r.get<std::string>() + "'");
    if (s.contains("properties"))
      for (auto it = s["properties"].begin(); it != s["properties"].end(); ++it)
        if (v.contains(it.key())) check(*it, v[it.key()], at + "/" + it.key(), out);
    if (s.contains("additionalProperties") && s["additionalProperties"].is_object())
      for (auto it = v.begin(); it != v.end(); ++it)
        if (!s.contains("properties") || !s["properties"].contains(it.key()))
          check(s["additionalProperties"], *it, at + "/" + it.key(), out);
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>())
      out.push_back(where + ": " + std::to_string(v.size()) + " items, at least " + s["minItems"].dump() + " required");
    if (s.contains("items"))
      for (size_t i = 0; i < v.size(); ++i) check(s["items"], v[i], at + "/" + std::to_string(i), out);
  }
}

}  // namespace

std::vector<std::string> schema_violations(const nlohmann::json& schema, const nlohmann::json& document) {
  std::vector<std::string> out;
  check(schema, document, "", out);
  return out;
}

}  // namespace dpb::reports
