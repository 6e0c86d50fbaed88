#pragma once
// The store a rank meets the others through:
//   launched by dpbench on one node   the file store in DPB_RUN_DIR
//   several processes otherwise       a TCP store at MASTER_ADDR:MASTER_PORT, hosted by
//                                     global rank 0 (under torchrun, whose agent holds
//                                     MASTER_PORT itself, at MASTER_PORT + 1)
//   one process                       an in-memory store
// Rank 0's TCP store listens (store_bind_address) on --store-bind/DPB_STORE_BIND when
// given; else on every address of its node (the wildcard) when the job spans nodes, since
// MASTER_ADDR may resolve to loopback there (Debian and Ubuntu map the host's own name to
// 127.0.1.1) while the other nodes reach it at its network address; else on MASTER_ADDR's
// address. A store without DPB_STORE_TOKEN warns: on loopback any local user can join.
#include <memory>
#include <string>

#include "engine/comm/store.h"
#include "engine/core/env.h"

namespace dpb::comm {

std::shared_ptr<Store> rendezvous_store(const RankEnv& env, Millis timeout);

// "localhost", 127.x.y.z or ::1.
bool is_loopback_address(const std::string& addr);

// Where rank 0's store listens, and why (for the log).
struct StoreBind {
  std::string address;  // a name, an address, "0.0.0.0" or "::"
  std::string why;
};
StoreBind store_bind_address(const RankEnv& env);

}  // namespace dpb::comm
