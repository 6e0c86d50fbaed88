// Where a sweep's lost efficiency went: 1 - E(N) at its largest point, split per rank
// into compute that ran slower than in the one-rank run, waiting for the slower rank,
// exposed communication, and idle time (evidence.h, SweepBudget), each part against the
// one-rank figure it is measured from. A warning under E(N) < 0.85 (the line the verdict
// keeps), advice from 5 points lost: it says where the time went, so no "nothing explains
// it" stands beside it. It claims no share of a window: the per-rank findings
// (exposed-communication, straggler-rank, input-bound) claim theirs.
#include <fmt/format.h>

#include <algorithm>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

std::optional<Finding> scaling_efficiency(const Evidence& e) {
  if (!e.sweep_budget || e.sweep_budget->ranks.empty()) return std::nullopt;
  const auto& s = *e.sweep_budget;
  const double lost = 1 - s.efficiency;
  if (lost < 0.05) return std::nullopt;
  // The rank whose parts say the most (the largest single part), and its parts, largest first.
  const SweepBudget::Rank* worst = &s.ranks.front();
  auto largest = [](const SweepBudget::Rank& r) {
    double m = 0;
    for (const auto& p : r.parts) m = std::max(m, p.share.value_or(0));
    return m;
  };
  for (const auto& r : s.ranks)
    if (largest(r) > largest(*worst)) worst = &r;
  auto parts = worst->parts;
  std::sort(parts.begin(), parts.end(),
            [](const auto& a, const auto& b) { return a.share.value_or(-1) > b.share.value_or(-1); });
  std::string said;
  for (const auto& p : parts)
    if (p.share && *p.share >= 0.005)
      said += fmt::format("{}{} {:.1f} points", said.empty() ? "" : ", ", p.cause, 100 * *p.share);
  Finding f;
  f.severity = s.efficiency < 0.85 ? Severity::warning : Severity::info;
  f.title = fmt::format("the sweep's scaling efficiency is {:.2f} at {} devices: of the {:.1f} points lost, rank {} "
                        "gives {}",
                        s.efficiency, s.world, 100 * lost, worst->rank, said.empty() ? "nothing measurable" : said);
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : s.ranks) {
    nlohmann::json row = {{"rank", r.rank}};
    for (const auto& p : r.parts) row[p.cause] = figure(p.share);
    row["residual"] = figure(r.residual);
    row["compute_per_step_s"] = figure(r.compute_s);
    row["one_rank_compute_per_step_s"] = figure(r.one_rank_compute_s);
    rows.push_back(row);
  }
  f.evidence = {{"scaling_efficiency", figure(s.efficiency)},
                {"devices", s.world},
                {"one_rank_step_s", figure(s.one_rank_step_s)},
                {"step_s", figure(s.step_s)},
                {"per_rank", rows},
                {"method", "each run's window shares (compute, exposed communication, idle, copies) applied to its median "
                           "step; the one-rank run's, scaled by E, taken away"},
                {"time_source", trace::timeline_source_name(e.timeline_source)}};
  f.explanation = fmt::format(
      "A step takes {} on {} devices against {} on one, with the batch per device the same: E = {:.2f}. Rank {}'s "
      "extra time, as points of its step: {}; {:.1f} points are left that its measurements do not add up to. Compute "
      "slower than alone ({} a step against {} on one device) is the ranks slowing each other (shared cores, memory "
      "bandwidth, the communication thread) or run-to-run noise of the machine; waiting for the slower rank is a "
      "rank that reached the collective last; exposed communication is the transfer itself.",
      duration_text(s.step_s), s.world, duration_text(s.one_rank_step_s), s.efficiency, worst->rank,
      said.empty() ? "none" : said, 100 * worst->residual, duration_text(worst->compute_s),
      duration_text(worst->one_rank_compute_s));
  const auto& top = parts.front().cause;
  f.fix = top == "compute slower than alone"
              ? "give each rank its own cores and memory (--threads, fewer ranks per host, CPU pinning), keep the "
                "communication thread off the compute cores, and measure again: a few points move from run to run"
          : top == "waiting for the slower rank"
              ? "even out the ranks: the same work and data per rank, no other work on a rank's device or cores, the "
                "input ready before each step (straggler-rank says which rank when it is one)"
          : top == "idle" ? "see the findings on idle time (input-bound, the host): they name its cause"
                          : "hide or shrink the communication (exposed-communication says how)";
  return f;
}

}  // namespace dpb::doctor::check
