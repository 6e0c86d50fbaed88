// dpbench as several processes: the local launcher, the collective benchmark's report,
// a rank killed in the middle of an all-reduce loop, two "nodes" on loopback, and ranks
// started by another launcher (torchrun's variables).
#include <gtest/gtest.h>

#include <set>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "engine/comm/tcp_store.h"
#include "reports/schemas.h"
#include "tests/support/hostile_client.h"
#include "tests/support/process.h"
#include "tests/support/schemas.h"

namespace {

namespace test = dpb::test;
using test::Proc;
using test::slurp;

std::string bin() { return test::binary("DPBENCH_BIN", DPBENCH_BIN); }
std::string tmp(const std::string& tag) { return test::temp_path("ranks_" + tag); }
Proc sh(const std::string& cmd) { return test::run_command(cmd); }

int free_port() {
  dpb::comm::TcpStoreServer probe("127.0.0.1", 0, "");
  return probe.port();
}

const std::string kSmall = " --bench=collectives -b 8 -e 4K -f 8 -n 3 --warmup=1 --threads=1 --timeout=30";

TEST(DpbenchRanks, LauncherRunsTheCollectiveBenchmark) {
  const std::string json = tmp("report") + ".json";
  const Proc r = sh(bin() + kSmall + " --gpus=2 --json=" + json);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("[rank 0] dpbench collectives | backend gloo | 2 rank(s)"), std::string::npos) << r.out;
  const auto doc = nlohmann::json::parse(slurp(json));
  test::expect_fits(dpb::reports::collectives_schema(), doc, json);
  EXPECT_EQ(doc["config"]["world_size"], 2);
  EXPECT_EQ(doc["config"]["launcher"], "torchrun");  // our launcher speaks torchrun's variables
  ASSERT_EQ(doc["results"].size(), 4u * 4u);          // 4 ops x sizes 8, 64, 512, 4096
  for (const auto& row : doc["results"]) {
    EXPECT_EQ(row["wrong"], 0) << row;
    const double algbw = row["algbw_gbps"], busbw = row["busbw_gbps"];
    const double f = row["op"] == "allreduce" ? 1.0 : row["op"] == "broadcast" ? 1.0 : 0.5;  // n = 2
    EXPECT_NEAR(busbw, algbw * f, 1e-9 + 1e-9 * algbw) << row;
  }
  std::remove(json.c_str());
}

