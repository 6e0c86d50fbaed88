#include "benchmarks/dpbench/distributed.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "engine/backend/cpu/cpu_context.h"
#include "engine/comm/launcher.h"
#include "engine/comm/rendezvous.h"
#include "engine/core/log.h"
#include "reports/report.h"

namespace dpb::bench {

namespace {

comm::Millis timeout_of(const BenchOptions& o) {
  return comm::Millis(static_cast<int64_t>(o.timeout_s * 1000.0));
}

std::string backend_of(const BenchOptions& o) {
  if (!o.backend.empty()) return o.backend;
  return o.devices == "cuda" ? "nccl" : "gloo";
}

bool is_loopback(const std::string& addr) {
  return addr.empty() || addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

// The address other ranks reach this one at: loopback when every rank is on this node.
std::string gloo_host(const BenchOptions& o, const RankEnv& env) {
  if (env.world_size == env.local_world_size && is_loopback(env.master_addr)) return "127.0.0.1";
  char name[256] = {0};
  ::gethostname(name, sizeof(name) - 1);
  return name;
}

}  // namespace

RankEnv rank_env(const BenchOptions& o) {
  RankFlags f;
  f.rank = o.rank;
  f.world_size = o.world_size;
  f.local_rank = o.local_rank;
  return resolve_rank_env(f);
}

bool should_launch(const BenchOptions& o, const RankEnv& env) {
  if (env.source != "none") return false;
  const char* launched = std::getenv("DPB_LAUNCHED");
  if (launched && *launched) return false;
  return o.gpus > 1 || o.nnodes > 1;
}

int launch_ranks(const BenchOptions& o, const std::vector<std::string>& argv) {
  comm::LaunchOptions lo;
  lo.nproc_per_node = o.gpus;
  lo.nnodes = o.nnodes;
  lo.node_rank = o.node_rank;
  lo.master_addr = o.master_addr;
  lo.master_port = o.master_port;
  lo.argv = argv;
  if (o.nnodes == 1)
    lo.run_dir = (std::filesystem::temp_directory_path() / ("dpbench-run-" + std::to_string(::getpid()))).string();
  log::info("launching {} rank(s) on this node (node {} of {}){}", o.gpus, o.node_rank, o.nnodes,
            o.nnodes > 1 ? fmt::format(", store at {}:{}", o.master_addr, o.master_port) : "");
  const comm::LaunchResult r = comm::launch(lo, std::cerr);
  if (r.exit_code != 0) std::cerr << "dpbench: error: " << r.failure << "\n";
  return r.exit_code;
}

int run_collectives_rank(const BenchOptions& o, const std::vector<std::string>& argv) {
  RankEnv env = rank_env(o);
  DPB_CHECK(o.collectives.kill_rank < env.world_size)
      << "--kill-rank=" << o.collectives.kill_rank << " but there are " << env.world_size << " rank(s)";
  const int threads = o.threads > 0 ? o.threads : std::max(1, cpu::hardware_threads() / env.local_world_size);
  cpu::set_threads_per_device(threads);
  cpu::CpuDeviceScope scope(0);
  const Device device = o.devices == "cuda" ? Device::cuda(env.local_rank) : Device::cpu(0);
  auto store = comm::rendezvous_store(env, timeout_of(o));
  comm::GroupOptions go;
  go.timeout = timeout_of(o);
  go.debug_collectives = o.debug_collectives;
  go.host = gloo_host(o, env);
  const std::string backend = backend_of(o);
  auto pg = comm::make_process_group(backend, store, env.rank, env.world_size, go, device);
  if (env.rank == 0) {
    std::cout << fmt::format("dpbench collectives | backend {} | {} rank(s) | {} | {} warm-up + {} timed iterations\n",
                             backend, env.world_size, o.devices == "cuda" ? "cuda" : "cpu", o.collectives.warmup,
                             o.collectives.iters);
    if (env.world_size == 1)
      std::cout << "note: one rank: collectives move no data between ranks, so the times are the cost of a call and "
                   "the bandwidths say nothing about links\n";
  }
  std::ostream null_out(nullptr);
  const nlohmann::json rows = run_collectives(*pg, device, o.collectives, env.rank == 0 ? std::cout : null_out);
  pg->barrier()->wait();  // no rank leaves while another still checks its results
  if (env.rank == 0 && !o.json_path.empty()) {
    nlohmann::json doc = reports::report_header(argv);
    doc["schema"] = "dpbench.collectives/1";
    doc["config"] = {{"backend", backend},
                     {"world_size", env.world_size},
                     {"devices", o.devices},
                     {"ops", o.collectives.ops},
                     {"min_bytes", o.collectives.min_bytes},
                     {"max_bytes", o.collectives.max_bytes},
                     {"factor", o.collectives.factor},
                     {"warmup", o.collectives.warmup},
                     {"iters", o.collectives.iters},
                     {"launcher", env.source}};
    doc["results"] = rows;
    reports::write_report(o.json_path, doc);
    log::info("report written to {}", o.json_path);
  }
  int64_t wrong = 0;
  for (const auto& r : rows) wrong += r["wrong"].get<int64_t>();
  if (wrong > 0) {
    std::cerr << "dpbench: error: " << wrong << " wrong element(s) in the collectives' results\n";
    return 1;
  }
  return 0;
}

}  // namespace dpb::bench
