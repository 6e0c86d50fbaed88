// dpbench across nodes, as a cluster starts it: two (or three) network namespaces in one
// box, each a node with its own address and host name (tests/support/cluster.h), one
// rank per node started with torchrun's variables. Training in every distributed mode
// and checked against single; where the store listens and whom it admits; a node that
// cannot reach the store; and ranks that lose a peer, or their launcher, while they
// connect: the survivor ends within its --timeout + 5 s, saying why.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>

#include "engine/comm/tcp_store.h"
#include "tests/support/cluster.h"
#include "tests/support/process.h"
#include "tests/support/schemas.h"

namespace {

namespace test = dpb::test;
using test::Cluster;
using test::Proc;
using test::slurp;

std::string bin() { return test::binary("DPBENCH_BIN", DPBENCH_BIN); }
std::string tmp(const std::string& tag) { return test::temp_path("multinode_" + tag); }
Proc sh(const std::string& cmd) { return test::run_command(cmd); }

int free_port() {
  dpb::comm::TcpStoreServer probe("127.0.0.1", 0, "");
  return probe.port();
}

// torchrun's variables for rank `rank` of a job of one rank per node, its store at
// `master`:`port`.
std::string torchrun_env(int rank, int world, const std::string& master, int port, const std::string& token = "job") {
  return "MASTER_ADDR=" + master + " MASTER_PORT=" + std::to_string(port) + " WORLD_SIZE=" + std::to_string(world) +
         " RANK=" + std::to_string(rank) + " NODE_RANK=" + std::to_string(rank) +
         " LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 DPB_STORE_TOKEN=" + token + " ";
}

// Runs `flags` as rank 1 on node 1 (output to a file) and rank 0 on node 0; rank 0's
// result, rank 1's output and exit code in *node1 / *code1.
Proc two_nodes(const Cluster& c, const std::string& flags, std::string* node1, int* code1) {
  const int port = free_port();
  const std::string base = tmp("node1");
  const std::string rank1 = torchrun_env(1, 2, c.addr(0), port) + bin() + flags + " > " + base + " 2>&1; echo $? > " +
                            base + ".code";
  const std::string rank0 = torchrun_env(0, 2, c.addr(0), port) + bin() + flags;
  const Proc r = sh(c.on(1, rank1) + " & " + c.on(0, rank0) + "; code=$?; wait; exit $code");
  *node1 = slurp(base);
  *code1 = std::atoi(slurp(base + ".code").c_str());
  std::remove(base.c_str());
  std::remove((base + ".code").c_str());
  return r;
}

#define NEED_NODES(c) \
  if (!(c).available()) GTEST_SKIP() << (c).why()

TEST(MultiNode, DdpFsdpAndTpTrainAcrossTwoNodesAsSingleDoes) {
  Cluster c(2, "1gbit");
  NEED_NODES(c);
  const struct {
    const char* mode;
    const char* flags;
  } cases[] = {
      {"ddp", " --model=lenet --batch=8"},
      {"fsdp", " --model=gpt2-tiny --data=synthetic --seq=32 --batch=2 --optimizer=adamw"},
      {"tp", " --model=gpt2-tiny --data=synthetic --seq=32 --batch=2 --optimizer=adamw"},
  };
  for (const auto& k : cases) {
    std::string node1;
    int code1 = -1;
    const Proc r = two_nodes(c, std::string(" --mode=") + k.mode + k.flags + " --verify --verify-steps=3 --threads=1 "
                                                                            "--timeout=60",
                             &node1, &code1);
    EXPECT_EQ(r.code, 0) << k.mode << ": " << r.err << r.out;
    EXPECT_EQ(code1, 0) << k.mode << ": " << node1;
    EXPECT_NE(r.out.find("PASS"), std::string::npos) << k.mode << ": " << r.out;
    // Each rank found the address the other node reaches it at, with no help.
    EXPECT_NE(r.err.find("the other ranks reach this one at 10.99.0.1"), std::string::npos) << r.err;
    EXPECT_NE(node1.find("the other ranks reach this one at 10.99.0.2"), std::string::npos) << node1;
  }
}

TEST(MultiNode, TheReportNamesEachRanksHostAndTheStoreListensOnNodeZerosAddress) {
  Cluster c(2);
  NEED_NODES(c);
  const std::string json = tmp("report") + ".json";
  std::string node1;
  int code1 = -1;
  const Proc r = two_nodes(c, " --mode=ddp --model=lenet --batch=8 --steps=3 --warmup=1 --threads=1 --timeout=60 "
                              "--json=" + json,
                           &node1, &code1);
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(code1, 0) << node1;
  EXPECT_NE(r.err.find("tcp store: listening on 10.99.0.1:"), std::string::npos) << "node 0's address, no other: "
                                                                                  << r.err;
  const auto doc = test::checked_report(json);
  std::set<std::string> hosts;
  for (const auto& rank : doc["runs"][0]["ranks"]) hosts.insert(rank["host"].get<std::string>());
  EXPECT_EQ(hosts.size(), 2u) << doc["runs"][0]["ranks"];
  EXPECT_TRUE(hosts.count(std::string("t") + std::to_string(::getpid() % 10000000) + "-n1")) << *hosts.begin();
  std::remove(json.c_str());
}

TEST(MultiNode, AThirdNodeWithoutTheTokenIsTurnedAwayAndNodeZerosLoopbackIsClosed) {
  Cluster c(3);
  NEED_NODES(c);
  const int port = free_port();
  const std::string flags = " --bench=collectives --ops=allreduce -b 8 -e 1K -n 2 --warmup=1 --threads=1";
  const std::string base = tmp("third");
  // Rank 0 waits on node 0; a stranger on node 2 tries with another token; node 0's own
  // loopback finds no store; then the real rank 1 on node 1 completes the job.
  std::string cmd = c.on(0, torchrun_env(0, 2, c.addr(0), port) + bin() + flags + " --timeout=30 > " + base +
                                ".0 2>&1; echo $? > " + base + ".0.code") + " & sleep 1; ";
  cmd += c.on(2, torchrun_env(1, 2, c.addr(0), port, "other") + bin() + flags + " --timeout=3 > " + base + ".2 2>&1");
  cmd += "; " + c.on(0, "timeout 3 bash -c 'echo > /dev/tcp/127.0.0.1/" + std::to_string(port) + "' 2>/dev/null && "
                        "echo loopback-open || echo loopback-closed");
  cmd += "; " + c.on(1, torchrun_env(1, 2, c.addr(0), port) + bin() + flags + " --timeout=30") + "; wait";
  const Proc r = sh(cmd);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("loopback-closed"), std::string::npos) << r.out;
  EXPECT_NE(slurp(base + ".2").find("job token differs from rank 0's"), std::string::npos) << slurp(base + ".2");
  EXPECT_EQ(slurp(base + ".0.code"), "0\n") << slurp(base + ".0");
  for (const char* s : {".0", ".0.code", ".2"}) std::remove((base + s).c_str());
}

