#include "engine/core/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <thread>

extern char** environ;

#include "engine/core/error.h"
#include "engine/core/text.h"

namespace dpb::proc {

std::optional<ResidentMemory> resident_memory() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return std::nullopt;
  ResidentMemory m;
  bool rss = false, hwm = false;
  char line[256];
  while (std::fgets(line, sizeof(line), f)) {
    long long kib = 0;
    if (std::sscanf(line, "VmRSS: %lld kB", &kib) == 1) {
      m.current_bytes = kib * 1024;
      rss = true;
    } else if (std::sscanf(line, "VmHWM: %lld kB", &kib) == 1) {
      m.peak_bytes = kib * 1024;
      hwm = true;
    } else if (std::sscanf(line, "RssShmem: %lld kB", &kib) == 1) {
      m.shared_bytes = kib * 1024;
    }
  }
  std::fclose(f);
  if (!rss || !hwm) return std::nullopt;
  return m;
}


namespace {

namespace fs = std::filesystem;

bool executable(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

Child::Child(const Spec& spec) {
  DPB_CHECK(!spec.argv.empty()) << "a child process needs a program";
  const std::string exe = spec.exe.empty() ? spec.argv.front() : spec.exe;
  std::vector<char*> args;
  for (const auto& a : spec.argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // The environment, built before fork: ours, with the spec's variables over it.
  std::vector<std::string> env_strings;
  for (char** e = environ; e && *e; ++e) {
    const std::string_view kv(*e);
    bool replaced = false;
    for (const auto& [k, v] : spec.env) replaced = replaced || (kv.size() > k.size() && kv.substr(0, k.size()) == k &&
                                                                kv[k.size()] == '=');
    if (!replaced) env_strings.emplace_back(kv);
  }
  for (const auto& [k, v] : spec.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& kv : env_strings) envp.push_back(kv.data());
  envp.push_back(nullptr);
  int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1}, exec_pipe[2] = {-1, -1};
  auto close_all = [&] {
    for (int* p : {out_pipe, err_pipe, exec_pipe}) close_fd(p[0]), close_fd(p[1]);
  };
  if ((spec.out == Output::pipe && ::pipe2(out_pipe, O_CLOEXEC) != 0) ||
      (spec.err == Output::pipe && ::pipe2(err_pipe, O_CLOEXEC) != 0) || ::pipe2(exec_pipe, O_CLOEXEC) != 0) {
    const int e = errno;
    close_all();
    DPB_FAIL() << "cannot start " << exe << ": pipe(): " << std::strerror(e);
  }
  pid_ = ::fork();
  if (pid_ < 0) {
    const int e = errno;
    close_all();
    DPB_FAIL() << "cannot start " << exe << ": fork(): " << std::strerror(e);
  }
  if (pid_ == 0) {  // the child: only async-signal-safe calls until exec
    if (spec.out == Output::pipe) ::dup2(out_pipe[1], STDOUT_FILENO);
    if (spec.out == Output::to_stderr) ::dup2(STDERR_FILENO, STDOUT_FILENO);
    if (spec.out == Output::discard) {
      const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
      if (null >= 0) ::dup2(null, STDOUT_FILENO);
    }
    if (spec.err == Output::pipe) ::dup2(err_pipe[1], STDERR_FILENO);
    if (exe.find('/') != std::string::npos) ::execve(exe.c_str(), args.data(), envp.data());
    else ::execvpe(exe.c_str(), args.data(), envp.data());
    const int e = errno;
    (void)!::write(exec_pipe[1], &e, sizeof(e));
    ::_exit(127);
  }
  close_fd(out_pipe[1]);
  close_fd(err_pipe[1]);
  close_fd(exec_pipe[1]);
  // exec closes the pipe (close-on-exec): nothing to read means the program runs.
  int e = 0;
  ssize_t n;
  while ((n = ::read(exec_pipe[0], &e, sizeof(e))) < 0 && errno == EINTR) {
  }
  close_fd(exec_pipe[0]);
  if (n == static_cast<ssize_t>(sizeof(e))) {
    close_fd(out_pipe[0]);
    close_fd(err_pipe[0]);
    wait();
    pid_ = -1;
    DPB_FAIL() << "cannot run " << escape_untrusted(exe) << ": " << std::strerror(e);
  }
  out_ = out_pipe[0];
  err_ = err_pipe[0];
  if (out_ >= 0) ::fcntl(out_, F_SETFL, ::fcntl(out_, F_GETFL) | O_NONBLOCK);
  if (err_ >= 0) ::fcntl(err_, F_SETFL, ::fcntl(err_, F_GETFL) | O_NONBLOCK);
}

Child::Child(Child&& o) noexcept
    : pid_(std::exchange(o.pid_, -1)),
      out_(std::exchange(o.out_, -1)),
      err_(std::exchange(o.err_, -1)),
      exited_(o.exited_),
      status_(o.status_) {}

Child::~Child() {
  close_fd(out_);
  close_fd(err_);
  if (pid_ > 0 && !exited_) {
    ::kill(pid_, SIGKILL);
    wait();
  }
}

std::optional<int> Child::poll(bool stops) {
  if (exited_ || pid_ <= 0) return std::nullopt;
  int status = 0;
  const pid_t got = ::waitpid(pid_, &status, WNOHANG | (stops ? WUNTRACED | WCONTINUED : 0));
  if (got != pid_) return std::nullopt;
  if (WIFEXITED(status) || WIFSIGNALED(status)) {
    exited_ = true;
    status_ = status;
  }
  return status;
}

int Child::wait() {
  while (!exited_ && pid_ > 0) {
    int status = 0;
    const pid_t got = ::waitpid(pid_, &status, 0);
    if (got < 0 && errno == EINTR) continue;
    exited_ = true;
    status_ = got == pid_ ? status : 0;
  }
  return status_;
}

std::optional<int> Child::wait_for(std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    if (auto s = poll(); s && exited_) return s;
    if (exited_) return status_;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void Child::signal(int sig) const {
  if (pid_ > 0 && !exited_) ::kill(pid_, sig);
}

std::string self_exe(const std::string& fallback) {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : fallback;
}

std::string find_program(const std::string& name, const char* override_path) {
  if (override_path && *override_path) return override_path;
  if (const std::string self = self_exe(); !self.empty()) {
    const fs::path sibling = fs::path(self).parent_path() / name;
    if (executable(sibling)) return sibling.string();
  }
  const char* path = std::getenv("PATH");
  for (std::string_view rest = path ? path : ""; !rest.empty();) {
    const size_t colon = rest.find(':');
    const std::string dir(rest.substr(0, colon));
    rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
    if (!dir.empty() && executable(fs::path(dir) / name)) return (fs::path(dir) / name).string();
  }
  return {};
}

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = sigabbrev_np(sig);
    return "killed by signal " + std::to_string(sig) + (name ? std::string(" (SIG") + name + ")" : "");
  }
  return "status " + std::to_string(status);
}

int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

}  // namespace dpb::proc
