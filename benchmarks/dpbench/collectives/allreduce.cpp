// All-reduce (sum) in place: every rank ends with the sum of every rank's buffer.
#include "benchmarks/dpbench/collectives/spec.h"

namespace dpb::bench {

namespace {

std::shared_ptr<comm::Work> issue(comm::ProcessGroup& pg, CollectiveBuffers& b) {
  return pg.allreduce(b.in, comm::ReduceOp::sum);
}

int64_t count_wrong(const CollectiveBuffers& b, int, int ranks) {
  const float ranks_sum = static_cast<float>(ranks * (ranks + 1)) / 2.0f;
  const auto v = b.in.to_vector();
  int64_t wrong = 0;
  for (int64_t i = 0; i < b.in_count; ++i) wrong += v[static_cast<size_t>(i)] != ranks_sum * collective_pattern(0, i);
  return wrong;
}

double bus_factor(int n) { return n > 1 ? 2.0 * (n - 1) / n : 0.0; }

}  // namespace

const CollectiveSpec& allreduce_spec() {
  static const CollectiveSpec spec{"allreduce", in_place_buffers, issue, count_wrong, bus_factor};
  return spec;
}

}  // namespace dpb::bench
