// DataParallel's serial work: besides its replica the primary device broadcasts the
// parameters, scatters the batch, gathers the outputs, computes the loss, sums the
// replicas' gradients and steps the optimizer, alone; and between those the host hands
// work to the device threads and waits for them, while no device works. When that share
// is large, the replicas (and the primary) wait: the step is serial where it should be
// parallel.
#include <fmt/format.h>

#include <algorithm>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

std::optional<Finding> primary_device_hotspot(const Evidence& e) {
  if (!e.has_dp || e.world < 2 || e.scatter_calls == 0 || e.primary_only_s < 0 || e.step_s <= 0) return std::nullopt;
  const double share = e.primary_only_s / e.step_s;
  const double host = e.host_only_s > 0 ? e.host_only_s / e.step_s : 0.0;  // no device busy (not measured: 0)
  const double gap = e.device[0].busy - mean_busy_except_first(e);
  // The primary much busier than the replicas; or the replicas idling a quarter of the
  // window, at least half of it for DataParallel's serial work.
  const double replicas_idle = 1.0 - mean_busy_except_first(e);
  const bool hot = share >= 0.3 && gap >= 0.15;
  const bool replicas_wait = replicas_idle >= 0.25 && share + host >= 0.1 && share + host >= 0.5 * replicas_idle;
  // The primary's broadcast, scatter and gather, as its window shows them (communication
  // nothing computes beside): DataParallel's own serial work too.
  double primary_comm = 0;
  for (const auto& b : e.breakdown)
    if (b.device == e.device[0].id) primary_comm = b.comm_share.value_or(0);
  // Below that, the serial work is still where part of the replicas' idle time and the
  // primary's exposed communication go: said as info where a replica idles a quarter of
  // its window or the primary's scatter and gather take 2% of its window, so that the
  // budget accounts for it.
  if (!hot && !replicas_wait && (share + host < 0.03 || replicas_idle < 0.25) && primary_comm < 0.02)
    return std::nullopt;
  Finding f;
  f.severity = hot || replicas_wait ? Severity::warning : Severity::info;
  f.title = host >= share
                ? fmt::format("DataParallel's serial work holds the devices back: {:.0f}% of every step no device works "
                              "while the host scatters, gathers and hands work to the device threads, and {:.0f}% {} "
                              "works alone",
                              100 * host, 100 * share, e.device[0].id)
                : fmt::format("{} is a hot spot: its own DataParallel work takes {:.0f}% of every step", e.device[0].id,
                              100 * share);
  f.evidence = {{"primary_only_s_per_step", e.primary_only_s},
                {"host_only_s_per_step", e.host_only_s >= 0 ? figure(e.host_only_s) : nlohmann::json(nullptr)},
                {"primary_replica_s_per_step", e.primary_replica_s},
                {"step_time_s", e.step_s},
                {"primary_busy", e.device[0].busy},
                {"others_busy_mean", mean_busy_except_first(e)},
                {"primary_scatter_gather_share", figure(primary_comm)},
                {"per_device", device_table(e)}};
  f.explanation = fmt::format(
      "Besides its replica ({:.1f} ms/step) the primary device broadcasts the parameters to every replica, scatters "
      "the batch, gathers the outputs, computes the loss, sums the replicas' gradients and steps the optimizer "
      "({:.1f} ms/step, alone){}: during that time the other devices idle, and the cost grows with the device count and "
      "the parameter count.",
      e.primary_replica_s * 1e3, e.primary_only_s * 1e3,
      e.host_only_s >= 0 ? fmt::format("; and for {:.1f} ms/step no device works at all while the host hands work to the "
                                       "device threads and collects it",
                                       e.host_only_s * 1e3)
                         : "");
  for (const auto& b : e.breakdown) {
    const bool primary = b.device == e.device[0].id;
    const double mine = std::min(primary ? host : share + host, b.idle_share.value_or(0));
    f.explains.push_back({b.rank, b.device, mine + (primary ? b.comm_share.value_or(0) : 0.0)});
  }
  f.fix = "use DistributedDataParallel (one process per device: no broadcast, scatter or gather per step, and the "
          "all-reduce overlaps backward); in dpbench --mode=ddp";
  return f;
}

}  // namespace dpb::doctor::check
