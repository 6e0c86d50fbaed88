// Broadcast from rank 0 in place: every rank ends with rank 0's buffer.
#include "benchmarks/dpbench/collectives/spec.h"

namespace dpb::bench {

namespace {

std::shared_ptr<comm::Work> issue(comm::ProcessGroup& pg, CollectiveBuffers& b) { return pg.broadcast(b.in, 0); }

int64_t count_wrong(const CollectiveBuffers& b, int, int) {
  const auto v = b.in.to_vector();
  int64_t wrong = 0;
  for (int64_t i = 0; i < b.in_count; ++i) wrong += v[static_cast<size_t>(i)] != collective_pattern(0, i);
  return wrong;
}

double bus_factor(int) { return 1.0; }

}  // namespace

const CollectiveSpec& broadcast_spec() {
  static const CollectiveSpec spec{"broadcast", in_place_buffers, issue, count_wrong, bus_factor};
  return spec;
}

}  // namespace dpb::bench
