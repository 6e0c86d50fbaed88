// The compute a collective takes from the thread beside it (link.h's StolenCompute): the
// fit over a --load report's rows, and the slowdown it gives compute while one runs.
#include <algorithm>
#include <array>
#include <optional>
#include <vector>

#include "benchmarks/simulate/link.h"

namespace dpb::sim {

StolenCompute fit_stolen(const std::vector<std::array<double, 4>>& rows) {
  StolenCompute f;
  f.points = static_cast<int>(rows.size());
  double sww = 0, swx = 0, swxx = 0, swy = 0, swxy = 0;
  for (const auto& [x, t, y, window] : rows) {
    if (!(t > 0) || !(window > 0)) continue;
    const double w = window / (t * t);
    sww += w, swx += w * x, swxx += w * x * x, swy += w * y, swxy += w * x * y;
  }
  if (sww <= 0) return f;
  const double det = sww * swxx - swx * swx;
  double b = det > 0 ? (sww * swxy - swx * swy) / det : 0;
  double a = (swy - b * swx) / sww;
  if (a < 0) a = 0, b = swxx > 0 ? swxy / swxx : 0;  // nothing per message: a line through 0
  if (b < 0) b = 0, a = swy / sww;                   // nothing per byte: a constant
  f.per_message_s = std::max(0.0, a);
  f.per_byte_s = std::max(0.0, b);
  return f;
}

double LinkModel::contention_while(double bytes, double loaded_s, Collective op) const {
  if (contention_scope != ContentionScope::transfers) return contention;
  const std::optional<StolenCompute>& own = op == Collective::allgather        ? stolen_allgather
                                            : op == Collective::reduce_scatter ? stolen_reduce_scatter
                                                                               : stolen;
  const std::optional<StolenCompute>& measured = own ? own : stolen;
  if (measured) return loaded_s > 0 ? measured->at(bytes) / loaded_s : 0.0;
  return contention;
}

}  // namespace dpb::sim
