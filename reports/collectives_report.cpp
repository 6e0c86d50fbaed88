#include "reports/collectives_report.h"

#include "engine/core/error.h"
#include "engine/core/text.h"
#include "reports/json_view.h"
#include "reports/model_json_util.h"
#include "reports/schemas.h"

namespace dpb::reports {

using namespace json_util;
using nlohmann::json;

json CollectivesReport::to_json() const {
  json rows = json::array();
  for (const auto& r : results)
    rows.push_back({{"op", r.op},
                    {"bytes", r.bytes},
                    {"count", r.count},
                    {"dtype", r.dtype},
                    {"time_us", num(r.time_us)},
                    {"algbw_gbps", num(r.algbw_gbps)},
                    {"busbw_gbps", num(r.busbw_gbps)},
                    {"wrong", r.wrong},
                    {"load_slowdown", num(r.load_slowdown)},
                    {"isolated_us", num(r.isolated_us)}});
  const auto& c = config;
  return {{"schema", kCollectivesSchema},
          {"tool", {{"name", tool.name}, {"version", tool.version}, {"git", tool.git}}},
          {"command", command},
          {"env", env_json(env)},
          {"config",
           {{"backend", c.backend},
            {"world_size", c.world_size},
            {"devices", c.devices == DeviceKind::cuda ? "cuda" : "cpu"},
            {"ops", c.ops},
            {"min_bytes", c.min_bytes},
            {"max_bytes", c.max_bytes},
            {"factor", c.factor},
            {"warmup", c.warmup},
            {"iters", c.iters},
            {"launcher", c.launcher},
            {"load", c.load},
            {"isolated", c.isolated},
            {"isolated_pause_us", c.isolated_pause_us}}},
          {"results", rows}};
}

CollectivesReport CollectivesReport::from_json(const json& j, const std::string& document) {
  if (!j.is_object() || !j.contains("schema") || j["schema"] != kCollectivesSchema)
    DPB_FAIL() << document << " is not a dpbench collectives report (expected \"schema\": \"" << kCollectivesSchema
               << "\"; write one with dpbench --bench=collectives --json=PATH)";
  check_schema(collectives_schema(), j, document);
  const JsonView root(j, document);
  CollectivesReport r;
  const JsonView tool = root.member("tool");
  r.tool = {tool.str("name", 64), tool.str("version", 64), tool.str("git", 64)};
  r.command = strings(root, "command", 1 << 16);
  if (root.member("env").has("host")) r.env = env_from(root.member("env"));
  const JsonView c = root.member("config");
  auto& cfg = r.config;
  cfg.backend = c.str("backend", 16);
  cfg.world_size = static_cast<int>(c.integer("world_size", 1, kMaxWorld));
  cfg.devices = c.choice<DeviceKind>("devices", {{"cpu", DeviceKind::cpu}, {"cuda", DeviceKind::cuda}});
  cfg.ops = strings(c, "ops", 16);
  cfg.min_bytes = c.integer("min_bytes", 1, kCount);
  cfg.max_bytes = c.integer("max_bytes", 1, kCount);
  cfg.factor = c.integer("factor", 2, 1 << 20);
  cfg.warmup = static_cast<int>(c.integer("warmup", 0, 1 << 20));
  cfg.iters = static_cast<int>(c.integer("iters", 1, 1 << 20));
  cfg.launcher = c.maybe_str("launcher", 32).value_or("none");
  cfg.load = c.has("load") ? c.choice<std::string>("load", {{"none", "none"}, {"compute", "compute"}}) : "none";
  cfg.isolated = c.has("isolated") ? static_cast<int>(c.integer("isolated", 0, 1 << 20)) : 0;
  cfg.isolated_pause_us = c.has("isolated_pause_us") ? c.number("isolated_pause_us", 0, 1e9) : 0.0;
  for (const auto& row : root.items("results", 1 << 20)) {
    CollectiveRow x;
    x.op = row.choice<std::string>("op", {{"allreduce", "allreduce"},
                                           {"allgather", "allgather"},
                                           {"reduce_scatter", "reduce_scatter"},
                                           {"broadcast", "broadcast"}});
    x.bytes = row.integer("bytes", 1, kCount);
    x.count = row.integer("count", 1, kCount);
    x.dtype = row.str("dtype", 32);
    x.time_us = row.maybe_number("time_us", 0, kBig);
    x.algbw_gbps = row.maybe_number("algbw_gbps", 0, kBig);
    x.busbw_gbps = row.maybe_number("busbw_gbps", 0, kBig);
    x.wrong = row.integer("wrong", 0, kCount);
    x.load_slowdown = row.maybe_number("load_slowdown", -1, kBig);
    x.isolated_us = row.has("isolated_us") ? row.maybe_number("isolated_us", 0, kBig) : Num();
    r.results.push_back(std::move(x));
  }
  return r;
}

CollectivesReport CollectivesReport::read(const std::string& path) {
  const json j = read_json_file(path, "collectives report", size_t{64} << 20);
  return from_json(j, "collectives report '" + escape_untrusted(path) + "'");
}

}  // namespace dpb::reports
