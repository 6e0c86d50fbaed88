#pragma once
// Who this process is in a multi-process run: rank, world size, local rank, and where
// the rendezvous store lives. From flags first, else the environment of the launcher
// that started us, in this order:
//   torchrun     RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
//   Slurm        SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS, SLURM_NTASKS_PER_NODE
//   Open MPI     OMPI_COMM_WORLD_RANK, _LOCAL_RANK, _SIZE, _LOCAL_SIZE
// (MASTER_ADDR/MASTER_PORT, when set, also serve Slurm and Open MPI runs; DPB_STORE_BIND
// or --store-bind, where rank 0's store listens.) A launcher
// that is found but lacks a variable is an error naming that variable.
#include <functional>
#include <optional>
#include <string>

namespace dpb {

struct RankFlags {
  std::optional<int> rank, world_size, local_rank, local_world_size;
  std::string master_addr;
  int master_port = 0;
  std::string store_bind;  // --store-bind (else DPB_STORE_BIND)
};

struct RankEnv {
  int rank = 0, world_size = 1, local_rank = 0, local_world_size = 1;
  std::string master_addr;  // empty: no TCP store address known
  int master_port = 0;
  std::string store_bind;   // where rank 0's store listens; empty: rendezvous.h decides
  std::string source;       // flags | torchrun | slurm | openmpi | none
};

using GetEnv = std::function<const char*(const char*)>;

// The rank of this process; `source` "none" (rank 0 of 1) when nothing says otherwise.
RankEnv resolve_rank_env(const RankFlags& flags, const GetEnv& getenv);
RankEnv resolve_rank_env(const RankFlags& flags);

}  // namespace dpb
