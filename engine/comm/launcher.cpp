#include "engine/comm/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <ostream>
#include <string>

#include "engine/core/error.h"
#include "engine/core/process.h"

namespace dpb::comm {

namespace {

std::atomic<int> g_forward_signal{0};
void on_signal(int sig) { g_forward_signal.store(sig); }

struct Rank {
  int rank = 0;
  std::optional<proc::Child> child;
  std::string out_buf, err_buf;    // partial lines
  bool stopped = false;  // by SIGSTOP/SIGTSTP: it can neither take part nor report
  std::chrono::steady_clock::time_point stopped_since{};
  bool exited() const { return child->exited(); }
};

// Writes complete lines of `buf` (keeping a partial last line) with the rank prefix.
void flush_lines(std::string& buf, int rank, int fd, bool all) {
  size_t start = 0;
  for (;;) {
    const size_t nl = buf.find('\n', start);
    if (nl == std::string::npos) break;
    const std::string line = "[rank " + std::to_string(rank) + "] " + buf.substr(start, nl - start + 1);
    if (::write(fd, line.data(), line.size()) < 0) {
    }
    start = nl + 1;
  }
  buf.erase(0, start);
  if (all && !buf.empty()) {
    const std::string line = "[rank " + std::to_string(rank) + "] " + buf + "\n";
    if (::write(fd, line.data(), line.size()) < 0) {
    }
    buf.clear();
  }
}

// Reads what is available on `fd` into buf; false at EOF.
bool drain(int fd, std::string& buf) {
  char chunk[4096];
  const ssize_t n = ::read(fd, chunk, sizeof(chunk));
  if (n > 0) {
    buf.append(chunk, static_cast<size_t>(n));
    return true;
  }
  return n < 0 && (errno == EAGAIN || errno == EINTR);
}

// 128 random bits, in hex.
std::string random_token() {
  unsigned char b[16] = {};
  std::ifstream urandom("/dev/urandom", std::ios::binary);
  urandom.read(reinterpret_cast<char*>(b), sizeof(b));
  DPB_CHECK(urandom.gcount() == sizeof(b)) << "launcher: cannot read /dev/urandom for the store's token";
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : b) {
    out += hex[c >> 4];
    out += hex[c & 15];
  }
  return out;
}

}  // namespace

std::string describe_exit(int status) { return proc::describe_exit(status); }

namespace {
// A process that outlives nothing but the launcher: it waits for the launcher's death
// (PR_SET_PDEATHSIG) and removes the run directory, which a launcher killed by SIGKILL
// cannot do itself. The launcher ends it when it has removed the directory itself.
pid_t start_run_dir_reaper(const std::string& dir) {
  const pid_t launcher = ::getpid();
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  sigset_t old;
  ::sigprocmask(SIG_BLOCK, &term, &old);  // no SIGTERM lost between fork and sigwait
  const pid_t pid = ::fork();
  if (pid != 0) {
    ::sigprocmask(SIG_SETMASK, &old, nullptr);
    return pid;  // -1: no reaper (the launcher still removes the directory when it ends)
  }
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() == launcher) {
    int sig = 0;
    ::sigwait(&term, &sig);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  ::_exit(0);
}

// Run directories of launchers that are gone (killed with their reaper, by a signal to
// the whole process group): dpbench-run-PID where PID no longer runs dpbench.
void remove_stale_run_dirs(const std::string& dir) {
  const std::filesystem::path parent = std::filesystem::path(dir).parent_path();
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(parent, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("dpbench-run-", 0) != 0 || e.path() == std::filesystem::path(dir)) continue;
    const std::string digits = name.substr(12);
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(digits));
    if (::kill(pid, 0) == 0 || errno == EPERM) continue;  // its launcher still runs
    std::error_code rm;
    // Only directories this user owns (the run directory is owner-only).
    if (::access(e.path().c_str(), W_OK) == 0) std::filesystem::remove_all(e.path(), rm);
  }
}
}  // namespace

