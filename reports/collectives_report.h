#pragma once
// The collectives report (schema "dpbench.collectives/1", dpbench --bench=collectives
// --json): nccl-tests' columns for each collective and size, and how they were measured.
// Read back as a link model by the simulator (--link), so from_json checks the schema
// and every field's bounds like the run report does.
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "reports/model.h"

namespace dpb::reports {

inline constexpr const char* kCollectivesSchema = "dpbench.collectives/1";

struct CollectiveRow {
  std::string op;  // allreduce | allgather | reduce_scatter | broadcast
  int64_t bytes = 0, count = 0;
  std::string dtype = "float32";
  Num time_us, algbw_gbps, busbw_gbps;
  int64_t wrong = 0;
  // --load: how much slower the rank's compute thread ran while this size's timed
  // collectives did than just before, alone (0.25: 25 % slower); null without --load.
  Num load_slowdown;
  // --isolated: the median of one collective timed alone after a pause with the link idle
  // (the slowest rank's); null where not measured.
  Num isolated_us;
};

struct CollectivesConfig {
  std::string backend = "gloo";
  int world_size = 1;
  DeviceKind devices = DeviceKind::cpu;
  std::vector<std::string> ops;
  int64_t min_bytes = 8, max_bytes = 8, factor = 2;
  int warmup = 0, iters = 1;
  std::string launcher = "none";
  std::string load = "none";  // none | compute (--load)
  int isolated = 0;           // --isolated: collectives timed alone per size
  double isolated_pause_us = 0;
};

struct CollectivesReport {
  ToolInfo tool;
  std::vector<std::string> command;
  Environment env;
  CollectivesConfig config;
  std::vector<CollectiveRow> results;

  nlohmann::json to_json() const;
  static CollectivesReport from_json(const nlohmann::json& j, const std::string& document);
  static CollectivesReport read(const std::string& path);
};

}  // namespace dpb::reports
