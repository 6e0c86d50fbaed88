#include "diagnostics/dpdoctor/pricing.h"

#include <algorithm>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor {

namespace {

// A figure to 4 significant digits, as the rules write theirs.
double rounded(double v) { return check::figure(v).get<double>(); }

// The measured step of the rank (device) a budget row is: its timeline's median step
// (profiler traces), else the run's.
std::optional<double> step_of(const Evidence& e, const reports::RankBudget& b) {
  for (const auto& t : e.timelines)
    if (t.rank == b.rank && t.device == b.device) {
      if (t.full_step_s) return t.full_step_s;
      if (t.step_s) return t.step_s;
    }
  if (e.step_s > 0) return e.step_s;
  return std::nullopt;
}

// Causes that only several ranks pay: the one-rank run of a sweep did not, so removing
// them leaves its step as it was.
bool multi_rank_cost(const std::string& id) {
  return id == "exposed-communication" || id == "straggler-rank" || id == "exposed-allgather" ||
         id == "ranks-share-device" || id == "tp-across-slow-link";
}

// A sweep's largest run: E(N) with each multi-rank cause removed, the one-rank step
// unchanged: E x measured / predicted step, at most 1.
void price_scaling(const Evidence& e, reports::DiagnosisReport& d) {
  if (!e.scaling_efficiency) return;
  const double E = *e.scaling_efficiency;
  for (auto& f : d.findings) {
    if (!f.predicted || !f.predicted->step_time_s || !f.predicted->measured_step_time_s ||
        *f.predicted->step_time_s <= 0 || !multi_rank_cost(f.id))
      continue;
    // E(N) = T1 / TN at a fixed per-rank batch: TN moves, T1 stays; at most 1.
    f.predicted->scaling_efficiency =
        rounded(std::min(1.0, E * *f.predicted->measured_step_time_s / *f.predicted->step_time_s));
    f.predicted->inputs["scaling_efficiency"] = rounded(E);
  }
}

}  // namespace

void price_findings(const Evidence& e, reports::DiagnosisReport& d) {
  for (auto& f : d.findings) {
    if (f.predicted) continue;
    reports::Prediction p;
    p.method =
        "share removed: the share of the rank's window this finding explains taken off its measured step (an "
        "upper bound: nothing that waited on that time is moved up, nothing else fills it)";
    // The rank it costs the most.
    const reports::RankBudget* worst = nullptr;
    double most = 0;
    for (const auto& b : d.budget)
      for (const auto& [id, share] : b.explained)
        if (id == f.id && share > most) {
          most = share;
          worst = &b;
        }
    // A finding outside the budget (unexplained-idle: what the budget left) by its claims.
    if (!worst)
      for (const auto& c : f.explains)
        for (const auto& b : d.budget)
          if ((c.rank && b.rank ? *c.rank == *b.rank : c.device == b.device) && c.share > most) {
            most = c.share;
            worst = &b;
          }
    if (!worst) {
      p.reason = f.explains.empty() ? "advice on the configuration: it accounts for no measured time"
                                    : "the time it explains is counted under other findings in the budget";
      f.predicted = std::move(p);
      continue;
    }
    const auto step = step_of(e, *worst);
    if (!step) {
      p.reason = "no measured step to take it from";
      f.predicted = std::move(p);
      continue;
    }
    p.measured_step_time_s = rounded(*step);
    p.step_time_s = rounded(*step * (1 - most));
    p.gain_share = rounded(most);
    p.inputs = {{"device", worst->rank ? "rank " + std::to_string(*worst->rank) + " (" + worst->device + ")"
                                       : worst->device},
                {"explained_share", rounded(most)},
                {"window", worst->window}};
    f.predicted = std::move(p);
  }
  price_scaling(e, d);
}

}  // namespace dpb::doctor