TEST(MultiNode, ANodeThatCannotReachTheStoreIsToldWhereItLooked) {
  Cluster c(2);
  NEED_NODES(c);
  ASSERT_TRUE(c.link(1, false));
  const int port = free_port();
  const Proc r = sh(c.on(1, torchrun_env(1, 2, c.addr(0), port) + bin() +
                                " --bench=collectives -b 8 -e 1K -n 2 --threads=1 --timeout=3"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("10.99.0.1:" + std::to_string(port)), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 3 + 5) << r.err;
}

// The survivor of a pair whose other rank dies while they connect ends within its
// timeout + 5 s, naming the store or the rank it lost.
void expect_survivor_ends(const Proc& survivor, int port, double timeout_s, int victim, const std::string& what) {
  EXPECT_NE(survivor.code, 0) << what << ": " << survivor.out;
  EXPECT_LT(survivor.seconds, timeout_s + 5) << what << ": " << survivor.err;
  // Rank 0 hosts the store: its death is the store's address gone; rank 1's is rank 1.
  const bool names_it = victim == 0 ? survivor.err.find("127.0.0.1:" + std::to_string(port)) != std::string::npos
                                    : survivor.err.find("rank(s) 1") != std::string::npos ||
                                          survivor.err.find("rank 1") != std::string::npos;
  EXPECT_TRUE(names_it) << what << ": " << survivor.err;
}

TEST(StartUp, WhenAPeerDiesWhileTheRanksConnectTheSurvivorEndsWithinItsTimeout) {
  // One host: one rank killed 0.05 to 1 s after it started, at whatever stage of the
  // set-up that is (store, Gloo's mesh, first collectives).
  const std::string flags = " --mode=ddp --model=lenet --batch=8 --steps=100000 --threads=1 --timeout=5";
  auto local = [](int rank, int port) {
    return "MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) + " WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 RANK=" +
           std::to_string(rank) + " LOCAL_RANK=" + std::to_string(rank) + " DPB_STORE_TOKEN=job ";
  };
  for (const int victim : {0, 1}) {
    for (const int ms : {50, 200, 400, 1000}) {
      const int port = free_port();
      const int survivor = 1 - victim;
      const std::string base = tmp("victim");
      std::string cmd = "(";
      cmd += local(victim, port) + "exec " + bin() + flags + " > " + base + " 2>&1) & v=$!; (sleep " +
             std::to_string(ms / 1000.0) + "; kill -9 $v) & ";
      cmd += local(survivor, port) + bin() + flags + "; code=$?; wait; exit $code";
      Proc r = sh(cmd);
      r.seconds -= ms / 1000.0;  // from the death
      const std::string what = "rank " + std::to_string(victim) + " killed after " + std::to_string(ms) + " ms";
      expect_survivor_ends(r, port, 5, victim, what);
      std::remove(base.c_str());
    }
  }
}

TEST(StartUp, AcrossTwoNodesARankThatCannotBeReachedEndsTheJobWithinTheTimeout) {
  // Both ranks advertise their loopback (GLOO_SOCKET_IFNAME=lo), as the host-name
  // lookup once did: whichever connects first fails, and the other, left waiting for a
  // peer that will never come, ends within its timeout (at once where the dead rank
  // hosted the store).
  Cluster c(2);
  NEED_NODES(c);
  const std::string flags = " --mode=ddp --model=lenet --batch=8 --steps=3 --threads=1 --timeout=5";
  const int port = free_port();
  const std::string base = tmp("lo");
  const std::string rank1 = "GLOO_SOCKET_IFNAME=lo " + torchrun_env(1, 2, c.addr(0), port) + bin() + flags + " > " +
                            base + " 2>&1; echo $? > " + base + ".code";
  const std::string rank0 = "GLOO_SOCKET_IFNAME=lo " + torchrun_env(0, 2, c.addr(0), port) + bin() + flags;
  const auto t0 = std::chrono::steady_clock::now();
  const Proc r = sh(c.on(1, rank1) + " & " + c.on(0, rank0) + "; code=$?; wait; exit $code");
  const double both = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string node1 = slurp(base);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(slurp(base + ".code"), "0\n") << node1;
  EXPECT_LT(both, 5 + 5) << r.err << node1;
  // The rank that could not connect names the address; the one left names what it waited for.
  const std::string all = r.err + node1;
  EXPECT_NE(all.find("connect [127.0.0.1]"), std::string::npos) << all;
  const bool survivor_said = all.find("the store's host (rank 0) is gone") != std::string::npos ||
                             all.find("did not connect to every other rank within 5000 ms") != std::string::npos;
  EXPECT_TRUE(survivor_said) << all;
  std::remove(base.c_str());
  std::remove((base + ".code").c_str());
}

TEST(MultiNode, AStoppedRankEndsTheJobOnBothNodesWithinTheTimeout) {
  // dpbench's launcher on each node, one rank each; node 1's rank (then node 0's, the
  // store's host) stopped with SIGSTOP mid-run. Before, node 1's launcher waited on its
  // stopped child for ever (only a failing sibling on the same node ended it), and a
  // stopped store host held node 0 until SIGCONT.
  Cluster c(2);
  NEED_NODES(c);
  for (const int victim : {1, 0}) {
    const int port = free_port();
    const std::string base = tmp("stopped");
    auto node = [&](int k) {
      return "DPB_STORE_TOKEN=job " + bin() + " --mode=ddp --gpus=1 --nnodes=2 --node-rank=" + std::to_string(k) +
             " --master-addr=" + c.addr(0) + " --master-port=" + std::to_string(port) +
             " --model=lenet --batch=8 --steps=100000 --threads=1 --timeout=3 --progress=none";
    };
    std::string cmd = c.on(1, node(1) + " > " + base + ".1 2>&1") + " & n1=$!; " + c.on(0, node(0) + " > " + base +
                      ".0 2>&1") + " & n0=$!; sleep 3; for p in $(ip netns pids " + c.netns(victim) + "); do "
                      "grep -qz '^DPB_LAUNCHED=1$' /proc/$p/environ 2>/dev/null && victim=$p; done;";
    cmd += " kill -STOP $victim; t0=$(date +%s.%N); wait $n0 $n1; t1=$(date +%s.%N);";
    cmd += " kill -CONT $victim 2>/dev/null; kill -9 $victim 2>/dev/null; echo after $(echo \"$t1 - $t0\" | bc)";
    const Proc r = sh("timeout 60 bash -c " + test::shell_quote(cmd));
    const std::string out0 = slurp(base + ".0"), out1 = slurp(base + ".1");
    const size_t at = r.out.find("after ");
    ASSERT_NE(at, std::string::npos) << r.out << r.err << out0 << out1;
    const double after = std::atof(r.out.c_str() + at + 6);
    EXPECT_LT(after, 3 + 5) << "stopped rank " << victim << ":\n" << out0 << "\n" << out1;
    EXPECT_NE((victim == 1 ? out1 : out0).find("stayed stopped longer than the timeout"), std::string::npos)
        << (victim == 1 ? out1 : out0);
    std::remove((base + ".0").c_str());
    std::remove((base + ".1").c_str());
  }
}

TEST(StartUp, ARankOfAnotherLaunchersJobDoesNotTurnItsRepeatsIntoJobsOfItsOwn) {
  // --repeat runs each repeat as a job of its own: from a rank torchrun started, that job
  // had one rank and the peer waited for it in vain, until its timeout.
  const Proc r = sh(torchrun_env(0, 2, "127.0.0.1", free_port()) + bin() +
                    " --mode=ddp --model=lenet --batch=8 --steps=2 --threads=1 --timeout=60 --repeat=2");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("this process is rank 0 of 2 of a job started by torchrun"), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 10);
}

