#pragma once
// The store a rank meets the others through:
//   launched by dpbench on one node   the file store in DPB_RUN_DIR
//   several processes otherwise       a TCP store at MASTER_ADDR:MASTER_PORT, hosted by
//                                     global rank 0 (under torchrun, whose agent holds
//                                     MASTER_PORT itself, at MASTER_PORT + 1)
//   one process                       an in-memory store
// Rank 0's TCP store listens (store_bind_address) on --store-bind/DPB_STORE_BIND when
// given; else, when the job spans nodes, on MASTER_ADDR's address where that is an address
// of this node's interfaces, and on every address of its node (the wildcard) where it is
// not: MASTER_ADDR may resolve to loopback there (Debian and Ubuntu map the host's own
// name to 127.0.1.1) while the other nodes reach it at its network address; else (every
// rank on this node) on MASTER_ADDR's address. A store without DPB_STORE_TOKEN warns: on
// loopback any local user can join.
//
// Every rank tells the others where to reach it (Gloo's listening address, NCCL's
// bootstrap interface) with advertised_address: loopback when the whole job is on this
// node, else the address this node reaches MASTER_ADDR from, or the interface
// GLOO_SOCKET_IFNAME names.
#include <memory>
#include <string>

#include "engine/comm/net_address.h"
#include "engine/comm/store.h"
#include "engine/core/env.h"

namespace dpb::comm {

std::shared_ptr<Store> rendezvous_store(const RankEnv& env, Millis timeout);

// Where rank 0's store listens, and why (for the log).
struct StoreBind {
  std::string address;  // a name, an address, "0.0.0.0" or "::"
  std::string why;
};
StoreBind store_bind_address(const RankEnv& env);

// Where the other ranks reach this one (numeric), and why.
LocalAddress advertised_address(const RankEnv& env);

}  // namespace dpb::comm
