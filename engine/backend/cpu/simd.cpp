// The kernels' ISA: the processor's, held down by DPB_MAX_CPU_ISA (simd.h).
#include "engine/backend/cpu/simd.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "engine/core/error.h"

namespace dpb::cpu {

SimdIsa processor_simd_isa() {
#if defined(__x86_64__)
  static const SimdIsa isa = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return SimdIsa::avx512;
    if (__builtin_cpu_supports("avx2")) return SimdIsa::avx2;
    return SimdIsa::baseline;
  }();
  return isa;
#else
  return SimdIsa::baseline;
#endif
}

const char* simd_isa_name(SimdIsa isa) {
  switch (isa) {
    case SimdIsa::avx512:
      return "avx512";
    case SimdIsa::avx2:
      return "avx2";
    case SimdIsa::baseline:
      break;
  }
  return "baseline";
}

SimdIsa parse_simd_isa(const std::string& text, const std::string& what) {
  std::string t = text;
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (SimdIsa isa : {SimdIsa::avx512, SimdIsa::avx2, SimdIsa::baseline})
    if (t == simd_isa_name(isa)) return isa;
  throw Error(what + ": unknown instruction set '" + text + "'; choose avx512, avx2 or baseline");
}

SimdIsa simd_isa() {
  static const SimdIsa isa = [] {
    const SimdIsa widest = processor_simd_isa();
    const char* held = std::getenv("DPB_MAX_CPU_ISA");
    if (!held || !*held) return widest;
    return std::min(widest, parse_simd_isa(held, "DPB_MAX_CPU_ISA"));
  }();
  return isa;
}

}  // namespace dpb::cpu