TEST(DpbenchRanks, KilledRankIsNamedAndTheSurvivorsExitWithinTheTimeout) {
  const Proc r = sh(bin() + " --bench=collectives --gpus=3 --ops=allreduce -b 1K -e 1K -n 1000000 --threads=1 "
                           "--timeout=8 --kill-rank=1:40");
  EXPECT_NE(r.code, 0);
  EXPECT_LT(r.seconds, 8.0 + 6.0) << "survivors must stop within the timeout and a few seconds";
  EXPECT_NE(r.err.find("launcher: rank 1 (pid"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("died: killed by signal 9 (SIGKILL)"), std::string::npos) << r.err;
  for (const std::string survivor : {"[rank 0]", "[rank 2]"}) {
    const auto at = r.err.find(survivor + " dpbench: error: allreduce #");
    ASSERT_NE(at, std::string::npos) << survivor << " did not report: " << r.err;
    const std::string line = r.err.substr(at, r.err.find('\n', at) - at);
    EXPECT_NE(line.find("rank(s) 1 did not arrive"), std::string::npos) << line;
  }
}

// A rank that stops calling collectives (--hang-rank) is named by the others when they
// time out, and the launcher ends the job within the timeout and a few seconds.
// Rank 1 of 2 stops reaching its collectives at step 4 (--hang-rank) in `mode`: rank 0's
// error names it within the 3 s timeout (plus 5 s, start-up and four steps). Returns that
// error line.
std::string expect_hung_rank_named(const std::string& mode, const Proc& r) {
  EXPECT_NE(r.code, 0) << mode;
  const auto at = r.err.find("[rank 0] dpbench: error:");
  if (at == std::string::npos) {
    ADD_FAILURE() << mode << ": no error from rank 0\n" << r.err;
    return "";
  }
  const std::string line = r.err.substr(at, r.err.find('\n', at) - at);
  EXPECT_NE(line.find("rank(s) 1 did not arrive"), std::string::npos) << mode << ": " << line;
  EXPECT_LT(r.seconds, 3.0 + 5.0 + 4.0) << mode << ": timeout + 5 s, plus start-up and four steps";
  return line;
}

Proc run_hung(const std::string& mode) {
  return sh(bin() + " --mode=" + mode + " --gpus=2 --model=mlp --batch=64 --steps=100000 --warmup=1 --threads=1 "
                    "--workers=0 --progress=none --timeout=3 --hang-rank=1:4");
}

TEST(DpbenchRanks, HungRankIsNamedWithinTheTimeout) {
  const Proc r = run_hung("ddp");
  EXPECT_NE(r.err.find("[rank 1] warning: fault injection (--hang-rank)"), std::string::npos) << r.err;
  const std::string line = expect_hung_rank_named("ddp", r);
  EXPECT_NE(line.find("rank 1: alive"), std::string::npos) << line;
}

// A SIGSTOPped rank is named as soon as it stops and again when the others fail waiting
// for it; the launcher then ends it at once instead of waiting out its report window.
TEST(DpbenchRanks, StoppedRankIsNamedAndTheJobEndsWithinTheTimeout) {
  const std::string cmd = bin() + " --mode=ddp --gpus=2 --model=mlp --batch=64 --steps=100000 --warmup=1 "
                                  "--threads=1 --workers=0 --progress=none --timeout=3 & L=$!; sleep 2; "
                                  "for c in $(cat /proc/$L/task/$L/children); do V=$c; done; kill -STOP $V; wait $L";
  const Proc r = sh(cmd);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find(") is stopped by signal 19 (SIGSTOP): the others will wait for it"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("was stopped (SIGSTOP)"), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 2.0 + 3.0 + 5.0) << "2 s before the stop, then timeout + 5 s";
}

TEST(DpbenchRanks, TwoNodesOfTwoRanksOnLoopback) {
  const std::string port = std::to_string(free_port());
  const std::string base = tmp("nodes");
  const std::string common = bin() + kSmall + " --ops=allreduce --gpus=2 --nnodes=2 --master-addr=127.0.0.1 "
                                              "--master-port=" + port;
  std::string both = "(";
  both += common + " --node-rank=1 > " + base + ".1 2>&1; echo $? > " + base + ".1.code) & " + common +
          " --node-rank=0; code=$?; wait; exit $code";
  const Proc r = sh(both);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("[rank 0] dpbench collectives | backend gloo | 4 rank(s)"), std::string::npos) << r.out;
  EXPECT_EQ(slurp(base + ".1.code"), "0\n") << slurp(base + ".1");
  std::remove((base + ".1").c_str());
  std::remove((base + ".1.code").c_str());
}

TEST(DpbenchRanks, ANodeWithAnotherTokenIsToldSoAndTheOtherNamesTheRankThatNeverJoined) {
  const std::string port = std::to_string(free_port());
  const std::string base = tmp("token");
  std::string common = bin();
  common += " --bench=collectives -b 8 -e 4K -f 8 -n 3 --warmup=1 --threads=1 --timeout=3 --gpus=1 --nnodes=2";
  common += " --master-addr=127.0.0.1 --master-port=" + port;
  std::string both = "(DPB_STORE_TOKEN=other ";
  both += common + " --node-rank=1 > " + base + ".1 2>&1) & DPB_STORE_TOKEN=mine ";
  both += common + " --node-rank=0; code=$?; wait; exit $code";
  const Proc r = sh(both);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("rank(s) 1 never joined the group"), std::string::npos) << r.err;
  const std::string node1 = slurp(base + ".1");
  EXPECT_NE(node1.find("job token differs from rank 0's"), std::string::npos) << node1;
  EXPECT_LT(r.seconds, 3 + 5) << "the job must end within its timeout and a few seconds";
  std::remove((base + ".1").c_str());
}

TEST(DpbenchRanks, RanksStartedWithTorchrunVariables) {
  const std::string port = std::to_string(free_port());
  auto env = [&](int rank) {
    return "RANK=" + std::to_string(rank) + " LOCAL_RANK=" + std::to_string(rank) +
           " WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port + " ";
  };
  const std::string base = tmp("torchrun");
  std::string both = "(";
  both += env(1) + bin() + kSmall + " > " + base + ".1 2>&1) & " + env(0) + bin() + kSmall + "; code=$?; wait; exit $code";
  const Proc r = sh(both);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("dpbench collectives | backend gloo | 2 rank(s)"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("[rank"), std::string::npos) << "not launched by us: no prefix";
  std::remove((base + ".1").c_str());
  // A launcher's environment that lacks a variable is named.
  const Proc bad = sh("RANK=0 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port + " " + bin() +
                     kSmall);
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("WORLD_SIZE is not set"), std::string::npos) << bad.err;
}

