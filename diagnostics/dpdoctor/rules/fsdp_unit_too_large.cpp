// FSDP: one gathered unit holds as much memory as everything the rank keeps sharded.
// Sharding over N ranks divides the parameters, gradients and optimizer state by N, but
// a unit is gathered whole on every rank while it runs (and the next one with it, when
// prefetched): once the most parameters gathered at once reach what the rank keeps
// sharded, adding ranks no longer lowers the rank's memory much and the units are what
// to cut. Measured by dpbench per rank (runs[].fsdp.ranks[]).
#include <fmt/format.h>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

std::optional<Finding> fsdp_unit_too_large(const Evidence& e) {
  if (!mode_info(e.mode).shards_state || !e.has_fsdp || e.world < 2 || e.fsdp_state_bytes <= 0 ||
      e.fsdp_peak_gathered_bytes < e.fsdp_state_bytes)
    return std::nullopt;
  const double mib = 1.0 / (1 << 20);
  Finding f;
  f.severity = Severity::warning;
  f.title = fmt::format("gathered parameters take as much memory as the sharded state: {:.1f} MiB gathered at once "
                        "against {:.1f} MiB of parameter, gradient and optimizer shards per rank",
                        static_cast<double>(e.fsdp_peak_gathered_bytes) * mib,
                        static_cast<double>(e.fsdp_state_bytes) * mib);
  f.explanation = fmt::format(
      "Over {} ranks each keeps 1/{} of the model's state ({:.1f} MiB here), but every rank gathers a whole unit to "
      "run it: the largest of the {} units holds {:.1f} MiB of the model's {:.1f} MiB of parameters, and with the "
      "unit being gathered next (prefetch {}) and the collective's buffer at most {:.1f} MiB were gathered at once. "
      "More ranks shrink only the shards, so the rank's memory is now set by its largest units.",
      e.world, e.world, static_cast<double>(e.fsdp_state_bytes) * mib, e.fsdp_units,
      static_cast<double>(e.fsdp_largest_unit_bytes) * mib, static_cast<double>(e.fsdp_full_bytes) * mib,
      e.fsdp_prefetch, static_cast<double>(e.fsdp_peak_gathered_bytes) * mib);
  f.fix = "cut the largest units smaller (wrap their sub-layers as units of their own; for a large embedding, shard "
          "it over the vocabulary with tensor parallelism), or prefetch less (--fsdp-prefetch=1)";
  f.evidence = {{"peak_gathered_parameter_bytes", e.fsdp_peak_gathered_bytes},
                {"sharded_state_bytes", e.fsdp_state_bytes},
                {"largest_unit_bytes", e.fsdp_largest_unit_bytes},
                {"full_parameter_bytes", e.fsdp_full_bytes},
                {"units", e.fsdp_units},
                {"prefetch", e.fsdp_prefetch},
                {"ranks", e.world},
                {"evidence", "each rank's bytes as dpbench counted them (the largest over the ranks)"}};
  return f;
}

}  // namespace dpb::doctor::check