TEST(StartUp, MasterFlagsWinOverTheEnvironment) {
  // --master-addr/--master-port given to ranks that torchrun's variables describe: before,
  // MASTER_PORT in the environment won silently and the ranks looked for the store there.
  const int right = free_port(), wrong = free_port();
  auto rank = [&](int r) {
    return torchrun_env(r, 2, "127.0.0.9", wrong) + bin() + " --bench=collectives --ops=allreduce -b 8 -e 1K -n 2 " +
           "--threads=1 --timeout=5 --master-addr=127.0.0.1 --master-port=" + std::to_string(right);
  };
  std::string both = "(";
  both += rank(1) + " > /dev/null 2>&1) & " + rank(0) + "; code=$?; wait; exit $code";
  const Proc r = sh(both);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("127.0.0.1:" + std::to_string(right)), std::string::npos) << r.err;
}

TEST(StartUp, RanksEndWhenTheirLauncherDies) {
  // The launcher killed outright cannot pass anything on: the kernel tells its ranks.
  // Polled, not slept: on a loaded machine the ranks may start late and end late (up to
  // 20 s for each, far within what a hung rank would show).
  const std::string alive = "for p in $ranks; do [ -e /proc/$p ] && ! grep -q ') Z' /proc/$p/stat && echo alive $p; done";
  const std::string cmd = bin() + " --mode=ddp --gpus=2 --model=lenet --batch=8 --steps=100000 --threads=1 "
                          "> /dev/null 2>&1 & l=$!; "
                          "for i in $(seq 200); do ranks=$(pgrep -P $l); [ $(echo $ranks | wc -w) -ge 2 ] && break; "
                          "sleep 0.1; done; sleep 0.5; ranks=$(pgrep -P $l); kill -9 $l; "
                          "for i in $(seq 200); do [ -z \"$(" + alive + ")\" ] && [ ! -e /tmp/dpbench-run-$l ] && break; "
                          "sleep 0.1; done; " + alive + "; [ -e /tmp/dpbench-run-$l ] && echo run-dir-left; echo ranks: $ranks";
  const Proc r = sh(cmd);
  EXPECT_EQ(r.out.find("alive"), std::string::npos) << "ranks outlived their launcher: " << r.out;
  // Its run directory goes with it (the reaper it started removes it).
  EXPECT_EQ(r.out.find("run-dir-left"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ranks: "), std::string::npos);
  EXPECT_GT(r.out.size(), std::string("ranks: \n").size()) << "the launcher had started no rank: " << r.out;
  // Nothing may be left running whatever happened above.
  for (size_t at = r.out.find("alive "); at != std::string::npos; at = r.out.find("alive ", at + 1))
    ::kill(std::atoi(r.out.c_str() + at + 6), SIGKILL);
  // Hung up (its terminal or ssh session gone), the launcher stops its ranks as on SIGTERM
  // and removes the run directory.
  const Proc hup = sh(bin() + " --mode=ddp --gpus=2 --model=lenet --batch=8 --steps=100000 --threads=1 "
                              "> /dev/null 2>&1 & l=$!; sleep 2; ranks=$(pgrep -P $l); kill -HUP $l; "
                              "for i in $(seq 50); do kill -0 $l 2>/dev/null || break; sleep 0.1; done; sleep 0.5; "
                              "kill -0 $l 2>/dev/null && echo launcher-alive; "
                              "for p in $ranks; do [ -e /proc/$p ] && ! grep -q ') Z' /proc/$p/stat && echo alive $p; "
                              "done; [ -e /tmp/dpbench-run-$l ] && echo run-dir-left; echo ranks: $ranks");
  EXPECT_EQ(hup.out.find("alive"), std::string::npos) << hup.out;
  EXPECT_EQ(hup.out.find("run-dir-left"), std::string::npos) << hup.out;
  for (size_t at = hup.out.find("alive "); at != std::string::npos; at = hup.out.find("alive ", at + 1))
    ::kill(std::atoi(hup.out.c_str() + at + 6), SIGKILL);
  // A run directory whose launcher and reaper were both killed (a SIGKILL to the whole
  // process group) is removed by the next launcher; a live launcher's is left alone.
  const Proc stale = sh("sleep 30 & live=$!; "
                        "dead=$(sh -c 'echo $$'); mkdir -p /tmp/dpbench-run-$dead /tmp/dpbench-run-$live; " +
                        bin() + " --mode=ddp --gpus=2 --model=mlp --steps=1 --warmup=0 --threads=1 > /dev/null 2>&1; "
                        "[ -e /tmp/dpbench-run-$dead ] && echo stale-left; [ -e /tmp/dpbench-run-$live ] || echo live-removed; "
                        "kill $live; rmdir /tmp/dpbench-run-$live /tmp/dpbench-run-$dead 2>/dev/null; echo done");
  EXPECT_NE(stale.out.find("done"), std::string::npos) << stale.out << stale.err;
  EXPECT_EQ(stale.out.find("stale-left"), std::string::npos) << stale.out;
  EXPECT_EQ(stale.out.find("live-removed"), std::string::npos) << stale.out;
}

}  // namespace
