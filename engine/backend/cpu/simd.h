#pragma once
// Which vector instructions the project's own CPU loops run, chosen at run time.
//
// Each hot loop is written once (a body inlined into every variant) and compiled three
// times: for AVX-512, for AVX2 and for the x86-64 baseline the rest of the build targets,
// so that one binary runs everywhere. The first call picks the widest the processor runs,
// held down by DPB_MAX_CPU_ISA (avx512, avx2 or baseline), as ONEDNN_MAX_CPU_ISA holds
// oneDNN's: an AVX-512 machine then rounds as an AVX2-only one does (the test script runs
// the equivalence tests so), and a user reproduces another processor's results.
//
// Threads are started outside the variants (an OpenMP region's outlined body does not
// take its function's target): a kernel is one thread's share of the work.
#include <cstdint>
#include <string>

namespace dpb::cpu {

enum class SimdIsa : int { baseline = 0, avx2 = 1, avx512 = 2 };

// The widest this processor runs (AVX-512 counts with its foundation, AVX512F).
SimdIsa processor_simd_isa();
// What the kernels run: the processor's, held down by DPB_MAX_CPU_ISA when it is set.
// Throws dpb::Error naming the valid values when the variable holds something else.
SimdIsa simd_isa();
// "avx512", "avx2", "baseline"; parse_simd_isa takes those (any case) and throws
// naming them for anything else; `what` says where the text came from.
const char* simd_isa_name(SimdIsa isa);
SimdIsa parse_simd_isa(const std::string& text, const std::string& what);

}  // namespace dpb::cpu

// A kernel's body: inlined into each variant, where it compiles for that variant's ISA.
#define DPB_SIMD_INLINE inline __attribute__((always_inline))

#if defined(__x86_64__)
// DPB_SIMD_KERNEL(ret, name, (params), (args)) defines `name` from `name##_body`: the
// AVX-512, AVX2 and baseline variants and the call to the one simd_isa() picks.
#define DPB_SIMD_KERNEL(ret, name, params, args)                                          \
  __attribute__((target("avx512f"))) ret name##_avx512 params { return name##_body args; } \
  __attribute__((target("avx2"))) ret name##_avx2 params { return name##_body args; }      \
  ret name params {                                                                        \
    switch (::dpb::cpu::simd_isa()) {                                                      \
      case ::dpb::cpu::SimdIsa::avx512:                                                    \
        return name##_avx512 args;                                                         \
      case ::dpb::cpu::SimdIsa::avx2:                                                      \
        return name##_avx2 args;                                                           \
      case ::dpb::cpu::SimdIsa::baseline:                                                  \
        break;                                                                             \
    }                                                                                      \
    return name##_body args;                                                               \
  }
#else
#define DPB_SIMD_KERNEL(ret, name, params, args) \
  ret name params { return name##_body args; }
#endif
