#pragma once
// Writing reports: every JSON document dpbench, dpdoctor and dpreport produce goes to
// disk atomically (temp file, fsync, rename), so a reader sees the previous file or the
// whole new one, never half of it.
#include <nlohmann/json.hpp>

#include <string>

namespace dpb::reports {

// Throws dpb::Error naming the path on failure; the previous file, if any, is intact.
void write_report(const std::string& path, const nlohmann::json& report);

}  // namespace dpb::reports
