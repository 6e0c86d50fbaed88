// Where rank 0's TCP store listens, and a job that spans two "nodes" on one machine:
// each node is a process in a mount namespace of its own with its own /etc/hosts, as two
// hosts have. On node 0 the host's name resolves to 127.0.1.1 (what Debian and Ubuntu
// write for the machine's own name); node 1 reaches node 0 at its "network" address,
// 127.0.0.3. A store bound where MASTER_ADDR resolves on node 0 (loopback) turns node 1
// away; the default for a job that spans nodes (every address) lets it in.
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "engine/comm/rendezvous.h"
#include "engine/comm/tcp_store.h"
#include "engine/core/error.h"

namespace dpb::comm {
namespace {

namespace fs = std::filesystem;

RankEnv node_env(int rank, const std::string& master, int port) {
  RankEnv e;
  e.rank = rank;
  e.world_size = 2;
  e.local_rank = 0;
  e.local_world_size = 1;  // one rank per node: the job spans two nodes
  e.master_addr = master;
  e.master_port = port;
  e.source = "torchrun";
  return e;
}

TEST(StoreBind, TheStoreListensWhereOtherNodesReachIt) {
  RankEnv e = node_env(0, "node0.example", 29500);
  StoreBind b = store_bind_address(e);
  EXPECT_TRUE(b.address == "0.0.0.0" || b.address == "::") << b.address;  // spans nodes: every address
  EXPECT_NE(b.why.find("spans nodes"), std::string::npos) << b.why;
  e.local_world_size = 2;  // every rank on this node: MASTER_ADDR's own address
  EXPECT_EQ(store_bind_address(e).address, "node0.example");
  e.master_addr = "127.0.0.1";
  EXPECT_EQ(store_bind_address(e).address, "127.0.0.1");
  e.local_world_size = 1;  // a loopback MASTER_ADDR stays on loopback (it cannot span nodes)
  EXPECT_EQ(store_bind_address(e).address, "127.0.0.1");
  e.store_bind = "10.1.2.3";  // --store-bind / DPB_STORE_BIND win
  EXPECT_EQ(store_bind_address(e).address, "10.1.2.3");
  EXPECT_NE(store_bind_address(e).why.find("--store-bind"), std::string::npos);
}

TEST(StoreBind, AStoreWithoutATokenWarnsEvenOnLoopback) {
  ::unsetenv("DPB_RUN_DIR");
  ::unsetenv("DPB_STORE_TOKEN");
  RankEnv e = node_env(0, "127.0.0.1", 0);
  e.local_world_size = 2;
  {  // a free port
    TcpStoreServer probe("127.0.0.1", 0, "");
    e.master_port = probe.port();
  }
  testing::internal::CaptureStderr();
  { auto store = rendezvous_store(e, Millis(3000)); }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("DPB_STORE_TOKEN is not set"), std::string::npos) << err;
  EXPECT_NE(err.find("any user of this machine"), std::string::npos) << err;
  ::setenv("DPB_STORE_TOKEN", "secret", 1);
  testing::internal::CaptureStderr();
  { auto store = rendezvous_store(e, Millis(3000)); }
  const std::string quiet = testing::internal::GetCapturedStderr();
  EXPECT_EQ(quiet.find("DPB_STORE_TOKEN"), std::string::npos) << quiet;
  ::unsetenv("DPB_STORE_TOKEN");
}

// Makes this process a node whose /etc/hosts says `hosts`: a mount namespace of its own
// (with a user namespace where that needs one) and a hosts file bound over the real one.
// Returns what went wrong, empty when done.
std::string become_node(const std::string& hosts, const fs::path& dir) {
  if (::unshare(CLONE_NEWNS) != 0 && ::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0)
    return std::string("unshare: ") + std::strerror(errno);
  if (::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    return std::string("mount --make-rprivate /: ") + std::strerror(errno);
  const fs::path file = dir / ("hosts." + std::to_string(::getpid()));
  std::ofstream(file) << hosts;
  if (::mount(file.c_str(), "/etc/hosts", nullptr, MS_BIND, nullptr) != 0)
    return std::string("mount --bind /etc/hosts: ") + std::strerror(errno);
  return {};
}

// Exit codes of the node processes.
// kPortTaken: the free port found beforehand was taken by another process before node 0
// listened on it (tests run side by side); the pair is run again on another.
constexpr int kJoined = 0, kNoNamespace = 10, kRefused = 11, kOtherError = 12, kPortTaken = 13;

pid_t start_node(int rank, const std::string& hosts, const RankEnv& env, const fs::path& dir) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  if (const std::string why = become_node(hosts, dir); !why.empty()) {
    std::fprintf(stderr, "node %d: %s\n", rank, why.c_str());
    ::_exit(kNoNamespace);
  }
  try {
    auto store = rendezvous_store(env, Millis(rank == 0 ? 6000 : 2000));
    store->set("node" + std::to_string(rank), "up");
    (void)store->get("node" + std::to_string(1 - rank), Millis(6000));
    std::this_thread::sleep_for(Millis(300));  // node 0 hosts the store: let node 1 finish
    ::_exit(kJoined);
  } catch (const Error& e) {
    std::fprintf(stderr, "node %d: %s\n", rank, e.what());
    const std::string what = e.what();
    ::_exit(what.find("could not connect") != std::string::npos ? kRefused
            : what.find("Address already in use") != std::string::npos ? kPortTaken
                                                                         : kOtherError);
  }
  ::_exit(kOtherError);
}

int wait_node(pid_t pid, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(Millis(20));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Runs node 0 and node 1; returns node 1's exit code (node 0's through *node0).
int run_two_nodes_once(const std::string& bind, int* node0);
int run_two_nodes(const std::string& bind, int* node0) {
  int node1 = run_two_nodes_once(bind, node0);
  for (int again = 0; again < 3 && *node0 == kPortTaken; ++again) node1 = run_two_nodes_once(bind, node0);
  return node1;
}

int run_two_nodes_once(const std::string& bind, int* node0) {
  ::unsetenv("DPB_RUN_DIR");
  ::setenv("DPB_STORE_TOKEN", "two-nodes", 1);
  const fs::path dir = fs::temp_directory_path() / ("dpb_nodes_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  int port = 0;
  {
    TcpStoreServer probe("127.0.0.1", 0, "");
    port = probe.port();
  }
  RankEnv e0 = node_env(0, "dpb-node0", port), e1 = node_env(1, "dpb-node0", port);
  e0.store_bind = bind;
  const pid_t p0 = start_node(0, "127.0.0.1 localhost\n127.0.1.1 dpb-node0\n", e0, dir);
  const pid_t p1 = start_node(1, "127.0.0.1 localhost\n127.0.0.3 dpb-node0\n", e1, dir);
  const int c1 = wait_node(p1, std::chrono::seconds(20));
  if (c1 != kJoined && c1 != kNoNamespace) ::kill(p0, SIGKILL);  // node 0 would wait for node 1 in vain
  *node0 = wait_node(p0, std::chrono::seconds(20));
  ::unsetenv("DPB_STORE_TOKEN");
  std::error_code ec;
  fs::remove_all(dir, ec);
  return c1;
}

TEST(StoreBind, ASecondNodeJoinsWhenTheHostsNameResolvesToLoopback) {
  int node0 = -1;
  const int node1 = run_two_nodes("", &node0);
  if (node1 == kNoNamespace || node0 == kNoNamespace)
    GTEST_SKIP() << "this machine lets no process have a mount namespace of its own";
  EXPECT_EQ(node1, kJoined) << "node 1 could not join the store on node 0";
  EXPECT_EQ(node0, kJoined);
}

TEST(StoreBind, BoundToWhereTheNameResolvesOnItsOwnNodeTheStoreTurnsOtherNodesAway) {
  // What the store did before it bound the wildcard for multi-node jobs: the failure the
  // default avoids, so that the test above can fail.
  int node0 = -1;
  const int node1 = run_two_nodes("dpb-node0", &node0);
  if (node1 == kNoNamespace || node0 == kNoNamespace)
    GTEST_SKIP() << "this machine lets no process have a mount namespace of its own";
  EXPECT_EQ(node1, kRefused);
  EXPECT_NE(node0, kJoined);
}


// A name that resolves to loopback here (a stock Debian host's own name) is never where
// the store listens or where a rank says it can be reached, even where the launcher did
// not say that the job spans nodes (Slurm without --ntasks-per-node, --rank/--world-size).
TEST(StoreBind, ANameThatResolvesToLoopbackIsNeitherBoundNorAdvertised) {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  const std::vector<std::string> addrs = resolve_addresses(host);
  if (addrs.empty() || !is_loopback_address(addrs.front()))
    GTEST_SKIP() << "this machine's name (" << host << ") does not resolve to loopback";
  RankEnv e = node_env(0, host, 29500);
  e.local_world_size = 2;  // the launcher says: every rank on this node
  const StoreBind b = store_bind_address(e);
  EXPECT_TRUE(b.address == "0.0.0.0" || b.address == "::") << b.address;
  EXPECT_NE(b.why.find("resolves to loopback here"), std::string::npos) << b.why;
  ::unsetenv("GLOO_SOCKET_IFNAME");
  LocalAddress gateway;
  try {
    gateway = address_toward("203.0.113.1");
  } catch (const Error&) {
    GTEST_SKIP() << "this machine has no default route to advertise";
  }
  const LocalAddress self = advertised_address(e);
  EXPECT_EQ(self.address, gateway.address) << self.why;
  EXPECT_FALSE(is_loopback_address(self.address)) << self.why;
}

TEST(StoreBind, TheAdvertisedAddressIsTheOneThatRoutesToTheStoreOrTheNamedInterface) {
  RankEnv e = node_env(1, "127.0.0.1", 29500);
  e.local_world_size = 2;
  ::unsetenv("GLOO_SOCKET_IFNAME");
  EXPECT_EQ(advertised_address(e).address, "127.0.0.1");  // every rank here, on loopback
  ::setenv("GLOO_SOCKET_IFNAME", "lo", 1);
  EXPECT_EQ(advertised_address(e).address, "127.0.0.1");
  EXPECT_NE(advertised_address(e).why.find("GLOO_SOCKET_IFNAME"), std::string::npos);
  ::setenv("GLOO_SOCKET_IFNAME", "no-such-nic0", 1);
  try {
    advertised_address(e);
    ADD_FAILURE() << "an interface that does not exist must be an error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("'no-such-nic0' has no address"), std::string::npos) << err.what();
    EXPECT_NE(std::string(err.what()).find("lo"), std::string::npos) << "the interfaces there are: " << err.what();
  }
  ::unsetenv("GLOO_SOCKET_IFNAME");
  try {
    address_toward("no-such-host.invalid");
    ADD_FAILURE() << "a MASTER_ADDR that does not resolve must be an error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("no-such-host.invalid"), std::string::npos) << err.what();
  }
}

}  // namespace
}  // namespace dpb::comm
