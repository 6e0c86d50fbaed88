// One ddp rank computes slower than the others; every all-reduce waits for it.
#include <fmt/format.h>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

std::optional<Finding> straggler_rank(const Evidence& e) {
  const auto slow = slowest_rank(e);
  if (!slow || !slow->significant) return std::nullopt;
  const double typical = slow->typical_compute_s;
  Finding f;
  f.severity = Severity::warning;
  f.title = fmt::format("rank {} is a straggler: {:.1f} ms of compute per step against {:.1f} ms on the others",
                        slow->rank, slow->compute_s * 1e3, typical * 1e3);
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& r : e.ranks)
    ranks.push_back({{"rank", r.rank}, {"device", r.device}, {"compute_s", r.compute_s}, {"comm_s", r.comm_s}});
  f.evidence = {{"slow_rank", slow->rank}, {"typical_compute_s", typical}, {"step_time_s", e.step_s}, {"ranks", ranks}};
  f.explanation = fmt::format(
      "Every all-reduce completes only when all ranks contribute, so the other ranks spend the difference (about "
      "{:.1f} ms a step) waiting in communication: their comm time is long because rank {}'s compute is.",
      (slow->compute_s - typical) * 1e3, slow->rank);
  f.fix = fmt::format("find what slows rank {}'s device (thermal or power throttling, another process on it, a "
                      "slower or shared device, uneven data); nvidia-smi / top on its node",
                      slow->rank);
  return f;
}

}  // namespace dpb::doctor::check
