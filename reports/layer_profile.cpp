#include "reports/layer_profile.h"

#include <algorithm>
#include <cmath>

#include "engine/core/error.h"
#include "engine/core/stats.h"
#include "reports/json_view.h"

namespace dpb::reports {

std::vector<RankLag> rank_lags(const std::vector<double>& steps) {
  std::vector<RankLag> out;
  const size_t n = steps.size();
  if (n < 4) return out;
  const double median = percentile(steps, 0.5);
  if (!(median > 0)) return out;
  for (int ranks = 2; ranks <= (1 << 20); ranks *= 2) {
    const double q = std::pow(0.5, 1.0 / ranks);
    if (1 / (1 - q) > static_cast<double>(n)) break;
    out.push_back({ranks, std::max(0.0, percentile(steps, q) / median - 1)});
  }
  return out;
}

double LayerProfile::compute_s() const {
  double s = 0;
  for (const auto& l : layers) s += l.forward_s + l.backward_s;
  return s;
}

int64_t LayerProfile::gradient_bytes() const {
  int64_t b = 0;
  for (const auto& l : layers)
    for (const auto& p : l.params) b += p.bytes;
  return b;
}

nlohmann::json LayerProfile::to_json() const {
  nlohmann::json layers_j = nlohmann::json::array();
  for (const auto& l : layers) {
    nlohmann::json params = nlohmann::json::array();
    for (const auto& p : l.params) {
      nlohmann::json q = {{"name", p.name}, {"bytes", p.bytes}};
      if (!p.fsdp_unit.empty()) q["fsdp_unit"] = p.fsdp_unit;
      params.push_back(std::move(q));
    }
    layers_j.push_back({{"name", l.name},
                        {"forward_s", l.forward_s},
                        {"backward_s", l.backward_s},
                        {"flops", l.flops},
                        {"output_bytes", l.output_bytes},
                        {"params", params}});
  }
  nlohmann::json lags = nlohmann::json::array();
  for (const auto& l : rank_lag) lags.push_back({{"ranks", l.ranks}, {"relative", l.relative}});
  return {{"model", model},
          {"batch_per_device", batch},
          {"source", source},
          {"evidence", evidence},
          {"optimizer_s", optimizer_s},
          {"other_s", other_s},
          {"step_cv", step_cv},
          {"rank_lag", lags},
          {"copy_bytes_per_s", copy_bytes_per_s ? nlohmann::json(*copy_bytes_per_s) : nlohmann::json(nullptr)},
          {"layers", layers_j}};
}

LayerProfile LayerProfile::from_json(const JsonView& v) {
  LayerProfile p;
  p.model = v.str("model", 128);
  p.batch = v.integer("batch_per_device", 1, int64_t{1} << 32);
  p.source = v.str("source", 64);
  p.evidence = v.maybe_str("evidence", 4096).value_or("");
  p.optimizer_s = v.number("optimizer_s", 0, 1e6);
  p.other_s = v.number("other_s", 0, 1e6);
  p.step_cv = v.maybe_number("step_cv", 0, 100).value_or(0);
  p.copy_bytes_per_s = v.maybe_number("copy_bytes_per_s", 1, 1e15);
  for (const auto& l : v.maybe_items("rank_lag", 64)) {
    RankLag lag{static_cast<int>(l.integer("ranks", 2, int64_t{1} << 20)), l.number("relative", 0, 100)};
    DPB_CHECK(p.rank_lag.empty() || lag.ranks > p.rank_lag.back().ranks)
        << l.where() << ": rank_lag's rank counts must increase, got " << lag.ranks << " after "
        << p.rank_lag.back().ranks;
    p.rank_lag.push_back(lag);
  }
  for (const auto& l : v.items("layers", 1 << 20)) {
    ProfiledLayer c;
    c.name = l.str("name", 1024);
    c.forward_s = l.number("forward_s", 0, 1e6);
    c.backward_s = l.number("backward_s", 0, 1e6);
    c.flops = l.number("flops", 0, 1e30);
    c.output_bytes = l.integer("output_bytes", 0, int64_t{1} << 50);
    for (const auto& q : l.items("params", 1 << 16))
      c.params.push_back(
          {q.str("name", 1024), q.integer("bytes", 0, int64_t{1} << 50), q.maybe_str("fsdp_unit", 1024).value_or("")});
    p.layers.push_back(std::move(c));
  }
  DPB_CHECK(!p.layers.empty()) << v.where() << ": the layer profile has no layers";
  return p;
}

}  // namespace dpb::reports
