#pragma once
// Shared by the tests that run the tools as a user would: a command line run with its
// output captured, files read back, temporary paths, and which binary to run.
#include <string>

namespace dpb::test {

struct Proc {
  int code = -1;  // exit code; -1 when killed by a signal
  std::string out, err;
  double seconds = 0;
};

// Runs a shell command line, capturing stdout and stderr.
Proc run_command(const std::string& cmd);
// A whole file ("" when it cannot be read).
std::string slurp(const std::string& path);
// A path in the temporary directory, unique to this process and `tag`.
std::string temp_path(const std::string& tag);
// The binary the build names, unless the environment variable points elsewhere (a
// package made by scripts/package.sh, run on another machine).
std::string binary(const char* env, const char* built);

}  // namespace dpb::test
