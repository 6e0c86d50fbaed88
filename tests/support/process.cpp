#include "tests/support/process.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace dpb::test {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string temp_path(const std::string& tag) {
  return (std::filesystem::temp_directory_path() / ("dpb_" + std::to_string(::getpid()) + "_" + tag)).string();
}

Proc run_command(const std::string& cmd) {
  static std::atomic<int> counter{0};
  const std::string base = temp_path("cmd" + std::to_string(counter++));
  const auto t0 = std::chrono::steady_clock::now();
  const int status = std::system(("( " + cmd + " ) >" + base + ".out 2>" + base + ".err").c_str());
  Proc r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(base + ".out");
  r.err = slurp(base + ".err");
  std::remove((base + ".out").c_str());
  std::remove((base + ".err").c_str());
  return r;
}

std::string binary(const char* env, const char* built) {
  const char* v = std::getenv(env);
  return v && *v ? v : built;
}

}  // namespace dpb::test
