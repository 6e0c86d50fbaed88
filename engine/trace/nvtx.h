#pragma once
// NVTX ranges for Nsight Systems (dpbench --nvtx) and the profiler capture range.
//
// Range names (the trace slices of dpbench --trace use the same): "step", "data.h2d",
// "forward", "loss", "backward", "optimizer", and per layer "<name> (<Type>)" nested
// inside forward/backward, e.g. "layer1 (Sequential)" > "0 (BasicBlock)".
// Ranges cost nothing unless enabled (set_nvtx(true)); without the CUDA backend they
// are no-ops.
//
// capture_begin/capture_end bracket the measured steps with cudaProfilerStart/Stop, so
// `nsys profile --capture-range=cudaProfilerApi` and `ncu --profile-from-start off`
// record exactly the steps dpbench measures (no-ops when no profiler is attached).
#include <string>

namespace dpb::trace {

void set_nvtx(bool on);
bool nvtx_enabled();

class NvtxRange {
 public:
  explicit NvtxRange(const char* name);
  explicit NvtxRange(const std::string& name) : NvtxRange(name.c_str()) {}
  ~NvtxRange();
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;

 private:
  bool active_;
};

void capture_begin();
void capture_end();

}  // namespace dpb::trace
