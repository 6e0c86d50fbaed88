#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

namespace {

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// `v` to four significant figures. strtod, not std::stod: a subnormal value parses back
// to itself with ERANGE set, which std::stod turns into an exception.
double significant4(double v) {
  if (v == 0 || !std::isfinite(v)) return v;
  const std::string text = fmt::format("{:.4g}", v);
  return std::strtod(text.c_str(), nullptr);
}

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

nlohmann::json figure(const std::optional<double>& v) {
  return v ? nlohmann::json(significant4(*v)) : nlohmann::json(nullptr);
}

Prediction scaled_step(const Evidence& e, double factor, std::string method, nlohmann::json inputs) {
  Prediction p;
  p.method = std::move(method);
  if (e.step_s <= 0) {
    p.reason = "the run measured no step";
    return p;
  }
  p.measured_step_time_s = figure(e.step_s).get<double>();
  p.step_time_s = figure(e.step_s * factor).get<double>();
  p.gain_share = figure(1 - factor).get<double>();
  p.inputs = std::move(inputs);
  return p;
}

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

std::vector<Claim> claim_all(const Evidence& e, double share) {
  std::vector<Claim> out;
  for (const auto& b : e.breakdown) out.push_back({b.rank, b.device, std::clamp(share, 0.0, 1.0)});
  return out;
}

Claim claim(const TimelineEvidence& t, double share) { return {t.rank, t.device, std::clamp(share, 0.0, 1.0)}; }

std::string duration_text(double s) {
  if (s >= 1) return fmt::format("{:.2f} s", s);
  if (s >= 1e-3) return fmt::format("{:.1f} ms", s * 1e3);
  return fmt::format("{:.1f} us", s * 1e6);
}

nlohmann::json calls_table(const std::vector<trace::NamedTime>& calls) {
  nlohmann::json t = nlohmann::json::array();
  for (const auto& c : calls)
    t.push_back({{"call", c.name}, {"count", c.count}, {"in_gaps_s", figure(c.ns * 1e-9)}, {"longest_s", figure(c.longest_ns * 1e-9)}});
  return t;
}

nlohmann::json ops_table(const std::vector<trace::NamedTime>& ops) {
  nlohmann::json t = nlohmann::json::array();
  for (const auto& o : ops) t.push_back({{"op", o.name}, {"idle_s", figure(o.ns * 1e-9)}, {"gaps", o.count}});
  return t;
}

std::string ops_text(const std::vector<trace::NamedTime>& ops, size_t most) {
  std::string s;
  for (size_t i = 0; i < ops.size() && i < most; ++i)
    s += fmt::format("{}{} {}", s.empty() ? "" : ", ", ops[i].name.substr(0, 80), duration_text(ops[i].ns * 1e-9));
  return s;
}

nlohmann::json gaps_table(const TimelineEvidence& t, bool cold) {
  nlohmann::json rows = nlohmann::json::array();
  const auto& c = t.idle;
  for (const auto& g : c.longest) {
    const bool in_cold = g.begin_ns < c.cold_start.second;
    if (in_cold != cold || g.end_ns - g.begin_ns < 1'000'000) continue;
    std::string host;
    for (const auto& k : g.calls)
      host += fmt::format("{}{} {}{}", host.empty() ? "" : ", ", k.name, duration_text(k.ns * 1e-9),
                          k.count > 1 ? fmt::format(" ({} calls)", k.count) : "");
    if (g.data_ns > 0) host += fmt::format("{}DataLoader __next__ {}", host.empty() ? "" : ", ", duration_text(g.data_ns * 1e-9));
    nlohmann::json row = {{"at_s", figure((g.begin_ns - c.cold_start.first) * 1e-9)},
                          {"length_s", figure((g.end_ns - g.begin_ns) * 1e-9)},
                          {"cause", trace::idle_cause_name(g.cause)},
                          {"ended_by", g.next.substr(0, 60)}};
    if (!g.call.empty()) row["launched_by"] = fmt::format("{} ({})", g.call, duration_text(g.call_ns * 1e-9));
    if (!g.op.empty()) row["in_op"] = g.op;
    row["host"] = host.empty() ? "nothing recorded" : host;
    rows.push_back(row);
  }
  return rows;
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

std::optional<SlowestRank> slowest_replica(const Evidence& e) {
  if (!e.has_dp || e.replica_s.size() < 2 || e.replica_s.size() != e.device.size()) return std::nullopt;
  std::vector<std::pair<int, std::vector<double>>> compute;
  for (size_t d = 0; d < e.replica_s.size(); ++d) compute.emplace_back(static_cast<int>(d), std::vector<double>{e.replica_s[d]});
  return slowest(compute, e.step_s, SlowestRank::slow_device);
}

std::optional<LateArrivals> late_arrivals(const Evidence& e) {
  if (!e.cross || !e.cross->clocks_agree || e.cross->collectives == 0) return std::nullopt;
  LateArrivals l;
  for (const auto& t : e.timelines)
    if (t.wait_exposed_s && t.window_s() > 0) l.worst_wait_share = std::max(l.worst_wait_share, *t.wait_exposed_s / t.window_s());
  l.significant = l.worst_wait_share >= 0.10;
  return l;
}

}  // namespace dpb::doctor::check
