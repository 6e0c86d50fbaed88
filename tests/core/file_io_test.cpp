#include "engine/core/file_io.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

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

TEST(FileIo, FailedWriteKeepsPreviousFile) {
  if (::geteuid() == 0) GTEST_SKIP() << "running as root: directory permissions do not stop writes";
  auto d = temp_dir("readonly");
  const std::string p = (d / "ckpt").string();
  write_file_atomic(p, "good");
  ::chmod(d.c_str(), 0555);
  EXPECT_THROW(write_file_atomic(p, "bad"), Error);
  ::chmod(d.c_str(), 0755);
  EXPECT_EQ(read_file(p), "good");
  fs::remove_all(d);
}

TEST(FileIo, DirectoryAsTargetIsRejected) {
  auto d = temp_dir("isdir");
  EXPECT_THROW(check_writable(d.string()), Error);
  fs::remove_all(d);
}

}  // namespace
}  // namespace dpb
