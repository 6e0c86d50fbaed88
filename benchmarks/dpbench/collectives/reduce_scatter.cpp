// Reduce-scatter (sum): rank r ends with the sum over ranks of chunk r. The size is the
// scattered input's, as nccl-tests counts it.
#include "benchmarks/dpbench/collectives/spec.h"

namespace dpb::bench {

namespace {

CollectiveBuffers make(int64_t bytes, int rank, int ranks, Device device) {
  CollectiveBuffers b;
  b.out_count = std::max<int64_t>(1, std::max<int64_t>(1, bytes / 4) / ranks);
  b.in_count = b.out_count * ranks;
  b.bytes = b.in_count * 4;
  b.in = collective_filled(rank, b.in_count, device);
  b.out = Tensor::zeros({b.out_count}, device);
  return b;
}

std::shared_ptr<comm::Work> issue(comm::ProcessGroup& pg, CollectiveBuffers& b) {
  return pg.reduce_scatter(b.out, b.in, comm::ReduceOp::sum);
}

int64_t count_wrong(const CollectiveBuffers& b, int rank, int ranks) {
  const float ranks_sum = static_cast<float>(ranks * (ranks + 1)) / 2.0f;
  const auto v = b.out.to_vector();
  int64_t wrong = 0;
  for (int64_t i = 0; i < b.out_count; ++i)
    wrong += v[static_cast<size_t>(i)] != ranks_sum * collective_pattern(0, rank * b.out_count + i);
  return wrong;
}

double bus_factor(int n) { return n > 1 ? static_cast<double>(n - 1) / n : 0.0; }

}  // namespace

const CollectiveSpec& reduce_scatter_spec() {
  static const CollectiveSpec spec{"reduce_scatter", make, issue, count_wrong, bus_factor};
  return spec;
}

}  // namespace dpb::bench
