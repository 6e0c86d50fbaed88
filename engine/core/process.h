#pragma once
// Starting and supervising child processes, for everything that runs one: the launcher's
// ranks (engine/comm/launcher.h), the sweep's points (dpbench --gpus=1,2,4) and
// dpdoctor's probe (dpdoctor -- FLAGS). A child is a program with its arguments and extra
// environment; its stdout and stderr are inherited, sent to our stderr, or piped to us.
// A program that cannot be started is one dpb::Error naming it and why (exec's errno
// comes back through a close-on-exec pipe), not an exit code 127 to decode later.
#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dpb::proc {

// This process's resident memory, from /proc/self/status (what the kernel counts, every
// allocator and library included): now (VmRSS), its peak (VmHWM) and how much of it is
// shared memory (RssShmem: segments shared with other ranks). Nothing where /proc is
// not readable.
struct ResidentMemory {
  int64_t current_bytes = 0, peak_bytes = 0, shared_bytes = 0;
};
std::optional<ResidentMemory> resident_memory();

// discard: to /dev/null (stdout only).
enum class Output { inherit, to_stderr, pipe, discard };

struct Spec {
  std::vector<std::string> argv;  // argv[0] is the name the child sees
  std::string exe;                // what runs: a path, or a name looked up on PATH; empty: argv[0]
  std::vector<std::pair<std::string, std::string>> env;  // set in the child, over ours
  Output out = Output::inherit, err = Output::inherit;
};

class Child {
 public:
  // Starts the child; throws dpb::Error when it cannot (fork fails, or exec: "cannot run
  // PROGRAM: No such file or directory").
  explicit Child(const Spec& spec);
  // A child still running is killed (SIGKILL) and reaped; pipes are closed.
  ~Child();
  Child(Child&& other) noexcept;
  Child& operator=(Child&&) = delete;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  // The read ends of piped output (non-blocking), -1 when not piped or once closed; the
  // caller may close them and set -1.
  int& out_fd() { return out_; }
  int& err_fd() { return err_; }

  // Without blocking: the wait status when the child changed state (exited, was killed,
  // and with `stops`, was stopped or continued), else nothing.
  std::optional<int> poll(bool stops = false);
  // Blocks until the child has ended (retrying on EINTR); its wait status.
  int wait();
  // Waits at most `limit`; the wait status, or nothing if it still runs.
  std::optional<int> wait_for(std::chrono::milliseconds limit);
  bool exited() const { return exited_; }
  int status() const { return status_; }  // once exited
  void signal(int sig) const;

 private:
  pid_t pid_ = -1;
  int out_ = -1, err_ = -1;
  bool exited_ = false;
  int status_ = 0;
};

// This executable's path (/proc/self/exe), or `fallback` where that cannot be read.
std::string self_exe(const std::string& fallback = {});

// The program `name` as a user who installed it expects to find it: `override_path`
// when given (an environment variable's value), else beside this executable, else on
// PATH. Empty when none of those has it.
std::string find_program(const std::string& name, const char* override_path);

// "exit code 3", "killed by signal 9 (SIGKILL)"
std::string describe_exit(int wait_status);
// The shell's convention: the exit code, or 128 + the signal.
int exit_code(int wait_status);

}  // namespace dpb::proc
