// Ranks hold the others back: every collective completes only when all ranks have
// reached it. On profiler traces whose ranks share a clock, the order in which the
// ranks start each collective is read directly: the late ones are named, with how long
// the others' collectives waited for them and why they are late (their step started
// later, or their device had more work before the collective). Elsewhere (dpbench runs,
// or clocks that disagree), the slowest rank by its per-step device compute, or by its
// device's wait for its host; the others' wait for it is then this finding's time. In
// DataParallel, the device whose replica computes longest.
#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

std::optional<Finding> late_ranks(const Evidence& e) {
  const auto late = late_arrivals(e);
  if (!late || !late->significant) return std::nullopt;
  const auto& x = *e.cross;
  const size_t n = e.timelines.size();
  if (x.last_starts.size() != n) return std::nullopt;
  auto rank_of = [&](size_t i) { return e.timelines[i].rank.value_or(static_cast<int>(i)); };
  // Late ranks, most waited for first.
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return x.made_others_wait_ns[a] > x.made_others_wait_ns[b]; });
  std::vector<size_t> culprits;
  for (size_t i : order)
    if (x.last_starts[i] > 0 && x.made_others_wait_ns[i] > 0) culprits.push_back(i);
  if (culprits.empty()) return std::nullopt;
  const size_t top = culprits.front();
  // The worst wait it caused, and the rank that waited most.
  int64_t longest = 0;
  for (const auto& a : x.arrivals)
    if (a.last == top) longest = std::max(longest, a.spread_ns);
  const auto most_waiting = std::max_element(e.timelines.begin(), e.timelines.end(), [](const auto& a, const auto& b) {
    return a.wait_exposed_s.value_or(0) / std::max(1e-12, a.window_s()) < b.wait_exposed_s.value_or(0) / std::max(1e-12, b.window_s());
  });
  // Why late: its step started later than the others' (median), or its device had more
  // compute between its step's start and the collective.
  std::vector<double> starts, computes;
  for (size_t i = 0; i < n; ++i)
    if (i != top) {
      starts.push_back(x.step_start_offset_ns[i] * 1e-9);
      computes.push_back(x.compute_before_first_ns[i] * 1e-9);
    }
  const double start_late = x.step_start_offset_ns[top] * 1e-9 - median(starts);
  const double extra_compute = x.compute_before_first_ns[top] * 1e-9 - median(computes);
  const bool starts_late = start_late >= extra_compute;
  std::string others;
  for (size_t k = 1; k < culprits.size() && k < 4; ++k) others += fmt::format("{}{}", k > 1 ? ", " : "", rank_of(culprits[k]));

  Finding f;
  f.severity = Severity::warning;
  f.title = fmt::format("rank {} reaches {} of {} collectives last{}: the others' collectives wait for it up to {} "
                        "({:.0f}% of {}'s window waiting in all)",
                        rank_of(top), x.last_starts[top], x.collectives,
                        others.empty() ? "" : fmt::format(" (then rank(s) {})", others), duration_text(longest * 1e-9),
                        100 * late->worst_wait_share, most_waiting->who());
  nlohmann::json ranks = nlohmann::json::array();
  for (size_t i = 0; i < n; ++i)
    ranks.push_back({{"rank", rank_of(i)},
                     {"last_at", x.last_starts[i]},
                     {"others_waited_s", figure(x.made_others_wait_ns[i] * 1e-9)},
                     {"waited_s", figure(e.timelines[i].wait_exposed_s)},
                     {"step_start_s", figure(x.step_start_offset_ns[i] * 1e-9)},
                     {"compute_before_first_collective_s", figure(x.compute_before_first_ns[i] * 1e-9)}});
  nlohmann::json arrivals = nlohmann::json::array();
  for (size_t k = 0; k < x.arrivals.size() && k < 16; ++k)
    arrivals.push_back({{"collective", k},
                        {"kernel", x.arrivals[k].name.substr(0, 48)},
                        {"last", rank_of(x.arrivals[k].last)},
                        {"spread_s", figure(x.arrivals[k].spread_ns * 1e-9)}});
  f.evidence = {{"slow_rank", rank_of(top)},
                {"kind", starts_late ? "late start" : "more device work"},
                {"collectives", x.collectives},
                {"clock_agreement_s", figure(x.end_spread_ns * 1e-9)},
                {"time_source", trace::timeline_source_name(e.timeline_source)},
                {"ranks", ranks},
                {"arrivals", arrivals}};
  f.explanation = fmt::format(
      "A collective completes only when every rank has reached it; the ranks' clocks agree (each collective ends "
      "within {} on all of them), so the order in which they start it is the order in which they arrived. Rank {} "
      "came last {} time(s){}. It is late because {}.",
      duration_text(x.end_spread_ns * 1e-9), rank_of(top), x.last_starts[top],
      others.empty() ? "" : fmt::format(", and rank(s) {} at the others", others),
      starts_late ? fmt::format("its step starts later: {} after the median of the others, with as much device work "
                                "before its first collective ({} against a median {})",
                                duration_text(std::max(0.0, start_late)),
                                duration_text(x.compute_before_first_ns[top] * 1e-9), duration_text(median(computes)))
                  : fmt::format("its device has more work before the collective: {} against a median {} on the others",
                                duration_text(x.compute_before_first_ns[top] * 1e-9), duration_text(median(computes))));
  f.fix = starts_late
              ? fmt::format("find what rank {} does before its step that the others do not (the previous step's tail, "
                            "data loading, logging or checkpointing on that rank, a busier host), and balance it",
                            rank_of(top))
              : fmt::format("balance the work before the collective (uneven embedding tables or batches across ranks), "
                            "or check rank {}'s device for throttling or another process",
                            rank_of(top));
  // The waiting is exposed communication, which exposed-communication counts: this
  // finding says why that time is exposed, and claims none of its own.
  return f;
}