// Ranks started by hand with different flags: rank 0 with --trace gathered its trace where
// rank 1 gathered its step records, and both failed parsing what they got. Now every rank
// says which flag differs, before training, and exits.
TEST(DpbenchRanks, RanksStartedWithDifferentFlagsAreToldWhichFlag) {
  const std::string port = std::to_string(free_port());
  auto env = [&](int rank) {
    return "RANK=" + std::to_string(rank) + " LOCAL_RANK=" + std::to_string(rank) +
           " WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port + " ";
  };
  const std::string base = tmp("flags"), trace = base + ".trace.json";
  const std::string run = " --mode=ddp --model=lenet --batch=8 --steps=2 --warmup=1 --threads=1 --progress=none --timeout=20";
  const Proc r = sh("(" + env(1) + bin() + run + " --bucket-mb=5 > " + base + ".1 2>&1; echo \"exit $?\" >> " + base +
                    ".1) & " + env(0) + bin() + run + " --trace=" + trace + "; code=$?; wait; exit $code");
  EXPECT_NE(r.code, 0);
  const std::string other = slurp(base + ".1");
  for (const std::string& said : {r.err, other}) {
    EXPECT_NE(said.find("the ranks were started with different flags"), std::string::npos) << said;
    EXPECT_NE(said.find("--trace given on rank 0, not given on rank 1"), std::string::npos) << said;
    EXPECT_NE(said.find("--bucket-mb 25.0 on rank 0, 5.0 on rank 1"), std::string::npos) << said;
  }
  EXPECT_EQ(other.find("exit 0"), std::string::npos) << other;
  EXPECT_LT(r.seconds, 15) << "told at the start, not after a timeout";
  EXPECT_FALSE(std::filesystem::exists(trace)) << "nothing written";
  std::remove((base + ".1").c_str());
}

TEST(DpbenchRanks, TwoRanksCompleteWhileTheirStoreIsAttacked) {
  const int port = free_port();
  auto env = [&](int rank) {
    return "DPB_STORE_TOKEN=job-secret RANK=" + std::to_string(rank) + " LOCAL_RANK=" + std::to_string(rank) +
           " WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) + " ";
  };
  std::atomic<bool> stop{false};
  int attacks = 0;
  std::thread attacker([&] {
    // From before the store is up: garbage, oversized lengths, wrong tokens, slow halves.
    attacks = dpb::test::attack_store(port, stop);
  });
  const std::string base = tmp("attacked");
  const std::string run = " --mode=ddp --model=lenet --batch=32 --steps=60 --warmup=2 --threads=1 --timeout=30";
  std::string both = "(";
  both += env(1) + bin() + run + " > " + base + ".1 2>&1) & " + env(0) + bin() + run + "; code=$?; wait; exit $code";
  const Proc r = sh(both);
  stop = true;
  attacker.join();
  EXPECT_EQ(r.code, 0) << r.err << slurp(base + ".1");
  EXPECT_GT(attacks, 5);
  std::remove((base + ".1").c_str());
}

}  // namespace

