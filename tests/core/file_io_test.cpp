#include "engine/core/file_io.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sys/wait.h>

#include <chrono>
#include <csignal>
#include <thread>
#include <vector>

#include <filesystem>

#include "engine/core/error.h"

namespace dpb {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("dpb_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

TEST(FileIo, AtomicWriteReplacesContentsAndLeavesNoTemp) {
  auto d = temp_dir("atomic");
  const std::string p = (d / "r.json").string();
  write_file_atomic(p, "first");
  write_file_atomic(p, "second");
  EXPECT_EQ(read_file(p), "second");
  int files = 0;
  for (auto& e : fs::directory_iterator(d)) files += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 1);
  fs::remove_all(d);
}

TEST(FileIo, MissingDirectoryIsAClearError) {
  try {
    write_file_atomic("/nonexistent_dpb_dir/r.json", "x");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
  }
}

TEST(FileIo, FailedWriteKeepsPreviousFileAndNoTemp) {
  // A file-size limit makes write() fail part-way (EFBIG), as a full disk would.
  auto d = temp_dir("efbig");
  const std::string p = (d / "ckpt").string();
  write_file_atomic(p, "good");
  struct rlimit old {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 1024;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  bool threw = false;
  std::string what;
  try {
    write_file_atomic(p, std::string(1 << 20, 'x'));
  } catch (const Error& e) {
    threw = true;
    what = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_TRUE(threw);
  EXPECT_NE(what.find("previous file is intact"), std::string::npos) << what;
  EXPECT_EQ(read_file(p), "good");
  int files = 0;
  for (auto& e : fs::directory_iterator(d)) files += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 1) << "the temporary file must be removed";
  fs::remove_all(d);
}

TEST(FileIo, AWriterKilledWhileWritingLeavesThePreviousFileAndNothingElse) {
  // A rank killed (SIGKILL) in the middle of writing a large checkpoint: no temporary
  // file may stay behind, and the previous version is still there.
  auto d = temp_dir("killed");
  const std::string p = (d / "model.safetensors").string();
  write_file_atomic(p, "previous");
  const std::string big(size_t{512} << 20, 'x');  // long enough to be caught writing
  for (int attempt = 0; attempt < 3; ++attempt) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      write_file_atomic(p, big);
      ::_exit(0);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20 + 30 * attempt));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    std::vector<std::string> names;
    for (auto& e : fs::directory_iterator(d)) names.push_back(e.path().filename().string());
    ASSERT_EQ(names.size(), 1u) << "left behind: " << ::testing::PrintToString(names);
    EXPECT_EQ(names[0], "model.safetensors");
    const auto size = fs::file_size(p);
    EXPECT_TRUE(size == 8 || size == (size_t{512} << 20)) << size;  // the previous version or the whole new one
    if (size != 8) write_file_atomic(p, "previous");
  }
  fs::remove_all(d);
}

TEST(FileIo, DirectoryAsTargetIsRejected) {
  auto d = temp_dir("isdir");
  EXPECT_THROW(check_writable(d.string()), Error);
  fs::remove_all(d);
}

}  // namespace
}  // namespace dpb
