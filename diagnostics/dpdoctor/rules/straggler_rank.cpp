// One ddp rank holds the others back, every step: every all-reduce completes only when
// all ranks contribute. Either its device computes longer (a slow, throttled or shared
// device), or its device computes as long but idles waiting for its host (a slow loader,
// a busy host, a host-side sleep): the fixes differ, so the finding says which.
#include <fmt/format.h>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

std::optional<Finding> straggler_rank(const Evidence& e) {
  const auto slow = slowest_rank(e);
  if (!slow || !slow->significant) return std::nullopt;
  const bool device = slow->kind == SlowestRank::slow_device;
  Finding f;
  f.severity = Severity::warning;
  const double pct = slow->typical_s > 0 ? 100 * (slow->seconds / slow->typical_s - 1) : 100.0;
  f.title = device ? fmt::format("rank {} is a straggler: its device computes {:.1f} ms per step against {:.1f} ms on "
                                 "the others ({:.0f}% longer)",
                                 slow->rank, slow->seconds * 1e3, slow->typical_s * 1e3, pct)
                   : fmt::format("rank {} is a host-side straggler: its GPU idles {:.1f} ms per step waiting for its "
                                 "host, against {:.1f} ms on the others",
                                 slow->rank, slow->seconds * 1e3, slow->typical_s * 1e3);
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& r : e.ranks) {
    nlohmann::json row = {{"rank", r.rank}, {"device", r.device}, {"compute_s", r.compute_s}, {"comm_s", r.comm_s}};
    for (const auto& t : e.timelines)
      if (t.rank == r.rank && t.host_wait_per_step_s) row["host_wait_s"] = *t.host_wait_per_step_s;
    ranks.push_back(row);
  }
  f.evidence = {{"slow_rank", slow->rank},
                {"kind", device ? "slow device" : "host side"},
                {"typical_s", slow->typical_s},
                {"step_time_s", e.step_s},
                {"time_source", trace::timeline_source_name(e.timeline_source)},
                {"ranks", ranks}};
  f.explanation = fmt::format(
      "Every all-reduce completes only when all ranks contribute, so the other ranks spend about {:.1f} ms a step "
      "waiting in communication for rank {}: their communication is long because rank {}'s {}.",
      (slow->seconds - slow->typical_s) * 1e3, slow->rank, slow->rank,
      device ? "device computes longer" : "device waits for its host");
  f.fix = device ? fmt::format("find what slows rank {}'s device (thermal or power throttling, another process on it, a "
                               "slower or shared device, uneven data); nvidia-smi / top on its node",
                               slow->rank)
                 : fmt::format("find what keeps rank {}'s host from feeding its GPU (its data loader, CPU contention, "
                               "host-side work in the step); more loader workers, pinned memory, fewer host syncs",
                               slow->rank);
  return f;
}

}  // namespace dpb::doctor::check
