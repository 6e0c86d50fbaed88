#include "engine/comm/rendezvous.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "engine/comm/tcp_store.h"
#include "engine/core/error.h"
#include "engine/core/log.h"

namespace dpb::comm {

std::shared_ptr<Store> rendezvous_store(const RankEnv& env, Millis timeout) {
  if (const char* dir = std::getenv("DPB_RUN_DIR"); dir && *dir) return std::make_shared<FileStore>(dir);
  if (env.world_size == 1) return std::make_shared<MemoryStore>();
  DPB_CHECK(!env.master_addr.empty() && env.master_port > 0)
      << "rank " << env.rank << " of " << env.world_size << " (from " << env.source
      << ") needs MASTER_ADDR and MASTER_PORT (or --master-addr/--master-port) to find the others";
  int port = env.master_port;
  if (const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE"); agent && std::strcmp(agent, "True") == 0)
    ++port;
  std::string token;
  if (const char* t = std::getenv("DPB_STORE_TOKEN"); t && *t) token = t;
  const bool loopback = env.master_addr == "localhost" || env.master_addr.rfind("127.", 0) == 0 ||
                        env.master_addr == "::1";
  if (token.empty() && env.rank == 0 && !loopback)
    log::warn("DPB_STORE_TOKEN is not set, so the store at {}:{} admits any client that reaches it; export the "
              "same secret on every node", env.master_addr, port);
  return std::make_shared<TcpStore>(env.master_addr, port, env.rank == 0, timeout, token);
}

}  // namespace dpb::comm
