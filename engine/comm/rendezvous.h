#pragma once
// The store a rank meets the others through:
//   launched by dpbench on one node   the file store in DPB_RUN_DIR
//   several processes otherwise       a TCP store at MASTER_ADDR:MASTER_PORT, hosted by
//                                     global rank 0 (under torchrun, whose agent holds
//                                     MASTER_PORT itself, at MASTER_PORT + 1)
//   one process                       an in-memory store
#include <memory>

#include "engine/comm/store.h"
#include "engine/core/env.h"

namespace dpb::comm {

std::shared_ptr<Store> rendezvous_store(const RankEnv& env, Millis timeout);

}  // namespace dpb::comm
