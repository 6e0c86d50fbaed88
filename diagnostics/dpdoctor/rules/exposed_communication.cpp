// The step waits for communication that is not hidden behind compute: DDP's gradient
// all-reduce (or any collective) running while the device has nothing else to do.
// Measured on the device timeline where one exists (NCCL kernels against compute
// kernels, per rank), else from dpbench's host intervals and its A/B against no_sync.
#include <fmt/format.h>

#include <algorithm>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

namespace {

struct Exposure {
  double share = -1;  // exposed communication / step
  double overlap = -1;
  std::string where = "rank 0";
};

// The most exposed rank on the device timelines, if they hold any communication.
Exposure from_timelines(const Evidence& e) {
  Exposure x;
  for (const auto& t : e.timelines) {
    if (!t.exposed_comm_per_step_s || !t.step_s || *t.step_s <= 0 || !t.breakdown.overlap) continue;
    const double share = *t.exposed_comm_per_step_s / *t.step_s;
    if (share > x.share) {
      x.share = share;
      x.overlap = *t.breakdown.overlap;
      x.where = t.rank ? fmt::format("rank {} ({})", *t.rank, t.device) : t.device;
    }
  }
  return x;
}

}  // namespace

std::optional<Finding> exposed_communication(const Evidence& e) {
  Exposure x = from_timelines(e);
  const bool device = x.share >= 0;
  double threshold = 0.2;
  if (!device) {
    if (e.mode != ParallelMode::ddp || e.world < 2) return std::nullopt;
    // Host intervals: both measures must agree (the merged intervals, and the A/B
    // against no_sync where it ran): either alone is noisy when ranks share a small machine.
    x.share = e.exposed_share_ab >= 0 ? std::min(e.exposed_share_ab, e.exposed_share) : e.exposed_share;
    x.overlap = e.overlap;
    threshold = 0.3;
  }
  if (x.share < threshold) return std::nullopt;
  // A straggler's wait is not the network's (straggler-rank says so).
  if (const auto slow = slowest_rank(e); slow && slow->significant) return std::nullopt;
  Finding f;
  f.severity = Severity::warning;
  f.title = fmt::format("{:.0f}% of the step waits for communication that compute does not hide (exposed "
                        "communication, {})",
                        100 * x.share, x.where);
  f.evidence = {{"exposed_share", x.share},
                {"overlap_ratio", x.overlap},
                {"measured_on", device ? "device timeline" : "host intervals and A/B"},
                {"time_source", trace::timeline_source_name(e.timeline_source)},
                {"step_time_s", e.step_s}};
  if (!device) {
    f.evidence["exposed_share_intervals"] = e.exposed_share;
    f.evidence["exposed_share_ab"] = e.exposed_share_ab;
    f.evidence["buckets"] = e.buckets;
    f.evidence["largest_bucket_bytes"] = e.bucket_bytes_max;
    f.evidence["bucket_mb"] = e.bucket_mb;
    f.evidence["batch_per_rank"] = e.batch_per_device;
  } else {
    f.evidence["per_rank"] = breakdown_table(e);
  }
  // Why so little overlaps: many tiny buckets each pay a collective's latency; one bucket
  // holding every gradient can only start once backward is over.
  const bool tiny_buckets = e.bucket_bytes_max > 0 && e.bucket_bytes_max < (1 << 20) && e.buckets > 4;
  const bool one_bucket = e.buckets == 1;
  std::string cause;
  if (tiny_buckets)
    cause = fmt::format(" {} buckets of at most {} KiB each pay a collective's latency, {} times a step.", e.buckets,
                        e.bucket_bytes_max / 1024, e.buckets);
  else if (one_bucket)
    cause = fmt::format(" All {} KiB of gradients fit in one bucket, whose all-reduce can only start when backward has "
                        "finished: there is nothing left to overlap it with.",
                        e.bucket_bytes_max / 1024);
  f.explanation = fmt::format(
      "Only {:.0f}% of the communication ran while the device was still computing; the rest is added to every step. "
      "Backward is too short to hide the exchange of every gradient{}.{}",
      x.overlap >= 0 ? 100 * x.overlap : 0.0,
      e.batch_per_device > 0 ? fmt::format(" with {} sample(s) per rank", e.batch_per_device) : "", cause);
  f.fix = std::string(tiny_buckets ? "use larger buckets (bucket_cap_mb=25, the default; --bucket-mb=25); " : "") +
          "give each rank more work per exchange: a larger per-rank batch, or gradient accumulation with no_sync "
          "(--accum-steps); overlap the all-reduce with backward (DDP's buckets, not a manual all-reduce after "
          "backward); or a faster interconnect/backend (NCCL on GPUs)";
  return f;
}

}  // namespace dpb::doctor::check
