// Child processes (engine/core/process.h): what the launcher, the sweep and dpdoctor's
// probe start their children with.
#include "engine/core/process.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "engine/core/error.h"

namespace dpb::proc {
namespace {

namespace fs = std::filesystem;

std::string read_all(int fd) {
  std::string got;
  char buf[256];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 5000) <= 0) break;
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

TEST(Process, RunsAProgramWithItsEnvironmentAndPipesItsOutput) {
  Spec s;
  s.argv = {"sh", "-c", "echo out=$DPB_TEST_VALUE; echo err >&2; exit 3"};
  s.env = {{"DPB_TEST_VALUE", "42"}};
  s.out = s.err = Output::pipe;
  Child c(s);
  EXPECT_EQ(read_all(c.out_fd()), "out=42\n");
  EXPECT_EQ(read_all(c.err_fd()), "err\n");
  const int status = c.wait();
  EXPECT_EQ(exit_code(status), 3);
  EXPECT_EQ(describe_exit(status), "exit code 3");
  EXPECT_TRUE(c.exited());
}

TEST(Process, AProgramThatCannotRunIsOneErrorNamingIt) {
  Spec s;
  s.argv = {"dpb-no-such-program"};
  try {
    Child c(s);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot run dpb-no-such-program: No such file or directory"),
              std::string::npos)
        << e.what();
  }
  s.exe = "/nonexistent/dpbench";
  EXPECT_THROW(Child{s}, Error);
}

TEST(Process, WaitsWithALimitAndNamesTheSignalThatEndedIt) {
  Spec s;
  s.argv = {"sleep", "30"};
  Child c(s);
  EXPECT_FALSE(c.wait_for(std::chrono::milliseconds(50)).has_value());
  c.signal(SIGTERM);
  const auto status = c.wait_for(std::chrono::seconds(5));
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(describe_exit(*status), "killed by signal 15 (SIGTERM)");
  EXPECT_EQ(exit_code(*status), 128 + SIGTERM);
}

TEST(Process, AChildLeftRunningIsStoppedWithItsOwner) {
  pid_t pid = -1;
  {
    Spec s;
    s.argv = {"sleep", "30"};
    Child c(s);
    pid = c.pid();
  }
  EXPECT_NE(::kill(pid, 0), 0) << "the child outlived its owner";
}

TEST(Process, FindsAProgramByOverrideBesideThisOneOrOnPath) {
  EXPECT_EQ(find_program("anything", "/opt/x/anything"), "/opt/x/anything");
  const fs::path self = self_exe();
  ASSERT_FALSE(self.empty());
  EXPECT_EQ(find_program(self.filename().string(), nullptr), self.string());  // beside this executable
  const fs::path dir = fs::temp_directory_path() / ("dpb_path_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path tool = dir / "dpb-test-tool";
  std::ofstream(tool) << "#!/bin/sh\n";
  fs::permissions(tool, fs::perms::owner_all);
  const std::string old_path = std::getenv("PATH") ? std::getenv("PATH") : "";
  ::setenv("PATH", ("/nonexistent:" + dir.string()).c_str(), 1);
  EXPECT_EQ(find_program("dpb-test-tool", nullptr), tool.string());
  EXPECT_EQ(find_program("dpb-not-there", nullptr), "");
  ::setenv("PATH", old_path.c_str(), 1);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace dpb::proc
