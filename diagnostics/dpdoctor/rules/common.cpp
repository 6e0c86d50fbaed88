#include <algorithm>
#include <cmath>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

namespace {

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

double round3(double v) { return std::round(v * 1000) / 1000; }

// The rank holding the others back by `values` (per rank: its per-step series), against
// the others' median. Where every rank has the same steps, they are compared step by
// step: a machine's noise slows every rank in the same step and cancels out, while a
// straggler is slower in most steps. `significant`: 15% above the others in at least
// three quarters of the steps (or at the median, without step series), and at least 10%
// of the step in the median.
SlowestRank slowest(const std::vector<std::pair<int, std::vector<double>>>& values, double step_s,
                    SlowestRank::Kind kind) {
  std::vector<std::pair<int, double>> medians;
  for (const auto& [rank, v] : values) medians.emplace_back(rank, median_of(v));
  const auto top = std::max_element(medians.begin(), medians.end(),
                                    [](const auto& a, const auto& b) { return a.second < b.second; });
  std::vector<double> others;
  for (const auto& [rank, v] : medians)
    if (rank != top->first) others.push_back(v);
  SlowestRank s;
  s.kind = kind;
  s.rank = top->first;
  s.seconds = top->second;
  s.typical_s = median_of(others);
  const double gap = s.seconds - s.typical_s;
  bool consistent = s.seconds >= 1.15 * s.typical_s;
  size_t steps = values.front().second.size();
  for (const auto& [rank, v] : values) steps = std::min(steps, v.size());
  if (steps >= 3) {
    const auto& mine = values[static_cast<size_t>(top - medians.begin())].second;
    size_t slower = 0;
    for (size_t k = 0; k < steps; ++k) {
      std::vector<double> peers;
      for (const auto& [rank, v] : values)
        if (rank != s.rank) peers.push_back(v[k]);
      const double typical = median_of(peers);
      slower += mine[k] >= 1.15 * typical && mine[k] - typical >= 0.05 * step_s;
    }
    consistent = 4 * slower >= 3 * steps;
  }
  s.significant = consistent && step_s > 0 && gap >= 0.10 * step_s;
  return s;
}

}  // namespace

nlohmann::json device_table(const Evidence& e) {
  nlohmann::json t = nlohmann::json::array();
  for (const auto& d : e.device) {
    nlohmann::json row = {{"id", d.id}, {"busy", std::round(d.busy * 1000) / 1000}};
    if (e.samples_known) row["samples"] = d.samples;
    t.push_back(row);
  }
  return t;
}

double mean_busy_except_first(const Evidence& e) {
  if (e.device.size() < 2) return 0;
  double s = 0;
  for (size_t i = 1; i < e.device.size(); ++i) s += e.device[i].busy;
  return s / static_cast<double>(e.device.size() - 1);
}

nlohmann::json figure(const std::optional<double>& v) { return v ? nlohmann::json(round3(*v)) : nlohmann::json(nullptr); }

nlohmann::json breakdown_table(const Evidence& e) {
  nlohmann::json t = nlohmann::json::array();
  for (const auto& b : e.breakdown) {
    nlohmann::json row = {{"device", b.device},
                          {"idle", figure(b.idle_share)},
                          {"compute", figure(b.compute_share)},
                          {"comm", figure(b.comm_share)},
                          {"memory", figure(b.memory_share)}};
    if (b.rank) row["rank"] = *b.rank;
    t.push_back(row);
  }
  return t;
}

std::optional<SlowestRank> slowest_rank(const Evidence& e) {
  if (e.ranks.size() < 2) return std::nullopt;
  // Per-step series where every rank has them, else each rank's median alone.
  const bool series = std::all_of(e.ranks.begin(), e.ranks.end(), [](const RankEvidence& r) {
    return !r.compute_steps_s.empty();
  });
  std::vector<std::pair<int, std::vector<double>>> compute;
  for (const auto& r : e.ranks)
    compute.emplace_back(r.rank, series ? r.compute_steps_s : std::vector<double>{r.compute_s});
  const SlowestRank device = slowest(compute, e.step_s, SlowestRank::slow_device);
  if (device.significant) return device;
  // The host side: a rank whose device waits longer for its host than the others' do.
  const bool host = std::all_of(e.ranks.begin(), e.ranks.end(), [](const RankEvidence& r) {
    return !r.host_wait_steps_s.empty();
  });
  if (host) {
    std::vector<std::pair<int, std::vector<double>>> waits;
    for (const auto& r : e.ranks) waits.emplace_back(r.rank, r.host_wait_steps_s);
    const SlowestRank h = slowest(waits, e.step_s, SlowestRank::host_side);
    if (h.significant) return h;
  }
  return device;
}

}  // namespace dpb::doctor::check