// DataParallel: one process, a replica per device; the primary gathers the outputs and
// sums the gradients only when every replica is done, so a device whose replica computes
// longer holds up the primary and, through it, every other replica.
std::optional<Finding> slow_replica(const Evidence& e) {
  const auto slow = slowest_replica(e);
  if (!slow || e.step_s <= 0) return std::nullopt;
  const auto& id = e.device[static_cast<size_t>(slow->rank)].id;
  const double gap = slow->seconds - slow->typical_s;
  const double pct = slow->typical_s > 0 ? 100 * (slow->seconds / slow->typical_s - 1) : 100.0;
  // Each device's wait for the others: measured at every gather and gradient sum where
  // the report has it, else the slowest replica's extra compute a step.
  const bool measured = e.replica_waited_s.size() == e.device.size();
  std::vector<Claim> claims;
  double most = 0;
  for (const auto& b : e.breakdown) {
    size_t d = 0;
    while (d < e.device.size() && e.device[d].id != b.device) ++d;
    if (d == e.device.size()) continue;
    const double wait = measured ? e.replica_waited_s[d] : (b.device == id ? 0.0 : gap);
    claims.push_back({b.rank, b.device, std::clamp(wait / e.step_s, 0.0, b.idle_share.value_or(0))});
    most = std::max(most, claims.back().share);
  }
  // Below the straggler's bar the waiting is still where part of the devices' idle time
  // goes: said as info from 2% of the step, so that the budget accounts for it.
  if (!slow->significant && most < 0.02) return std::nullopt;
  Finding f;
  f.severity = slow->significant ? Severity::warning : Severity::info;
  f.title = slow->significant
                ? fmt::format("{}'s replica is a straggler: it computes {:.1f} ms per step against {:.1f} ms on the "
                              "other devices ({:.0f}% longer)",
                              id, slow->seconds * 1e3, slow->typical_s * 1e3, pct)
                : fmt::format("the replicas finish at different times: a device waits up to {:.0f}% of the step at "
                              "the gather and the gradient sum for the latest (no device's replica is consistently "
                              "slower: {} computes {:.0f}% longer than the others)",
                              100 * most, id, pct);
  nlohmann::json devices = nlohmann::json::array();
  for (size_t d = 0; d < e.device.size(); ++d) {
    nlohmann::json row = {{"device", e.device[d].id}, {"replica_s", e.replica_s[d]}, {"primary", d == 0}};
    row["waited_s"] = measured ? nlohmann::json(e.replica_waited_s[d]) : nlohmann::json(nullptr);
    devices.push_back(row);
  }
  f.evidence = {{"slow_device", id},
                {"kind", "slow replica"},
                {"typical_s", slow->typical_s},
                {"step_time_s", e.step_s},
                {"waits", measured ? "measured at each gather and gradient sum" : "the slowest replica's extra compute"},
                {"time_source", trace::timeline_source_name(e.timeline_source)},
                {"replicas", devices}};
  f.explanation = fmt::format(
      "DataParallel gathers the outputs and sums the gradients on the primary only when every replica has finished, "
      "so the devices whose replica ends first wait for the last: each replica has the same share of the batch and "
      "the same model, and {}'s computes {:.1f} ms a step longer than the others' median.",
      id, gap * 1e3);
  f.fix = slow->significant ? fmt::format("find what slows {} (thermal or power throttling, another process on it, a "
                                          "slower or shared device); nvidia-smi / top on the host",
                                          id)
                            : "nothing to fix on one device: the replicas' times vary from phase to phase (a busy "
                              "host, devices shared with other work); DistributedDataParallel overlaps the wait with "
                              "communication";
  f.explains = std::move(claims);
  return f;
}

}  // namespace

std::optional<Finding> straggler_rank(const Evidence& e) {
  if (e.has_dp && !e.replica_s.empty()) return slow_replica(e);
  if (late_arrivals(e)) return late_ranks(e);
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
  const double gap = slow->seconds - slow->typical_s;
  f.explanation = fmt::format(
      "Every all-reduce completes only when all ranks contribute, so the other ranks spend about {:.1f} ms a step "
      "waiting in communication for rank {}: their communication is long because rank {}'s {}.",
      gap * 1e3, slow->rank, slow->rank, device ? "device computes longer" : "device waits for its host");
  f.fix = device ? fmt::format("find what slows rank {}'s device (thermal or power throttling, another process on it, a "
                               "slower or shared device, uneven data); nvidia-smi / top on its node",
                               slow->rank)
                 : fmt::format("find what keeps rank {}'s host from feeding its GPU (its data loader, CPU contention, "
                               "host-side work in the step); more loader workers, pinned memory, fewer host syncs",
                               slow->rank);
  // The others' waiting, up to the gap a step: in their communication, or idle where the
  // source records no communication kernels.
  if (e.step_s > 0)
    for (const auto& b : e.breakdown)
      if (b.rank != slow->rank)
        f.explains.push_back({b.rank, b.device,
                              std::clamp(gap / e.step_s, 0.0, b.comm_share.value_or(0) + b.idle_share.value_or(0))});
  return f;
}

}  // namespace dpb::doctor::check
