// Rank information from flags, torchrun, Slurm and Open MPI; a missing variable is named.
#include "engine/core/env.h"

#include <gtest/gtest.h>

#include <map>

#include "engine/core/error.h"

namespace dpb {
namespace {

GetEnv from(std::map<std::string, std::string> vars) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

TEST(RankEnv, TorchrunSlurmOpenMpiAndFlags) {
  RankEnv t = resolve_rank_env({}, from({{"RANK", "3"}, {"LOCAL_RANK", "1"}, {"WORLD_SIZE", "4"},
                                         {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29500"}}));
  EXPECT_EQ(t.source, "torchrun");
  EXPECT_EQ(t.rank, 3);
  EXPECT_EQ(t.local_rank, 1);
  EXPECT_EQ(t.world_size, 4);
  EXPECT_EQ(t.local_world_size, 2);
  EXPECT_EQ(t.master_addr, "node0");
  EXPECT_EQ(t.master_port, 29500);

  RankEnv s = resolve_rank_env({}, from({{"SLURM_PROCID", "5"}, {"SLURM_LOCALID", "1"}, {"SLURM_NTASKS", "8"},
                                         {"SLURM_NTASKS_PER_NODE", "4(x2)"}, {"SLURM_LAUNCH_NODE_IPADDR", "10.0.0.1"}}));
  EXPECT_EQ(s.source, "slurm");
  EXPECT_EQ(s.rank, 5);
  EXPECT_EQ(s.local_world_size, 4);
  EXPECT_EQ(s.master_addr, "10.0.0.1");

  // Without --ntasks-per-node Slurm sets no SLURM_NTASKS_PER_NODE: the tasks per node
  // come from the job's layout, this node's entry by SLURM_NODEID, and a job of several
  // nodes is never taken to be all on this one (its store would bind loopback).
  auto slurm_local = [&](std::map<std::string, std::string> v) {
    v.insert({{"SLURM_PROCID", "4"}, {"SLURM_LOCALID", "0"}, {"SLURM_NTASKS", "5"}});
    return resolve_rank_env({}, from(v)).local_world_size;
  };
  EXPECT_EQ(slurm_local({{"SLURM_TASKS_PER_NODE", "2(x2),1"}, {"SLURM_NODEID", "2"}}), 1);
  EXPECT_EQ(slurm_local({{"SLURM_TASKS_PER_NODE", "2(x2),1"}, {"SLURM_NODEID", "1"}}), 2);
  EXPECT_EQ(slurm_local({{"SLURM_STEP_TASKS_PER_NODE", "3,2"}, {"SLURM_TASKS_PER_NODE", "5"}, {"SLURM_NODEID", "1"}}),
            2);
  EXPECT_EQ(slurm_local({{"SLURM_NNODES", "3"}}), 2);  // nothing else: 5 tasks over 3 nodes
  EXPECT_EQ(slurm_local({}), 5);                       // one node

  RankEnv m = resolve_rank_env({}, from({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "3"},
                                         {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"}}));
  EXPECT_EQ(m.source, "openmpi");
  EXPECT_EQ(m.rank, 2);
  EXPECT_EQ(m.world_size, 3);

  RankFlags f;
  f.rank = 1;
  f.world_size = 2;
  f.master_port = 1234;
  RankEnv fl = resolve_rank_env(f, from({{"RANK", "7"}, {"WORLD_SIZE", "8"}}));  // flags win
  EXPECT_EQ(fl.source, "flags");
  EXPECT_EQ(fl.rank, 1);
  EXPECT_EQ(fl.master_port, 1234);

  RankEnv none = resolve_rank_env({}, from({}));
  EXPECT_EQ(none.source, "none");
  EXPECT_EQ(none.world_size, 1);
}

TEST(RankEnv, MissingOrBadVariableIsNamed) {
  auto message = [](const GetEnv& env) {
    try {
      resolve_rank_env({}, env);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(from({{"RANK", "0"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "1"}})).find("WORLD_SIZE is not set"),
            std::string::npos);
  EXPECT_NE(message(from({{"RANK", "0"}, {"LOCAL_RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_WORLD_SIZE", "1"}}))
                .find("MASTER_ADDR is not set"),
            std::string::npos);
  EXPECT_NE(message(from({{"SLURM_PROCID", "x"}})).find("SLURM_PROCID='x'"), std::string::npos);
  EXPECT_NE(message(from({{"OMPI_COMM_WORLD_RANK", "4"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                          {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"}}))
                .find("rank 4 is outside a world of 2"),
            std::string::npos);
}

}  // namespace
}  // namespace dpb
