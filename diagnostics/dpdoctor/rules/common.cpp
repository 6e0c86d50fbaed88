#include <algorithm>
#include <cmath>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

nlohmann::json device_table(const Evidence& e) {
  nlohmann::json t = nlohmann::json::array();
  for (const auto& d : e.device)
    t.push_back({{"id", d.id}, {"busy", std::round(d.busy * 1000) / 1000}, {"samples", d.samples}});
  return t;
}

double mean_busy_except_first(const Evidence& e) {
  if (e.device.size() < 2) return 0;
  double s = 0;
  for (size_t i = 1; i < e.device.size(); ++i) s += e.device[i].busy;
  return s / static_cast<double>(e.device.size() - 1);
}

std::optional<SlowestRank> slowest_rank(const Evidence& e) {
  if (e.ranks.size() < 2) return std::nullopt;
  const auto slow = std::max_element(e.ranks.begin(), e.ranks.end(), [](const RankEvidence& a, const RankEvidence& b) {
    return a.compute_s < b.compute_s;
  });
  std::vector<double> others;
  for (const auto& r : e.ranks)
    if (r.rank != slow->rank) others.push_back(r.compute_s);
  std::sort(others.begin(), others.end());
  SlowestRank s;
  s.rank = slow->rank;
  s.compute_s = slow->compute_s;
  s.typical_compute_s = others[others.size() / 2];
  s.significant = s.typical_compute_s > 0 && s.compute_s >= 2 * s.typical_compute_s &&
                  s.compute_s - s.typical_compute_s >= 0.25 * e.step_s;
  return s;
}

}  // namespace dpb::doctor::check
