#include "benchmarks/dpbench/launch.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "benchmarks/dpbench/benchmark.h"
#include "benchmarks/dpbench/predict.h"
#include "benchmarks/dpbench/prove.h"
#include "benchmarks/dpbench/rank.h"
#include "benchmarks/dpbench/sweep.h"
#include "benchmarks/dpbench/verify.h"
#include "engine/comm/launcher.h"
#include "engine/core/file_io.h"
#include "engine/core/log.h"

namespace dpb::bench {

bool should_launch(const BenchOptions& o, const RankEnv& env) {
  if (env.source != "none") return false;
  const char* launched = std::getenv("DPB_LAUNCHED");
  if (launched && *launched) return false;
  return o.device.count > 1 || o.ranks.nnodes > 1;
}

int launch_ranks(const BenchOptions& o, const std::vector<std::string>& argv) {
  comm::LaunchOptions lo;
  lo.nproc_per_node = o.device.count;
  lo.nnodes = o.ranks.nnodes;
  lo.node_rank = o.ranks.node_rank;
  lo.master_addr = o.ranks.master_addr;
  lo.master_port = o.ranks.master_port;
  lo.argv = argv;
  // Past the ranks' timeout, by when a sibling waiting on a stopped rank has failed and
  // named it (then the usual path ends the job); 2 s more leaves it time to say so.
  lo.stopped_limit = std::chrono::milliseconds(static_cast<int64_t>(o.ranks.timeout_s * 1000) + 2000);
  if (o.ranks.nnodes == 1)
    lo.run_dir = (std::filesystem::temp_directory_path() / ("dpbench-run-" + std::to_string(::getpid()))).string();
  log::info("launching {} rank(s) on this node (node {} of {}){}", o.device.count, o.ranks.node_rank, o.ranks.nnodes,
            o.ranks.nnodes > 1 ? fmt::format(", store at {}:{}", o.ranks.master_addr, o.ranks.master_port) : "");
  const comm::LaunchResult r = comm::launch(lo, std::cerr);
  if (r.exit_code != 0) std::cerr << "dpbench: error: " << r.failure << "\n";
  return r.exit_code;
}

int run(BenchOptions o, const std::vector<std::string>& argv) {
  // One run of a sweep (or a rank of one): the sweep's command line, this run's options.
  if (const auto r = sweep_run_from_environment()) {
    DPB_CHECK(!o.sweep.empty()) << kSweepRunVariable << " names a run of a sweep, but this command line is no sweep "
                                << "(one --gpus count and no --repeat)";
    o = sweep_run(o, *r);
  }
  if (o.bench == BenchKind::simulate) {
    validate_simulate(o);
    if (!o.out.json_path.empty()) check_writable(o.out.json_path);
    return run_simulation(o, argv, std::cout);
  }
  if (o.out.prove) {
    DPB_CHECK(o.bench == BenchKind::train && !o.verify.enabled)
        << "--doctor=prove proves a training run's findings (not --bench="
        << (o.bench == BenchKind::collectives ? "collectives" : "simulate") << " or --verify)";
    DPB_CHECK(o.sweep.empty()) << "--doctor=prove proves one run's findings: give one --gpus count and no --repeat "
                                  "(a sweep's findings are its largest run's: prove that run)";
    // The proving runs are jobs of their own, started from here: a rank of a job another
    // launcher started cannot start them (its peers would wait for it in vain).
    if (const RankEnv env = rank_env(o); env.source != "none")
      DPB_FAIL() << "--doctor=prove runs the job again, as its own jobs, but this process is rank " << env.rank
                 << " of " << env.world_size << " of a job started by " << env.source
                 << ": start dpbench --doctor=prove once, on one node, and let it start the ranks (--gpus=N)";
    validate(o);
    if (!o.out.json_path.empty()) check_writable(o.out.json_path);
    return run_prove(o, argv);
  }
  if (!o.sweep.empty()) {
    DPB_CHECK(o.bench == BenchKind::train && !o.verify.enabled) << "--gpus lists and --repeat are for training benchmarks";
    // A sweep runs each point (and each repeat) as a job of its own; a rank of a job that
    // another launcher started cannot: its peers would wait for it in vain.
    if (const RankEnv env = rank_env(o); env.source != "none")
      DPB_FAIL() << "--repeat and --gpus lists run each point as a job of its own, but this process is rank "
                 << env.rank << " of " << env.world_size << " of a job started by " << env.source
                 << ": run that job once per repeat, or let dpbench start the ranks (--gpus=N, --nnodes)";
    DPB_CHECK(o.mode != ParallelMode::single || o.sweep.size() == 1)
        << "--mode=single runs on one device; sweep --gpus with --mode=dp, ddp or mp";
    // Every point checked before any runs.
    for (int n : o.sweep) validate(sweep_point(o, n));
    if (mode_info(o.mode).splits_layers || o.ddp.tp > 1)
      for (int n : o.sweep) check_tensor_parallel(sweep_point(o, n));
    if (!o.out.json_path.empty()) check_writable(o.out.json_path);
    return run_sweep(o, argv);
  }
  apply_visible_devices(o);
  if (o.bench == BenchKind::collectives) {
    validate_collectives(o);
    if (!o.out.json_path.empty()) check_writable(o.out.json_path);
    if (should_launch(o, rank_env(o))) return launch_ranks(o, argv);
    return run_collectives_rank(o, argv);
  }
  validate(o);
  if ((mode_info(o.mode).splits_layers || o.ddp.tp > 1) && rank_env(o).source == "none" && !std::getenv("DPB_LAUNCHED"))
    check_tensor_parallel(o);
  for (const auto* path : {&o.out.json_path, &o.out.trace_path})
    if (!path->empty()) check_writable(*path);
  check_checkpoint_writable(o);
  if (is_distributed(o.mode)) {
    if (should_launch(o, rank_env(o))) return launch_ranks(o, argv);
    return run_ddp_rank(o, argv);
  }
  if (o.verify.enabled) return run_verify(o, std::cout).passed ? 0 : 1;
  run_benchmark(o, argv, std::cout);
  return 0;
}

}  // namespace dpb::bench
