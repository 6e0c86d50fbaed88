#pragma once
// The local launcher (torchrun --nproc-per-node=N): starts this node's ranks as child
// processes with torchrun's variables (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT) plus DPB_RUN_DIR (the file store of a one-node run) and
// DPB_LAUNCHED=1; forwards every line they print to our stdout/stderr prefixed with
// "[rank N] "; and when a rank dies (non-zero exit or a signal) reports which rank died
// and how, gives the others a moment to notice and say what they saw (their
// collectives fail naming the missing rank), then stops them (SIGTERM, then SIGKILL
// after a grace period).
// A rank stopped by a signal (SIGSTOP) is named as soon as it stops, and named again
// when another rank fails waiting for it; it is then terminated without waiting out the
// report window (SIGTERM with SIGCONT, so that it can act on it). One still stopped after
// `stopped_limit` (a little past the ranks' timeout) ends the job by itself: on a node of
// its own no sibling would fail to end it.
// SIGINT/SIGTERM sent to the launcher are passed on to the ranks; SIGHUP as SIGTERM.
#include <chrono>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

namespace dpb::comm {

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1, node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::vector<std::string> argv;  // every rank runs this command (argv[0]: the program)
  std::string run_dir;            // one node: the file store's directory (created, removed after)
  // After a death, before SIGTERM: long enough for slow survivors (sanitizer builds on a
  // busy machine) to print what they saw, short enough that a job ends within its
  // --timeout + 5 s when a rank hangs.
  std::chrono::milliseconds report_window{3000};
  std::chrono::milliseconds grace{3000};          // after SIGTERM, before SIGKILL
  // A rank stopped (SIGSTOP) this long ends the job (0: only when another rank fails):
  // a little past the ranks' --timeout, by when its peers have given up on it.
  std::chrono::milliseconds stopped_limit{0};
};

struct LaunchResult {
  int exit_code = 0;      // 0 when every rank exited 0
  std::string failure;    // which rank died first and how
};

LaunchResult launch(const LaunchOptions& options, std::ostream& err);

// "exit code 3", "killed by signal 9 (SIGKILL)"
std::string describe_exit(int wait_status);

// A rank that a launcher started (this one: DPB_LAUNCHED; torchrun's agent:
// TORCHELASTIC_RUN_ID; srun: SLURM_STEP_ID; mpirun: OMPI_COMM_WORLD_RANK or PMIX_RANK)
// ends when the launcher does: the kernel sends it SIGTERM when its parent exits
// (PR_SET_PDEATHSIG), and a rank whose launcher is already gone by then ends at once.
// Without it a rank whose launcher died waits out its timeout, or for ever where nothing
// bounds the wait. Ranks started by hand (torchrun's variables set in a shell, `nohup
// dpbench &`) are left alone: their parent may be a shell that has already exited.
// Returns the launcher's name, empty when none was recognised.
std::string end_with_launcher(const std::function<const char*(const char*)>& getenv);

}  // namespace dpb::comm
