#include "engine/backend/cpu/cpu_context.h"

#include <omp.h>

#include <array>
#include <atomic>
#include <thread>

#include "engine/backend/cpu/dnnl_util.h"
#include "engine/core/error.h"

namespace dpb::cpu {

namespace {
std::atomic<int>& budget() {
  static std::atomic<int> b{0};
  return b;
}
}  // namespace

CpuContext::CpuContext(int index) : index_(index), engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {}

CpuContext& context(int index) {
  DPB_CHECK(index >= 0 && index < kMaxCpuDevices)
      << "logical CPU device cpu:" << index << " out of range (0.." << kMaxCpuDevices - 1 << ")";
  static std::array<std::unique_ptr<CpuContext>, kMaxCpuDevices> contexts;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = contexts[static_cast<size_t>(index)];
  if (!slot) slot = std::make_unique<CpuContext>(index);
  return *slot;
}

int hardware_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

void set_threads_per_device(int threads) {
  DPB_CHECK(threads >= 1) << "threads per device must be >= 1, got " << threads;
  budget().store(threads);
}

int threads_per_device() {
  const int b = budget().load();
  return b > 0 ? b : hardware_threads();
}

CpuDeviceScope::CpuDeviceScope(int index) : previous_threads_(omp_get_max_threads()) {
  (void)context(index);
  omp_set_num_threads(threads_per_device());
}

CpuDeviceScope::~CpuDeviceScope() { omp_set_num_threads(previous_threads_); }

Layout blocked_layout() {
  static const Layout l = [] {
    const auto isa = dnnl::get_effective_cpu_isa();
    return (isa == dnnl::cpu_isa::avx512_core || isa == dnnl::cpu_isa::avx512_core_vnni ||
            isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx)
               ? Layout::nChw16c
               : Layout::nChw8c;
  }();
  return l;
}

}  // namespace dpb::cpu

namespace dpb::cpu {

void run(CpuContext& ctx, const dnnl::primitive& p, const std::unordered_map<int, dnnl::memory>& args) {
  const dnnl_memory_desc_t* smd = dnnl_primitive_desc_query_md(p.get_primitive_desc(), dnnl_query_scratchpad_md, 0);
  const size_t bytes = smd ? dnnl_memory_desc_get_size(smd) : 0;
  if (bytes == 0) {
    p.execute(ctx.stream(), args);
  } else {
    // From the device's caching allocator: after the first steps, no allocation.
    Tensor scratch = Tensor::empty({static_cast<int64_t>((bytes + 3) / 4)}, Device::cpu(ctx.index()));
    auto with = args;
    with.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(dnnl::memory::desc(*smd), ctx.engine(), scratch.data()));
    p.execute(ctx.stream(), with);
  }
  ctx.stream().wait();
}

void sgemm(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const dnnl_status_t st = dnnl_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  DPB_CHECK(st == dnnl_success) << "oneDNN sgemm (" << m << " x " << k << " x " << n << ") failed with status "
                                << static_cast<int>(st);
}

void reorder_memory(CpuContext& ctx, const dnnl::memory& from, const dnnl::memory& to) {
  run(ctx, dnnl::reorder(from, to, user_scratchpad()), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
}

}  // namespace dpb::cpu
