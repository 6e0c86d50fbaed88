#include "engine/comm/store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "engine/core/error.h"

namespace dpb::comm {

namespace {

[[noreturn]] void timed_out(const Store& s, const std::string& key, Millis timeout) {
  DPB_FAIL() << "rendezvous: key '" << key << "' was not set within " << timeout.count() << " ms in the "
             << s.describe() << " (a rank that should publish it has not started, has died, or uses another "
             << "store/run directory)";
}

// Sleeps a little longer each time: quick when the key comes soon, cheap when it doesn't.
class Backoff {
 public:
  void sleep() {
    std::this_thread::sleep_for(std::chrono::microseconds(us_));
    us_ = std::min(us_ * 2, 20000);
  }

 private:
  int us_ = 200;
};

}  // namespace

std::string Store::try_get(const std::string& key) { return check(key) ? get(key, Millis(1000)) : std::string(); }

void Store::wait(const std::vector<std::string>& keys, Millis timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (const auto& k : keys) {
    const auto left = std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
    get(k, std::max(left, Millis(0)));
  }
}

// --- MemoryStore -------------------------------------------------------------------

void MemoryStore::set(const std::string& key, const std::string& value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    kv_[key] = value;
  }
  cv_.notify_all();
}

std::string MemoryStore::get(const std::string& key, Millis timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return kv_.count(key) > 0; })) timed_out(*this, key, timeout);
  return kv_.at(key);
}

int64_t MemoryStore::add(const std::string& key, int64_t delta) {
  int64_t v;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = kv_.find(key);
    v = (it == kv_.end() ? 0 : std::stoll(it->second)) + delta;
    kv_[key] = std::to_string(v);
  }
  cv_.notify_all();
  return v;
}

bool MemoryStore::check(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  return kv_.count(key) > 0;
}

// --- FileStore ----------------------------------------------------------------------
// One file per key (named by the key's hex bytes, so any key is a valid name), written
// to a temporary file and renamed: a reader sees a whole value or none. add() holds an
// flock on the key's lock file for its read-modify-write.

FileStore::FileStore(std::string dir) : dir_(std::move(dir)) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  DPB_CHECK(!ec && std::filesystem::is_directory(dir_))
      << "file store: cannot use directory '" << dir_ << "': " << (ec ? ec.message() : "not a directory");
}

std::string FileStore::path(const std::string& key) const {
  static const char* hex = "0123456789abcdef";
  std::string name;
  for (unsigned char c : key) {
    name += hex[c >> 4];
    name += hex[c & 15];
  }
  return dir_ + "/" + name;
}

namespace {

void write_atomically(const std::string& path, const std::string& value) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." +
                          std::to_string(std::hash<std::thread::id>()(std::this_thread::get_id()));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    DPB_CHECK(out.good()) << "file store: cannot write '" << tmp << "'";
    out.write(value.data(), static_cast<std::streamsize>(value.size()));
    DPB_CHECK(out.good()) << "file store: writing '" << tmp << "' failed";
  }
  DPB_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0) << "file store: renaming into '" << path << "' failed";
}

bool read_file(const std::string& path, std::string* value) {
  std::ifstream in(path, std::ios::binary);
  if (!in.good()) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  *value = ss.str();
  return true;
}

}  // namespace

void FileStore::set(const std::string& key, const std::string& value) { write_atomically(path(key), value); }

std::string FileStore::get(const std::string& key, Millis timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const std::string p = path(key);
  Backoff backoff;
  std::string v;
  for (;;) {
    if (read_file(p, &v)) return v;
    if (std::chrono::steady_clock::now() >= deadline) timed_out(*this, key, timeout);
    backoff.sleep();
  }
}

int64_t FileStore::add(const std::string& key, int64_t delta) {
  const std::string p = path(key), lock_path = p + ".lock";
  const int fd = ::open(lock_path.c_str(), O_CREAT | O_RDWR, 0644);
  DPB_CHECK(fd >= 0) << "file store: cannot open lock '" << lock_path << "'";
  ::flock(fd, LOCK_EX);
  int64_t v = delta;
  try {
    std::string old;
    if (read_file(p, &old) && !old.empty()) v += std::stoll(old);
    write_atomically(p, std::to_string(v));
  } catch (...) {
    ::flock(fd, LOCK_UN);
    ::close(fd);
    throw;
  }
  ::flock(fd, LOCK_UN);
  ::close(fd);
  return v;
}

bool FileStore::check(const std::string& key) { return std::filesystem::exists(path(key)); }

}  // namespace dpb::comm
