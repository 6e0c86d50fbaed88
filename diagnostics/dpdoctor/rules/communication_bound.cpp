// ddp whose all-reduce is not hidden behind backward: the step waits for communication.
#include <fmt/format.h>

#include <algorithm>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

std::optional<Finding> communication_bound(const Evidence& e) {
  if (e.mode != ParallelMode::ddp || e.world < 2) return std::nullopt;
  // Both measures must agree (the merged intervals, and the A/B against no_sync where it
  // ran): either alone is noisy when two ranks share a small machine.
  const double share = e.exposed_share_ab >= 0 ? std::min(e.exposed_share_ab, e.exposed_share) : e.exposed_share;
  if (share < 0.3) return std::nullopt;
  // A straggler's wait is not the network's (straggler-rank says so).
  if (const auto slow = slowest_rank(e); slow && slow->significant) return std::nullopt;
  Finding f;
  f.severity = Severity::warning;
  f.title = fmt::format("{:.0f}% of the step waits for the gradient all-reduce (exposed communication)", 100 * share);
  f.evidence = {{"exposed_share", share},
                {"exposed_share_intervals", e.exposed_share},
                {"exposed_share_ab", e.exposed_share_ab},
                {"overlap_ratio", e.overlap},
                {"buckets", e.buckets},
                {"largest_bucket_bytes", e.bucket_bytes_max},
                {"bucket_mb", e.bucket_mb},
                {"batch_per_rank", e.batch_per_device},
                {"step_time_s", e.step_s}};
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
      "Only {:.0f}% of the all-reduce ran while backward was still computing; the rest is added to every step. With {} "
      "sample(s) per rank, backward is too short to hide the exchange of every gradient.{}",
      e.overlap >= 0 ? 100 * e.overlap : 0.0, e.batch_per_device, cause);
  f.fix = std::string(tiny_buckets ? "use larger buckets (bucket_cap_mb=25, the default; --bucket-mb=25); " : "") +
          "give each rank more work per exchange: a larger per-rank batch, or gradient accumulation with no_sync "
          "(--accum-steps); or a faster interconnect/backend (NCCL on GPUs)";
  return f;
}

}  // namespace dpb::doctor::check
