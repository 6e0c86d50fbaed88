#include "engine/core/env.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "engine/core/error.h"

namespace dpb {

namespace {

int parse_int(const GetEnv& getenv, const char* name, const char* launcher) {
  const char* v = getenv(name);
  DPB_CHECK(v && *v) << launcher << " environment found but " << name << " is not set";
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  DPB_CHECK(end && *end == '\0' && x >= 0 && x < (1 << 24)) << name << "='" << v << "' is not a valid count or index";
  return static_cast<int>(x);
}

void master_from_env(const GetEnv& getenv, RankEnv& r) {
  if (const char* a = getenv("MASTER_ADDR"); a && *a) r.master_addr = a;
  if (const char* p = getenv("MASTER_PORT"); p && *p) {
    char* end = nullptr;
    const long port = std::strtol(p, &end, 10);
    DPB_CHECK(end && *end == '\0' && port > 0 && port < 65536) << "MASTER_PORT='" << p << "' is not a port number";
    r.master_port = static_cast<int>(port);
  }
}

// Tasks on this node: SLURM_NTASKS_PER_NODE (set only with --ntasks-per-node), else the
// step's or the job's tasks per node ("2(x3),1": two on each of the first three nodes, one
// on the fourth), indexed by SLURM_NODEID; where none is set, the world shared out over
// SLURM_NNODES (so that a job of several nodes is never taken to be on this one), at least
// enough for this task's local id.
int slurm_tasks_on_this_node(const GetEnv& getenv, int world, int local_rank) {
  auto set = [&](const char* n) -> const char* {
    const char* v = getenv(n);
    return v && *v ? v : nullptr;
  };
  const char* node_id = set("SLURM_NODEID");
  const int node = node_id ? std::atoi(node_id) : 0;
  for (const char* name : {"SLURM_NTASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
    const char* spec = set(name);
    if (!spec) continue;
    if (std::string(name) == "SLURM_NTASKS_PER_NODE") return std::max(1, std::atoi(spec));  // one count for all
    int first = 0;  // the first node of the current entry
    for (const char* p = spec; *p;) {
      char* end = nullptr;
      const long count = std::strtol(p, &end, 10);
      if (end == p) break;
      long repeat = 1;
      p = end;
      if (*p == '(' && p[1] == 'x') {
        repeat = std::strtol(p + 2, &end, 10);
        p = *end == ')' ? end + 1 : end;
      }
      if (node < first + repeat) return std::max(1, static_cast<int>(count));
      first += static_cast<int>(repeat);
      if (*p == ',') ++p;
      else break;
    }
  }
  const char* nodes_text = set("SLURM_NNODES") ? set("SLURM_NNODES") : set("SLURM_JOB_NUM_NODES");
  const int nodes = nodes_text ? std::max(1, std::atoi(nodes_text)) : 1;
  return std::max((world + nodes - 1) / nodes, local_rank + 1);
}

}  // namespace

RankEnv resolve_rank_env(const RankFlags& f, const GetEnv& getenv) {
  RankEnv r;
  if (f.rank || f.world_size) {
    DPB_CHECK(f.rank && f.world_size) << "--rank and --world-size go together";
    r.source = "flags";
    r.rank = *f.rank;
    r.world_size = *f.world_size;
    r.local_rank = f.local_rank.value_or(r.rank);
    r.local_world_size = f.local_world_size.value_or(r.world_size);
    master_from_env(getenv, r);
  } else if (getenv("RANK") && *getenv("RANK")) {
    r.source = "torchrun";
    r.rank = parse_int(getenv, "RANK", "torchrun");
    r.world_size = parse_int(getenv, "WORLD_SIZE", "torchrun");
    r.local_rank = parse_int(getenv, "LOCAL_RANK", "torchrun");
    r.local_world_size = parse_int(getenv, "LOCAL_WORLD_SIZE", "torchrun");
    master_from_env(getenv, r);
    DPB_CHECK(!r.master_addr.empty()) << "torchrun environment found but MASTER_ADDR is not set";
    DPB_CHECK(r.master_port > 0) << "torchrun environment found but MASTER_PORT is not set";
  } else if (getenv("SLURM_PROCID") && *getenv("SLURM_PROCID")) {
    r.source = "slurm";
    r.rank = parse_int(getenv, "SLURM_PROCID", "Slurm");
    r.world_size = parse_int(getenv, "SLURM_NTASKS", "Slurm");
    r.local_rank = parse_int(getenv, "SLURM_LOCALID", "Slurm");
    r.local_world_size = slurm_tasks_on_this_node(getenv, r.world_size, r.local_rank);
    master_from_env(getenv, r);
    if (r.master_addr.empty())
      if (const char* ip = getenv("SLURM_LAUNCH_NODE_IPADDR"); ip && *ip) r.master_addr = ip;
  } else if (getenv("OMPI_COMM_WORLD_RANK") && *getenv("OMPI_COMM_WORLD_RANK")) {
    r.source = "openmpi";
    r.rank = parse_int(getenv, "OMPI_COMM_WORLD_RANK", "Open MPI");
    r.world_size = parse_int(getenv, "OMPI_COMM_WORLD_SIZE", "Open MPI");
    r.local_rank = parse_int(getenv, "OMPI_COMM_WORLD_LOCAL_RANK", "Open MPI");
    r.local_world_size = parse_int(getenv, "OMPI_COMM_WORLD_LOCAL_SIZE", "Open MPI");
    master_from_env(getenv, r);
  } else {
    r.source = "none";
    master_from_env(getenv, r);
  }
  if (!f.master_addr.empty()) r.master_addr = f.master_addr;
  if (f.master_port > 0) r.master_port = f.master_port;
  if (!f.store_bind.empty()) r.store_bind = f.store_bind;
  else if (const char* b = getenv("DPB_STORE_BIND"); b && *b) r.store_bind = b;
  DPB_CHECK(r.world_size >= 1 && r.rank >= 0 && r.rank < r.world_size)
      << "rank " << r.rank << " is outside a world of " << r.world_size << " (from " << r.source << ")";
  DPB_CHECK(r.local_world_size >= 1 && r.local_rank >= 0 && r.local_rank < r.local_world_size)
      << "local rank " << r.local_rank << " is outside " << r.local_world_size << " local ranks (from " << r.source
      << ")";
  return r;
}

RankEnv resolve_rank_env(const RankFlags& flags) {
  return resolve_rank_env(flags, [](const char* n) -> const char* { return std::getenv(n); });
}

}  // namespace dpb
