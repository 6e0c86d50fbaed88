// libFuzzer's entry for one target (DPB_FUZZ_TARGET, set per binary by CMake): a crash,
// a sanitizer report or an exception other than the readers' clear error ends the run
// with the input saved by libFuzzer.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const dpb::fuzz::Target* target = dpb::fuzz::find_target(DPB_FUZZ_TARGET);
  if (!target) std::abort();
  std::string why;
  if (!dpb::fuzz::run_one(*target, data, size, &why)) {
    std::fprintf(stderr, "%s: %s\n", DPB_FUZZ_TARGET, why.c_str());
    std::abort();
  }
  return 0;
}
