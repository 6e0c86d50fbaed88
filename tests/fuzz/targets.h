#pragma once
// One fuzz target per reader of outside data. A target hands the bytes to the reader as
// the tools do (as a file where the tool reads a file) and goes on to what the tool does
// next with what was read. Rejection must be one dpb::Error (or, for flags, CLI11's parse
// error, which dpbench prints as one line): anything else escaping, a crash, a hang or
// an unbounded allocation is a bug. Run by the deterministic driver (driver.cpp, in CTest)
// and by libFuzzer (libfuzzer_main.cpp, with clang).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dpb::fuzz {

struct Target {
  const char* name;
  const char* what;
  void (*run)(const uint8_t* data, size_t size);
};

const std::vector<Target>& targets();
const Target* find_target(const std::string& name);

// Runs one input through a target; false (with *why) when something other than the
// expected rejection escaped.
bool run_one(const Target& t, const uint8_t* data, size_t size, std::string* why);

}  // namespace dpb::fuzz
