#include "engine/comm/rendezvous.h"

#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "engine/comm/tcp_store.h"
#include "engine/core/error.h"
#include "engine/core/log.h"

namespace dpb::comm {

namespace {

// The wildcard of MASTER_ADDR's family ("::" serves IPv4 too).
std::string wildcard_for(const std::string& master_addr) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  std::string w = "0.0.0.0";
  if (::getaddrinfo(master_addr.c_str(), nullptr, &hints, &res) == 0) {
    if (res && res->ai_family == AF_INET6) w = "::";
    ::freeaddrinfo(res);
  }
  return w;
}

}  // namespace

StoreBind store_bind_address(const RankEnv& env) {
  if (!env.store_bind.empty()) return {env.store_bind, "--store-bind/DPB_STORE_BIND"};
  if (is_loopback_address(env.master_addr)) return {env.master_addr, "MASTER_ADDR is a loopback address"};
  const std::vector<std::string> resolved = resolve_addresses(env.master_addr);
  for (const std::string& a : resolved)
    if (!is_loopback_address(a))
      if (const std::string itf = interface_holding(a); !itf.empty())
        return {a, "MASTER_ADDR " + env.master_addr + " is this node's address on " + itf};
  const bool to_loopback = !resolved.empty() && std::all_of(resolved.begin(), resolved.end(), [](const auto& a) {
    return is_loopback_address(a);
  });
  if (env.world_size > env.local_world_size || to_loopback)
    return {wildcard_for(env.master_addr),
            to_loopback ? "MASTER_ADDR " + env.master_addr + " resolves to loopback here (" + resolved.front() +
                              "), where no other node could reach it, while other nodes may reach this one at its "
                              "network address (a launcher that does not say how many ranks each node runs makes "
                              "a job of several nodes look like one): every address"
                        : "the job spans nodes (" + std::to_string(env.world_size) + " ranks, " +
                              std::to_string(env.local_world_size) + " on this node) and MASTER_ADDR " +
                              env.master_addr + " is none of this node's addresses: every address"};
  return {env.master_addr, "every rank is on this node: MASTER_ADDR's address"};
}

LocalAddress advertised_address(const RankEnv& env) {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname) {
    LocalAddress a = interface_address(ifname);
    a.why = "GLOO_SOCKET_IFNAME=" + std::string(ifname);
    return a;
  }
  const bool one_node = env.world_size == env.local_world_size;
  if (env.master_addr.empty() || (one_node && is_loopback_address(env.master_addr)))
    return {"127.0.0.1", "lo", "every rank is on this node"};
  LocalAddress a = address_toward(env.master_addr);
  if (is_loopback_address(a.address) && !is_loopback_address(env.master_addr)) {
    // MASTER_ADDR names this node but resolves to loopback here (Debian's 127.0.1.1):
    // the other nodes reach this one at the address of its default route. Nothing is
    // sent; where there is no such route, loopback stays (a job on one node).
    try {
      LocalAddress out = address_toward("203.0.113.1");
      if (!is_loopback_address(out.address)) {
        out.why = "MASTER_ADDR " + env.master_addr + " resolves to loopback here (" + a.address +
                  "): the address of this node's default route" +
                  (out.interface.empty() ? "" : " (" + out.interface + ")");
        return out;
      }
    } catch (const Error&) {
    }
    if (!one_node)
      log::warn("rank {}: MASTER_ADDR {} resolves to this node's loopback ({}) and the node has no default route, but "
                "the job spans nodes: the other nodes cannot reach this rank there; set GLOO_SOCKET_IFNAME",
                env.rank, env.master_addr, a.address);
  }
  return a;
}

std::shared_ptr<Store> rendezvous_store(const RankEnv& env, Millis timeout) {
  if (const char* dir = std::getenv("DPB_RUN_DIR"); dir && *dir) return std::make_shared<FileStore>(dir);
  if (env.world_size == 1) return std::make_shared<MemoryStore>();
  DPB_CHECK(!env.master_addr.empty() && env.master_port > 0)
      << "rank " << env.rank << " of " << env.world_size << " (from " << env.source
      << ") needs MASTER_ADDR and MASTER_PORT (or --master-addr/--master-port) to find the others";
  int port = env.master_port;
  if (const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE"); agent && std::strcmp(agent, "True") == 0)
    ++port;
  TcpStoreOptions o;
  o.timeout = timeout;
  if (const char* t = std::getenv("DPB_STORE_TOKEN"); t && *t) o.token = t;
  o.host_server = env.rank == 0;
  if (o.host_server) {
    const StoreBind bind = store_bind_address(env);
    o.bind = bind.address;
    log::info("tcp store: binding {} ({})", bind.address, bind.why);
    if (is_loopback_address(env.master_addr) && env.world_size > env.local_world_size)
      log::warn("MASTER_ADDR {} is a loopback address but the job spans nodes: the other nodes will look for the "
                "store on themselves; set MASTER_ADDR to this node's name or address", env.master_addr);
    if (o.token.empty())
      log::warn("DPB_STORE_TOKEN is not set, so the store at {}:{} admits any client that reaches it ({}); export "
                "the same secret on every rank's environment",
                env.master_addr, port,
                is_loopback_address(bind.address) ? "on loopback: any user of this machine" : "any host on the network");
  }
  return std::make_shared<TcpStore>(env.master_addr, port, o);
}

}  // namespace dpb::comm
