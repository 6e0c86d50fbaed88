// All-gather: every rank ends with every rank's buffer, in rank order. The size is the
// gathered output's, as nccl-tests counts it.
#include "benchmarks/dpbench/collectives/spec.h"

namespace dpb::bench {

namespace {

CollectiveBuffers make(int64_t bytes, int rank, int ranks, Device device) {
  CollectiveBuffers b;
  b.in_count = std::max<int64_t>(1, std::max<int64_t>(1, bytes / 4) / ranks);
  b.out_count = b.in_count * ranks;
  b.bytes = b.out_count * 4;
  b.in = collective_filled(rank, b.in_count, device);
  b.out = Tensor::zeros({b.out_count}, device);
  return b;
}

std::shared_ptr<comm::Work> issue(comm::ProcessGroup& pg, CollectiveBuffers& b) { return pg.allgather(b.out, b.in); }

int64_t count_wrong(const CollectiveBuffers& b, int, int ranks) {
  const auto v = b.out.to_vector();
  int64_t wrong = 0;
  for (int q = 0; q < ranks; ++q)
    for (int64_t i = 0; i < b.in_count; ++i) wrong += v[static_cast<size_t>(q * b.in_count + i)] != collective_pattern(q, i);
  return wrong;
}

double bus_factor(int n) { return n > 1 ? static_cast<double>(n - 1) / n : 0.0; }

}  // namespace

const CollectiveSpec& allgather_spec() {
  static const CollectiveSpec spec{"allgather", make, issue, count_wrong, bus_factor};
  return spec;
}

}  // namespace dpb::bench
