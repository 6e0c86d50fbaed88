#include "engine/core/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/core/error.h"
#include "engine/core/text.h"

namespace dpb {

namespace {
std::string parent_dir(const std::string& path) {
  auto parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}
}  // namespace

void check_writable(const std::string& path) {
  DPB_CHECK(!path.empty()) << "empty output path";
  const std::string dir = parent_dir(path);
  struct stat st {};
  DPB_CHECK(::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
      << "cannot write '" << path << "': directory '" << dir << "' does not exist";
  DPB_CHECK(::access(dir.c_str(), W_OK) == 0)
      << "cannot write '" << path << "': directory '" << dir << "' is not writable";
  DPB_CHECK(!(::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)))
      << "cannot write '" << path << "': it is a directory";
}

void write_file_atomic(const std::string& path, std::string_view contents) {
  check_writable(path);
  // The new contents go to a file without a name (O_TMPFILE) in the target's directory,
  // named only once complete and flushed, then renamed over the target: a process killed
  // while writing (a rank stopped by its launcher, or SIGKILL) leaves nothing behind.
  // Where the file system has no unnamed files, a named temporary file (mkstemp) does,
  // removed on every error.
  const std::string dir = parent_dir(path);
  std::string tmp;
  int fd = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
  const bool unnamed = fd >= 0;
  if (!unnamed) {
    tmp = path + ".tmp.XXXXXX";
    fd = ::mkstemp(tmp.data());
  }
  DPB_CHECK(fd >= 0) << "cannot create a temporary file next to '" << path << "': " << std::strerror(errno);
  auto fail = [&](const std::string& what, int err) {
    ::close(fd);
    if (!tmp.empty()) ::unlink(tmp.c_str());
    DPB_FAIL() << what << " '" << path << "' failed: " << std::strerror(err) << " (the previous file is intact)";
  };
  size_t done = 0;
  while (done < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("writing", n < 0 ? errno : ENOSPC);
    done += static_cast<size_t>(n);
  }
  ::fchmod(fd, 0644);
  if (::fsync(fd) != 0) fail("flushing", errno);
  if (unnamed) {
    // A name for the finished file, for the rename (which needs one): through /proc
    // (no privilege needed), else by the descriptor itself.
    static std::atomic<uint64_t> counter{0};
    tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
    const std::string self = "/proc/self/fd/" + std::to_string(fd);
    if (::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, tmp.c_str(), AT_SYMLINK_FOLLOW) != 0 &&
        ::linkat(fd, "", AT_FDCWD, tmp.c_str(), AT_EMPTY_PATH) != 0) {
      const int err = errno;
      tmp.clear();
      fail("naming the new", err);
    }
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    DPB_FAIL() << "flushing '" << path << "' failed: " << std::strerror(err) << " (the previous file is intact)";
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    DPB_FAIL() << "renaming the new '" << path << "' into place failed: " << std::strerror(err);
  }
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  DPB_CHECK(in.good()) << "cannot open '" << path << "': " << std::strerror(errno);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<uint8_t> read_maybe_gzip(const std::string& path, const std::string& what, size_t limit) {
  DPB_CHECK(std::filesystem::exists(path)) << what << " '" << escape_untrusted(path) << "' does not exist";
  gzFile f = gzopen(path.c_str(), "rb");
  DPB_CHECK(f != nullptr) << "cannot open " << what << " '" << escape_untrusted(path) << "'";
  std::vector<uint8_t> data;
  uint8_t buf[1 << 16];
  for (;;) {
    const int n = gzread(f, buf, sizeof(buf));
    if (n < 0) {
      int err = 0;
      const std::string msg = gzerror(f, &err);
      gzclose(f);
      DPB_FAIL() << what << " '" << escape_untrusted(path) << "' is corrupt: " << msg;
    }
    if (n == 0) break;
    if (data.size() + static_cast<size_t>(n) > limit) {
      gzclose(f);
      DPB_FAIL() << what << " '" << escape_untrusted(path) << "' is larger than " << (limit >> 20)
                 << " MiB uncompressed: not such a file (or a decompression bomb)";
    }
    data.insert(data.end(), buf, buf + n);
  }
  gzclose(f);
  return data;
}

}  // namespace dpb
