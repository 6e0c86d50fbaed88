#include "engine/trace/nvtx.h"

#include <atomic>

#if DPB_WITH_CUDA
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>
#endif

namespace dpb::trace {

namespace {
std::atomic<bool> g_nvtx{false};
}

void set_nvtx(bool on) { g_nvtx.store(on); }
bool nvtx_enabled() { return g_nvtx.load(std::memory_order_relaxed); }

NvtxRange::NvtxRange(const char* name) : active_(nvtx_enabled()) {
#if DPB_WITH_CUDA
  if (active_) nvtxRangePushA(name);
#else
  (void)name;
#endif
}

NvtxRange::~NvtxRange() {
#if DPB_WITH_CUDA
  if (active_) nvtxRangePop();
#endif
}

void capture_begin() {
#if DPB_WITH_CUDA
  (void)cudaProfilerStart();
  (void)cudaGetLastError();  // no GPU: nothing to capture
#endif
}

void capture_end() {
#if DPB_WITH_CUDA
  (void)cudaProfilerStop();
  (void)cudaGetLastError();
#endif
}

}  // namespace dpb::trace
