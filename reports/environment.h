#pragma once
// The allow-listed description of the machine a report was produced on: host, CPU,
// GPUs, driver and library versions. Never the whole process environment.
#include <nlohmann/json.hpp>

namespace dpb::reports {

nlohmann::json collect_environment();

}  // namespace dpb::reports