namespace {

TEST(DpbenchDdp, ReportHasRanksBucketsAndOverlap) {
  const std::string json = tmp("ddp") + ".json";
  const Proc r = sh(bin() + " --mode=ddp --gpus=2 --model=mlp --batch=8 --steps=6 --warmup=2 --threads=1 "
                            "--bucket-mb=0.5 --accum-steps=2 --json=" + json);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("[rank 0] dpbench ddp | model mlp"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ddp: "), std::string::npos) << r.out;
  const auto doc = test::checked_report(json);
  EXPECT_EQ(doc["config"]["mode"], "ddp");
  EXPECT_EQ(doc["config"]["backend"], "gloo");
  EXPECT_EQ(doc["config"]["world_size"], 2);
  const auto& run = doc["runs"][0];
  EXPECT_EQ(run["world_size"], 2);
  EXPECT_EQ(run["batch_per_device"], 8);
  EXPECT_EQ(run["global_batch"], 8 * 2 * 2);  // ranks x accumulation
  ASSERT_EQ(run["ranks"].size(), 2u);
  ASSERT_EQ(run["devices"].size(), 2u);
  for (const auto& d : run["devices"]) EXPECT_EQ(d["samples"], 8 * 2 * (6 + 2)) << d;  // batches x accum x steps
  // MLP's 2.7 MB of gradients in 0.5 MiB buckets after a 1 MiB first one: fc3+fc2, fc1 split by size.
  ASSERT_GE(run["buckets"].size(), 2u);
  int64_t bytes = 0;
  for (const auto& b : run["buckets"]) bytes += b["bytes"].get<int64_t>();
  EXPECT_EQ(bytes, (784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10) * 4);
  const double ratio = run["overlap"]["ratio"];
  EXPECT_GE(ratio, 0.0);
  EXPECT_LE(ratio, 1.0);
  // The A/B: passes without the all-reduce, measured on every rank.
  const auto& ab = run["overlap"]["ab"];
  EXPECT_GT(ab["step_without_comm_s"].get<double>(), 0.0);
  EXPECT_GT(ab["optimizer_s"].get<double>(), 0.0);
  EXPECT_GE(ab["exposed_comm_s"].get<double>(), 0.0);
  EXPECT_LE(ab["exposed_share"].get<double>(), 1.0);
  EXPECT_NE(r.out.find("ddp A/B: step"), std::string::npos) << r.out;
  // Each rank's wait for the other to start its all-reduces: measured (one host), at most
  // a step.
  for (const auto& rk : run["ranks"]) {
    ASSERT_TRUE(rk["wait_for_peers_s"].is_number()) << rk;
    EXPECT_GE(rk["wait_for_peers_s"].get<double>(), 0.0);
    EXPECT_LE(rk["wait_for_peers_s"].get<double>(), run["step_time_s"]["max"].get<double>());
  }
  // Every rank's timeline reached rank 0 for the report's excerpt.
  std::set<int> devices;
  for (const auto& i : run["timeline"]["intervals"]) devices.insert(i["device"].get<int>());
  EXPECT_EQ(devices, (std::set<int>{0, 1}));
  std::remove(json.c_str());
}

TEST(DpbenchDdp, VerifyAgainstSingleAndTheSamplerMistake) {
  const Proc ok = sh(bin() + " --mode=ddp --gpus=2 --model=lenet --batch=8 --verify --verify-steps=3 --threads=1");
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_NE(ok.out.find("PASS"), std::string::npos) << ok.out;
  const Proc bad = sh(bin() + " --mode=ddp --gpus=2 --model=lenet --batch=8 --verify --verify-steps=3 --threads=1 "
                              "--sampler=none");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("FAIL"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("every rank trains on the same samples"), std::string::npos) << bad.out;
  // A wrong batch is far past float rounding's noise floor too.
  EXPECT_NE(bad.out.find("noise floor"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("past both"), std::string::npos) << bad.out;
}

// Over a tolerance too tight for float arithmetic, the difference is judged against the
// noise floor rounding alone makes (one device with each batch in two halves): AdamW on
// gpt2-tiny, whose attention key bias has an exactly-zero gradient but for rounding.
TEST(DpbenchDdp, VerifyJudgesAgainstTheNoiseFloorOverTheTolerance) {
  for (const char* mode : {"ddp", "fsdp"}) {
    const Proc r = sh(bin() + " --mode=" + mode + " --gpus=2 --model=gpt2-tiny --data=synthetic --seq=64 --batch=8 "
                      "--optimizer=adamw --verify --verify-steps=5 --verify-tolerance=1e-4 --threads=1");
    EXPECT_EQ(r.code, 0) << mode << "\n" << r.out << r.err;
    EXPECT_NE(r.out.find("within the noise floor"), std::string::npos) << mode << "\n" << r.out;
    EXPECT_NE(r.out.find("noise floor (one device with each batch in two halves"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("verify: PASS"), std::string::npos) << r.out;
  }
}

TEST(DpbenchDdp, SyncBatchNormMakesBatchNormModelsTrainAsOneDevice) {
  // Each rank normalising its own 4 samples: far from one device with 8, and the report
  // says why.
  const std::string common = " --mode=ddp --gpus=2 --model=resnet18 --batch=4 --verify --verify-steps=1 --threads=1";
  const Proc local = sh(bin() + common);
  EXPECT_NE(local.code, 0);
  EXPECT_NE(local.out.find("FAIL"), std::string::npos) << local.out;
  EXPECT_NE(local.out.find("--sync-bn makes them equal"), std::string::npos) << local.out;
  const Proc synced = sh(bin() + common + " --sync-bn");
  EXPECT_EQ(synced.code, 0) << synced.out << synced.err;
  EXPECT_NE(synced.out.find("PASS"), std::string::npos) << synced.out;
}

// fsdp's --save writes a sharded checkpoint by default: a directory where each rank's
// file holds its rows; it resumes at the same world size, and says so at another, and
// --save-format=full writes one file that any mode resumes.
TEST(DpbenchFsdp, SavesShardedCheckpointsAndResumesThem) {
  const std::string dir = tmp("fsdp_sharded"), full = tmp("fsdp_full") + ".safetensors";
  const std::string run = bin() + " --mode=fsdp --model=gpt2-tiny --data=synthetic --seq=32 --batch=2 --warmup=0 "
                                  "--threads=1 --progress=none --eval=off --optimizer=adamw";
  const Proc saved = sh(run + " --gpus=2 --steps=2 --save=" + dir);
  ASSERT_EQ(saved.code, 0) << saved.err;
  std::string written = "sharded checkpoint written to ";
  written += dir + " by 2 rank(s)";
  EXPECT_NE(saved.err.find(written), std::string::npos) << saved.err;
  for (const char* f : {"rank-00000-of-00002.safetensors", "rank-00001-of-00002.safetensors"})
    EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(dir) / f)) << f;
  const Proc resumed = sh(run + " --gpus=2 --steps=1 --resume=" + dir + " --save-format=full --save=" + full);
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  std::string from = "resumed from ";
  from += dir + " at epoch 0, batch 2, step 2";
  EXPECT_NE(resumed.err.find(from), std::string::npos)
      << resumed.err;
  EXPECT_TRUE(std::filesystem::is_regular_file(full));
  const Proc other = sh(run + " --gpus=3 --steps=1 --resume=" + dir);
  EXPECT_NE(other.code, 0);
  EXPECT_NE(other.err.find("it was written by 2 rank(s): resume with that many"), std::string::npos) << other.err;
  const Proc single = sh(bin() + " --model=gpt2-tiny --data=synthetic --seq=32 --batch=2 --steps=1 --threads=1 "
                                 "--progress=none --eval=off --optimizer=adamw --resume=" + full);
  EXPECT_EQ(single.code, 0) << single.err;
  const Proc ddp = sh(bin() + " --mode=ddp --gpus=2 --model=mlp --steps=1 --save-format=sharded --save=" + dir);
  EXPECT_NE(ddp.code, 0) << ddp.err;
  EXPECT_NE(ddp.err.find("--save-format=sharded is for --mode=fsdp"), std::string::npos) << ddp.err;
  std::filesystem::remove_all(dir);
  std::remove(full.c_str());
}

// fsdp as ranks: the report says what each rank held and which collectives a step ran,
// every rank trains as one device would, and its flags belong to it.
TEST(DpbenchFsdp, ReportHasEachRanksMemoryAndCollectives) {
  const std::string json = tmp("fsdp") + ".json";
  const Proc r = sh(bin() + " --mode=fsdp --gpus=2 --model=gpt2-tiny --data=synthetic --seq=64 --batch=2 --steps=4 "
                            "--warmup=1 --threads=1 --optimizer=adamw --json=" + json);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("[rank 0] fsdp: 3 unit(s), prefetch 1, gathered again for backward"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("all-gather: 4 a step"), std::string::npos) << r.out;
  const auto doc = test::checked_report(json);
  EXPECT_EQ(doc["config"]["mode"], "fsdp");
  const auto& run = doc["runs"][0];
  EXPECT_EQ(run["global_batch"], 4);
  EXPECT_FALSE(run.contains("buckets"));
  const auto& f = run["fsdp"];
  EXPECT_EQ(f["reshard_after_forward"], true);
  EXPECT_EQ(f["prefetch"], 1);
  // The two blocks, and the root: the embeddings, ln_f and the tied head.
  EXPECT_EQ(f["units"], 3);
  const int64_t full = f["full_parameter_bytes"];
  EXPECT_EQ(full, doc["config"]["parameters"].get<int64_t>() * 4);
  ASSERT_EQ(f["ranks"].size(), 2u);
  for (const auto& m : f["ranks"]) {
    EXPECT_LE(m["shard_parameter_bytes"].get<int64_t>(), full / 2 + 4096) << m;
    // AdamW's two moments of this rank's rows of the parameters (its shards without their
    // padding: none here, every parameter's dim 0 is even), and a step count per shard.
    const int64_t state = m["optimizer_state_bytes"], shard = m["shard_parameter_bytes"];
    EXPECT_GE(state, 2 * shard) << m;
    EXPECT_LE(state, 2 * shard + 28 * 4) << m;
    EXPECT_GT(m["activation_bytes"].get<double>(), 0.0) << m;
    EXPECT_GT(m["peak_memory_bytes"].get<int64_t>(), m["shard_parameter_bytes"].get<int64_t>()) << m;
    EXPECT_LE(m["peak_gathered_parameter_bytes"].get<int64_t>(), full) << m;
  }
  // Each rank's memory from its own process: the allocator's peak and cache, and the
  // process's resident peak, which holds at least the tensors at their peak.
  ASSERT_EQ(run["devices"].size(), 2u);
  for (const auto& d : run["devices"]) {
    ASSERT_TRUE(d["peak_rss_bytes"].is_number()) << d;
    ASSERT_TRUE(d["cached_memory_bytes"].is_number()) << d;
    EXPECT_GT(d["peak_rss_bytes"].get<double>(), d["peak_memory_bytes"].get<double>()) << d;
    EXPECT_GE(d["shared_rss_bytes"].get<double>(), 0.0) << d;
  }
  ASSERT_EQ(f["collectives"].size(), 2u);
  EXPECT_EQ(f["collectives"][0]["kind"], "all-gather");
  EXPECT_EQ(f["collectives"][0]["count"], 2 * 2 - 1 + 1);  // 2 blocks gathered twice but the last, the root once
  EXPECT_EQ(f["collectives"][1]["kind"], "reduce-scatter");
  EXPECT_EQ(f["collectives"][1]["count"], 3);
  std::remove(json.c_str());

  const Proc v = sh(bin() + " --mode=fsdp --gpus=2 --model=lenet --batch=8 --verify --verify-steps=3 --threads=1 "
                            "--fsdp-reshard=false --fsdp-prefetch=0");
  EXPECT_EQ(v.code, 0) << v.err;
  EXPECT_NE(v.out.find("PASS"), std::string::npos) << v.out;
  // A rank that stops before its forward's all-gathers: the other names it within the timeout.
  expect_hung_rank_named("fsdp", run_hung("fsdp"));
  const Proc wrong = sh(bin() + " --mode=ddp --gpus=2 --model=mlp --steps=1 --fsdp-prefetch=2");
  EXPECT_NE(wrong.code, 0);
  EXPECT_NE(wrong.err.find("--fsdp-prefetch is for --mode=fsdp, not --mode=ddp"), std::string::npos) << wrong.err;
}

TEST(DpbenchTp, ReportVerifyTwoDimensionsAndAHungRank) {
  const std::string json = tmp("tp") + ".json";
  const Proc r = sh(bin() + " --mode=tp --gpus=2 --model=gpt2-tiny --data=synthetic --seq=64 --batch=4 --steps=4 "
                            "--warmup=1 --threads=1 --optimizer=adamw --json=" + json);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("[rank 0] tp: 2 ranks each train on the whole batch"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("all-reduce: 10 a step"), std::string::npos) << r.out;
  const auto doc = test::checked_report(json);
  EXPECT_EQ(doc["config"]["mode"], "tp");
  EXPECT_EQ(doc["config"]["tensor_parallel"], 2);
  const auto& run = doc["runs"][0];
  EXPECT_EQ(run["global_batch"], 4);  // every rank on the same batch
  const auto& t = run["tp"];
  const int64_t full = t["full_parameter_bytes"], replicated = t["replicated_bytes"];
  EXPECT_EQ(full, doc["config"]["parameters"].get<int64_t>() * 4);
  ASSERT_EQ(t["ranks"].size(), 2u);
  for (const auto& m : t["ranks"]) {
    EXPECT_EQ(m["parameter_bytes"].get<int64_t>(), (full - replicated) / 2 + replicated) << m;
    // AdamW: two moments of every parameter the rank holds, and a step count each.
    EXPECT_GE(m["optimizer_state_bytes"].get<int64_t>(), 2 * m["parameter_bytes"].get<int64_t>()) << m;
  }
  ASSERT_EQ(t["collectives"].size(), 2u);
  EXPECT_EQ(t["collectives"][0]["kind"], "all-reduce");
  EXPECT_EQ(t["collectives"][0]["count"], 10);
  EXPECT_EQ(t["collectives"][0]["bytes"], 10 * 4 * 64 * 64 * 4);  // (4, 64, 64) activations, f32
  EXPECT_EQ(t["collectives"][1]["kind"], "all-gather");
  std::remove(json.c_str());

  // (2D on gpt2-tiny is checked against one device in tests/train/strategy_test.cpp; over
  // 3 steps its layer norms' weights move so little that float rounding alone can be a
  // thousandth of their movement.)
  for (const std::string flags : {"--mode=tp --gpus=4 --model=mlp --batch=16", "--mode=ddp --tp=2 --gpus=4 "
                                  "--model=mlp --batch=8"}) {
    const Proc v = sh(bin() + " " + flags + " --verify --verify-steps=3 --threads=1");
    EXPECT_EQ(v.code, 0) << flags << "\n" << v.err;
    EXPECT_NE(v.out.find("PASS"), std::string::npos) << flags << "\n" << v.out;
  }
  // 2D: the report says how the ranks are laid out; the global batch is the data ranks'.
  const std::string json2 = tmp("tp2d") + ".json";
  const Proc d = sh(bin() + " --mode=ddp --tp=2 --gpus=4 --model=gpt2-tiny --data=synthetic --seq=32 --batch=2 "
                            "--steps=3 --warmup=1 --threads=1 --json=" + json2);
  ASSERT_EQ(d.code, 0) << d.err;
  EXPECT_NE(d.out.find("tp: 2 groups of 2 tensor-parallel ranks, DDP across the groups"), std::string::npos) << d.out;
  const auto doc2 = test::checked_report(json2);
  EXPECT_EQ(doc2["config"]["tensor_parallel"], 2);
  EXPECT_EQ(doc2["runs"][0]["global_batch"], 4);
  std::remove(json2.c_str());

  // A rank that stops before its forward's all-reduces: the other names it within the timeout.
  expect_hung_rank_named("tp", run_hung("tp"));
  // Counts that do not cut the model, and --tp where it does not belong: one error, no rank started.
  for (const auto& [flags, says] :
       {std::pair<std::string, std::string>{"--mode=tp --gpus=3 --model=gpt2-tiny --data=synthetic",
                                            "its 4 heads do not divide evenly"},
        {"--mode=tp --gpus=2 --model=resnet18", "'resnet18' over 2 ranks: it declares no tensor-parallel plan"},
        {"--mode=ddp --tp=3 --gpus=4 --model=mlp", "does not divide the 4 rank(s)"},
        {"--mode=fsdp --tp=2 --gpus=2 --model=mlp", "--tp=2 is for --mode=ddp"},
        // The flag the user gave is the one named, not a mode they did not choose.
        {"--mode=ddp --tp=3 --gpus=3 --model=gpt2-tiny --data=synthetic", "--tp=3 cannot split 'gpt2-tiny'"},
        // Another mode's flag is an error, never silently ignored.
        {"--mode=fsdp --gpus=2 --model=mlp --bucket-mb=4", "--bucket-mb is for --mode=ddp, not --mode=fsdp"},
        {"--mode=tp --gpus=2 --model=mlp --micro-batches=2", "--micro-batches is for --mode=mp, not --mode=tp"},
        {"--mode=fsdp --gpus=2 --model=mlp --split=fc2", "--split is for --mode=mp"},
        {"--mode=fsdp --gpus=2 --model=mlp --schedule=gpipe", "--schedule is for --mode=mp"},
        {"--mode=ddp --gpus=2 --model=mlp --dp-forward=bypass", "--dp-forward is for --mode=dp, not --mode=ddp"},
        {"--mode=tp --gpus=2 --model=mlp --dp-input=list", "--dp-input is for --mode=dp"}}) {
    const Proc bad = sh(bin() + " " + flags + " --steps=1");
    EXPECT_NE(bad.code, 0) << flags;
    EXPECT_NE(bad.err.find(says), std::string::npos) << flags << "\n" << bad.err;
    EXPECT_EQ(bad.err.find("launching"), std::string::npos) << flags << "\n" << bad.err;
  }
}

}  // namespace