LaunchResult launch(const LaunchOptions& o, std::ostream& err) {
  DPB_CHECK(o.nproc_per_node >= 1 && o.nnodes >= 1 && o.node_rank >= 0 && o.node_rank < o.nnodes)
      << "launcher: " << o.nproc_per_node << " rank(s) per node, node " << o.node_rank << " of " << o.nnodes;
  DPB_CHECK(!o.argv.empty()) << "launcher: no command to run";
  const int world = o.nproc_per_node * o.nnodes;
  pid_t reaper = -1;
  if (!o.run_dir.empty()) {
    remove_stale_run_dirs(o.run_dir);
    std::filesystem::create_directories(o.run_dir);
    std::filesystem::permissions(o.run_dir, std::filesystem::perms::owner_all);  // the file store: ours alone
    reaper = start_run_dir_reaper(o.run_dir);
  }
  // The job's store token: the user's (every node of a multi-node job must share it), or
  // one made here for this node's ranks.
  std::string token;
  if (const char* t = std::getenv("DPB_STORE_TOKEN"); !t || !*t) {
    if (o.nnodes > 1)
      err << "launcher: warning: DPB_STORE_TOKEN is not set, so the store at " << o.master_addr << ":"
          << o.master_port << " admits any client that reaches it; export the same secret on every node "
          << "(e.g. DPB_STORE_TOKEN=$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \\n'))\n";
    else
      token = random_token();
  }

  // SIGHUP (the terminal or ssh session that started the job went away) as SIGTERM:
  // the ranks are stopped and the run directory removed.
  struct sigaction sa {}, old_int{}, old_term{}, old_hup{};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGHUP, &sa, &old_hup);
  g_forward_signal = 0;

  std::vector<Rank> children(static_cast<size_t>(o.nproc_per_node));
  const std::string self = proc::self_exe(o.argv.front());
  for (int local = 0; local < o.nproc_per_node; ++local) {
    Rank& c = children[static_cast<size_t>(local)];
    c.rank = o.node_rank * o.nproc_per_node + local;
    proc::Spec spec;
    spec.argv = o.argv;
    spec.exe = self;  // every rank runs this program
    spec.out = spec.err = proc::Output::pipe;
    spec.env = {{"RANK", std::to_string(c.rank)},
                {"LOCAL_RANK", std::to_string(local)},
                {"WORLD_SIZE", std::to_string(world)},
                {"LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node)},
                {"MASTER_ADDR", o.master_addr},
                {"MASTER_PORT", std::to_string(o.master_port)},
                {"DPB_LAUNCHED", "1"}};
    if (!o.run_dir.empty()) spec.env.emplace_back("DPB_RUN_DIR", o.run_dir);
    if (!token.empty()) spec.env.emplace_back("DPB_STORE_TOKEN", token);
    c.child.emplace(spec);
  }

  LaunchResult result;
  auto stop_others = [&](int sig) {
    for (auto& c : children) {
      if (c.exited()) continue;
      c.child->signal(sig);
      if (c.stopped) c.child->signal(SIGCONT);  // a stopped process acts on SIGTERM only once continued
    }
  };
  std::chrono::steady_clock::time_point term_at{}, kill_at{};
  bool dying = false, stopping = false;
  int stopped_culprit = -1;  // the rank seen stopped, named when another fails waiting for it
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<std::pair<Rank*, bool>> owners;  // (rank, is stderr)
    for (auto& c : children) {
      if (c.child->out_fd() >= 0) {
        fds.push_back({c.child->out_fd(), POLLIN, 0});
        owners.emplace_back(&c, false);
      }
      if (c.child->err_fd() >= 0) {
        fds.push_back({c.child->err_fd(), POLLIN, 0});
        owners.emplace_back(&c, true);
      }
    }
    if (!fds.empty()) ::poll(fds.data(), fds.size(), 50);
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Rank& c = *owners[i].first;
      const bool is_err = owners[i].second;
      int& fd = is_err ? c.child->err_fd() : c.child->out_fd();
      std::string& buf = is_err ? c.err_buf : c.out_buf;
      const bool open = drain(fd, buf);
      flush_lines(buf, c.rank, is_err ? STDERR_FILENO : STDOUT_FILENO, !open);
      if (!open) {
        ::close(fd);
        fd = -1;
      }
    }
    if (const int sig = g_forward_signal.exchange(0); sig != 0) {
      if (result.failure.empty()) result.failure = "stopped by signal " + std::to_string(sig);
      stop_others(sig == SIGHUP ? SIGTERM : sig);
      stopping = true;
      kill_at = std::chrono::steady_clock::now() + o.grace;
    }
    bool all_done = true;
    for (auto& c : children) {
      if (const auto changed = c.exited() ? std::optional<int>() : c.child->poll(/*stops=*/true)) {
        const int status = *changed;
        const pid_t pid = c.child->pid();
        if (WIFSTOPPED(status)) {
          c.stopped = true;
          c.stopped_since = std::chrono::steady_clock::now();
          const char* name = sigabbrev_np(WSTOPSIG(status));
          err << "launcher: rank " << c.rank << " (pid " << pid << ") is stopped by signal " << WSTOPSIG(status)
              << (name ? std::string(" (SIG") + name + ")" : std::string()) << ": the others will wait for it\n"
              << std::flush;
          if (stopped_culprit < 0) stopped_culprit = c.rank;
        } else if (WIFCONTINUED(status)) {
          c.stopped = false;
          if (stopped_culprit == c.rank) stopped_culprit = -1;
        } else {
          const bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
          if (failed && result.failure.empty()) {
            result.failure = "rank " + std::to_string(c.rank) + " (pid " + std::to_string(pid) + ") " +
                             (WIFSIGNALED(status) ? "died: " : "exited with ") + describe_exit(status);
            if (stopped_culprit >= 0 && stopped_culprit != c.rank)
              result.failure += " while rank " + std::to_string(stopped_culprit) + " was stopped (SIGSTOP)";
            err << "launcher: " << result.failure << "; stopping the other rank(s)\n" << std::flush;
            dying = true;
            term_at = std::chrono::steady_clock::now() + o.report_window;
          }
        }
      }
      all_done = all_done && c.exited() && c.child->out_fd() < 0 && c.child->err_fd() < 0;
    }
    if (all_done) break;
    // A rank stopped longer than the ranks' timeout: its peers (on other nodes too) have
    // given up on it, and nobody on this node may be left to fail and end it.
    for (const auto& c : children)
      if (!dying && !c.exited() && c.stopped && o.stopped_limit.count() > 0 &&
          std::chrono::steady_clock::now() - c.stopped_since > o.stopped_limit) {
        result.failure = "rank " + std::to_string(c.rank) + " (pid " + std::to_string(c.child->pid()) +
                         ") stayed stopped longer than the timeout (" + std::to_string(o.stopped_limit.count()) + " ms)";
        err << "launcher: " << result.failure << "; stopping it and the other rank(s)\n" << std::flush;
        dying = true;
        term_at = std::chrono::steady_clock::now();
      }
    // The report window is for ranks that can still say what they saw: end it when
    // every rank left is stopped.
    bool only_stopped_left = true;
    for (const auto& c : children) only_stopped_left = only_stopped_left && (c.exited() || c.stopped);
    if (dying && !stopping && (only_stopped_left || std::chrono::steady_clock::now() >= term_at)) {
      stop_others(SIGTERM);
      stopping = true;
      kill_at = std::chrono::steady_clock::now() + o.grace;
    }
    if (stopping && std::chrono::steady_clock::now() >= kill_at) {
      stop_others(SIGKILL);
      kill_at = std::chrono::steady_clock::now() + std::chrono::hours(1);
    }
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGHUP, &old_hup, nullptr);
  if (!o.run_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(o.run_dir, ec);
  }
  if (reaper > 0) {
    ::kill(reaper, SIGKILL);
    ::waitpid(reaper, nullptr, 0);
  }
  result.exit_code = result.failure.empty() ? 0 : 1;
  return result;
}

std::string end_with_launcher(const std::function<const char*(const char*)>& getenv) {
  auto set = [&](const char* name) {
    const char* v = getenv(name);
    return v && *v;
  };
  std::string launcher;
  if (set("DPB_LAUNCHED")) launcher = "dpbench";
  else if (set("TORCHELASTIC_RUN_ID")) launcher = "torchrun";
  else if (set("SLURM_STEP_ID")) launcher = "srun";
  else if (set("OMPI_COMM_WORLD_RANK") || set("PMIX_RANK")) launcher = "mpirun";
  else return {};
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  // The launcher may have died before the call: this process was then handed to init.
  if (::getppid() == 1) ::raise(SIGTERM);
  return launcher;
}

}  // namespace dpb::comm
