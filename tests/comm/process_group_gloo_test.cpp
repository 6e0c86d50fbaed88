// The Gloo process group with ranks as threads of this process (an in-memory store,
// loopback TCP): every collective's values, queued execution, send/recv, the checks
// of --debug-collectives, and bounded waits that name the rank that did not arrive.
#include "engine/comm/gloo/process_group_gloo.h"

#include <gtest/gtest.h>

#include <csignal>
#include <functional>
#include <thread>

#include "engine/comm/store.h"
#include "engine/core/error.h"
#include "engine/tensor/allocator.h"
#include "tests/support/ranks.h"

namespace dpb::comm {
namespace {

using test::expect_no_errors;
using test::run_ranks;

// Rank r's input: (r + 1) * (i % 7 + 1), exact in f32, so sums are exact.
Tensor input(int rank, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>((rank + 1) * (i % 7 + 1));
  return Tensor::from_vector({n}, v);
}

class GlooCollectives : public ::testing::TestWithParam<int> {};

TEST_P(GlooCollectives, ComputeWhatTheyShould) {
  const int n = GetParam();
  const int64_t count = 1001;  // not a multiple of the rank count
  const float ranks_sum = static_cast<float>(n * (n + 1) / 2);
  expect_no_errors(run_ranks(n, [&](int r, ProcessGroup& pg) {
    // allreduce sum / avg / max, queued back to back before any wait
    Tensor s = input(r, count), a = input(r, count), m = input(r, count);
    auto w1 = pg.allreduce(s, ReduceOp::sum);
    auto w2 = pg.allreduce(a, ReduceOp::avg);
    auto w3 = pg.allreduce(m, ReduceOp::max);
    w1->wait();
    w2->wait();
    w3->wait();
    const auto sv = s.to_vector(), av = a.to_vector(), mv = m.to_vector();
    for (int64_t i = 0; i < count; ++i) {
      const float base = static_cast<float>(i % 7 + 1);
      ASSERT_EQ(sv[static_cast<size_t>(i)], ranks_sum * base);
      ASSERT_FLOAT_EQ(av[static_cast<size_t>(i)], ranks_sum * base / static_cast<float>(n));
      ASSERT_EQ(mv[static_cast<size_t>(i)], static_cast<float>(n) * base);
    }
    // broadcast from the last rank
    Tensor b = input(r, count);
    pg.broadcast(b, n - 1)->wait();
    EXPECT_EQ(b.to_vector(), input(n - 1, count).to_vector());
    // reduce to rank 0; other ranks keep their values
    Tensor red = input(r, count);
    pg.reduce(red, 0, ReduceOp::sum)->wait();
    if (r == 0) EXPECT_EQ(red.to_vector()[10], ranks_sum * static_cast<float>(10 % 7 + 1));
    else EXPECT_EQ(red.to_vector(), input(r, count).to_vector());
    // allgather: rank q's input at offset q * count
    Tensor all = Tensor::empty({count * n});
    pg.allgather(all, input(r, count))->wait();
    const auto gv = all.to_vector();
    for (int q = 0; q < n; ++q) EXPECT_EQ(gv[static_cast<size_t>(q * count + 3)], static_cast<float>((q + 1) * 4));
    // reduce_scatter: chunk r of the sum
    Tensor chunk = Tensor::empty({count});
    pg.reduce_scatter(chunk, input(r, count * n), ReduceOp::sum)->wait();
    const auto cv = chunk.to_vector();
    for (int64_t i = 0; i < count; ++i)
      ASSERT_EQ(cv[static_cast<size_t>(i)], ranks_sum * static_cast<float>((r * count + i) % 7 + 1));
    // ... and of the average (FSDP's gradients)
    pg.reduce_scatter(chunk, input(r, count * n), ReduceOp::avg)->wait();
    const auto avg = chunk.to_vector();
    for (int64_t i = 0; i < count; ++i)
      ASSERT_FLOAT_EQ(avg[static_cast<size_t>(i)],
                      ranks_sum * static_cast<float>((r * count + i) % 7 + 1) / static_cast<float>(n));
    pg.barrier()->wait();
    // send/recv around a ring
    if (n > 1) {
      Tensor out = input(r, 10), in = Tensor::empty({10});
      auto sw = pg.send(out, (r + 1) % n, 5);
      auto rw = pg.recv(in, (r + n - 1) % n, 5);
      rw->wait();
      sw->wait();
      EXPECT_EQ(in.to_vector(), input((r + n - 1) % n, 10).to_vector());
    }
  }));
}

INSTANTIATE_TEST_SUITE_P(Ranks, GlooCollectives, ::testing::Values(1, 2, 3, 4));

// The reduce-scatter of ranks on different hosts (no shared memory): Gloo's halving and
// doubling, including rank counts that are not powers of two.
class GlooReduceScatterAcrossHosts : public ::testing::TestWithParam<int> {};

TEST_P(GlooReduceScatterAcrossHosts, KeepsEachRanksChunk) {
  const int n = GetParam();
  const int64_t count = 1001;
  const float ranks_sum = static_cast<float>(n * (n + 1) / 2);
  comm::GroupOptions o;
  o.shared_memory = false;
  expect_no_errors(run_ranks(
      n,
      [&](int r, ProcessGroup& pg) {
        Tensor chunk = Tensor::empty({count});
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
          pg.reduce_scatter(chunk, input(r, count * n), op)->wait();
          const auto cv = chunk.to_vector();
          for (int64_t i = 0; i < count; ++i) {
            const auto base = static_cast<float>((r * count + i) % 7 + 1);
            const float want = op == ReduceOp::sum   ? ranks_sum * base
                               : op == ReduceOp::avg ? ranks_sum * base / static_cast<float>(n)
                                                     : static_cast<float>(n) * base;
            ASSERT_FLOAT_EQ(cv[static_cast<size_t>(i)], want) << reduce_op_name(op) << " element " << i;
          }
        }
      },
      o));
}

INSTANTIATE_TEST_SUITE_P(Ranks, GlooReduceScatterAcrossHosts, ::testing::Values(1, 2, 3, 4, 5));

// BF16 all-gathers (FSDP's parameters under a bf16 policy) move every rank's bits, through
// shared memory and over TCP; a BF16 input gathered into F32 is refused by name.
TEST(GlooGroup, AllGathersBf16ThroughSharedMemoryAndTcp) {
  const int64_t count = 1001;
  for (bool shm : {true, false}) {
    comm::GroupOptions o;
    o.shared_memory = shm;
    expect_no_errors(run_ranks(
        3,
        [&](int r, ProcessGroup& pg) {
          const Tensor mine = input(r, count).to_dtype(DType::bf16);
          Tensor all = Tensor::empty({count * 3}, Device::cpu(), DType::bf16);
          pg.allgather(all, mine)->wait();
          const auto gv = all.to_vector();
          for (int q = 0; q < 3; ++q) {
            const auto want = input(q, count).to_vector();  // small integers: exact in bf16
            for (int64_t i = 0; i < count; ++i)
              ASSERT_EQ(gv[static_cast<size_t>(q * count + i)], want[static_cast<size_t>(i)])
                  << (shm ? "shared memory" : "tcp") << ", rank " << q << " element " << i;
          }
          Tensor wide = Tensor::empty({count * 3});
          try {
            pg.allgather(wide, mine);
            ADD_FAILURE() << "BF16 gathered into F32 was accepted";
          } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("BF16 plain into F32 plain"), std::string::npos) << e.what();
          }
        },
        o));
  }
}

// A finished collective holds on to none of its tensors, even while its Work lives on:
// a caller that drops its buffers after wait() (FSDP's all-gather output, each bucket's
// gradients) frees their memory then, not whenever the group's thread next runs.
TEST(GlooGroup, AFinishedCollectiveLetsGoOfItsTensors) {
  const int64_t count = 4096;
  for (bool shm : {true, false}) {
    comm::GroupOptions o;
    o.shared_memory = shm;
    expect_no_errors(run_ranks(
        2,
        [&](int r, ProcessGroup& pg) {
          // A device of each rank's own (cpu:0 holds what the other rank makes elsewhere).
          const Device dev = Device::cpu(1 + r);
          const std::vector<float> values(static_cast<size_t>(count), static_cast<float>(r + 1));
          const int64_t before = memory_stats(dev).current_bytes;
          Tensor mine = Tensor::from_vector({count}, values, dev), all = Tensor::empty({count * 2}, dev);
          Tensor summed = Tensor::from_vector({count}, values, dev);
          auto gathered = pg.allgather(all, mine);
          auto reduced = pg.allreduce(summed, ReduceOp::sum);
          gathered->wait();
          reduced->wait();
          EXPECT_GE(memory_stats(dev).current_bytes - before, 4 * count * 4);
          mine = all = summed = Tensor();
          EXPECT_EQ(memory_stats(dev).current_bytes, before)
              << (shm ? "shared memory" : "tcp") << ", rank " << r << ": the finished collectives still hold tensors";
          EXPECT_TRUE(gathered->completed() && reduced->completed());
        },
        o));
  }
}

TEST(GlooGroup, MismatchedSizesAreAClearErrorWithDebugCollectives) {
  GroupOptions o;
  o.debug_collectives = true;
  o.timeout = Millis(5000);
  const auto errors = run_ranks(
      2,
      [](int r, ProcessGroup& pg) {
        Tensor t = Tensor::zeros({r == 0 ? 100 : 120});
        pg.allreduce(t)->wait();
      },
      o);
  for (const auto& e : errors) {
    EXPECT_NE(e.find("collective mismatch at allreduce #0"), std::string::npos) << e;
    EXPECT_NE(e.find("with 100 elements"), std::string::npos) << e;
    EXPECT_NE(e.find("with 120 elements"), std::string::npos) << e;
  }
}

// A waiting rank polls before it sleeps (GroupOptions::spin): any poll, however long, is
// within the wait's bound, and collectives give the same results with and without it.
TEST(GlooGroup, PollingWaitsStayWithinTheirBoundAndChangeNoResult) {
  for (const auto spin : {Millis(0), Millis(20), Millis(60000)}) {
    GroupOptions o;
    o.spin = spin;
    o.timeout = Millis(5000);
    const auto errors = run_ranks(
        2,
        [](int r, ProcessGroup& pg) {
          Tensor t = Tensor::from_vector({3}, {1.0f + r, 2.0f, 3.0f});
          pg.allreduce(t)->wait();
          EXPECT_EQ(t.to_vector(), (std::vector<float>{3, 4, 6}));
          // A peer 200 ms late: the poller waits for it, past a short poll.
          if (r == 1) std::this_thread::sleep_for(Millis(200));
          pg.allreduce(t)->wait();
          EXPECT_EQ(t.to_vector(), (std::vector<float>{6, 8, 12}));
        },
        o);
    for (const auto& e : errors) EXPECT_EQ(e, "") << "spin " << spin.count() << " ms";
  }
  // A minute's poll does not outlast a 300 ms wait bound for a peer that never comes.
  GroupOptions o;
  o.spin = Millis(60000);
  o.timeout = Millis(300);
  const auto t0 = std::chrono::steady_clock::now();
  const auto errors = run_ranks(
      2,
      [](int r, ProcessGroup& pg) {
        Tensor t = Tensor::zeros({8});
        if (r == 0) pg.allreduce(t)->wait(Millis(300));
        else std::this_thread::sleep_for(Millis(1500));
      },
      o);
  EXPECT_NE(errors[0].find("allreduce #0"), std::string::npos) << errors[0];
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
}

TEST(GlooGroup, ARankThatNeverArrivesIsNamedWithinTheTimeout) {
  GroupOptions o;
  o.timeout = Millis(1500);
  const auto t0 = std::chrono::steady_clock::now();
  const auto errors = run_ranks(
      3,
      [](int r, ProcessGroup& pg) {
        Tensor t = Tensor::zeros({64});
        pg.allreduce(t)->wait();  // #0: everyone
        if (r == 2) {
          std::this_thread::sleep_for(Millis(4000));  // alive but never calls #1
          return;
        }
        pg.allreduce(t)->wait();  // #1: rank 2 does not arrive
      },
      o);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(errors[2], "");
  for (int r : {0, 1}) {
    const auto& e = errors[static_cast<size_t>(r)];
    EXPECT_NE(e.find("allreduce #1"), std::string::npos) << e;
    EXPECT_NE(e.find("rank(s) 2 did not arrive"), std::string::npos) << e;
    EXPECT_NE(e.find("last entered allreduce #0"), std::string::npos) << e;
  }
  EXPECT_LT(seconds, 10.0);
  // After a failure the group is broken: later calls fail at once with the cause.
}

TEST(GlooGroup, LaterCallsOnABrokenGroupFailAtOnce) {
  GroupOptions o;
  o.timeout = Millis(800);
  const auto errors = run_ranks(
      2,
      [](int r, ProcessGroup& pg) {
        if (r == 1) {
          std::this_thread::sleep_for(Millis(2500));
          return;
        }
        Tensor t = Tensor::zeros({8});
        EXPECT_THROW(pg.allreduce(t)->wait(), Error);
        const auto t0 = std::chrono::steady_clock::now();
        try {
          pg.allreduce(t)->wait();
          ADD_FAILURE() << "a broken group ran a collective";
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("the group broke earlier"), std::string::npos) << e.what();
        }
        EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(200));
      },
      o);
  EXPECT_EQ(errors[0], "");
}

// A peer that dies mid-collective closes its sockets; Gloo's next write to them raises
// SIGPIPE, which by default kills this rank before it can name the peer. Joining a group
// ignores SIGPIPE (the write then fails with EPIPE and the collective reports the peer),
// unless the program has its own handler, which stays.
sighandler_t sigpipe_after_joining() {
  ProcessGroupGloo pg(std::make_shared<MemoryStore>(), 0, 1, GroupOptions{});
  struct sigaction now {};
  ::sigaction(SIGPIPE, nullptr, &now);
  return now.sa_handler;
}

TEST(GlooGroup, JoiningIgnoresSigpipeSoADeadPeerIsAnErrorNotADeath) {
  ::signal(SIGPIPE, SIG_DFL);
  EXPECT_EQ(sigpipe_after_joining(), SIG_IGN);
  ::signal(SIGPIPE, SIG_DFL);
}

void on_sigpipe(int) {}

TEST(GlooGroup, JoiningKeepsTheProgramsOwnSigpipeHandler) {
  const sighandler_t old = ::signal(SIGPIPE, on_sigpipe);
  EXPECT_EQ(sigpipe_after_joining(), &on_sigpipe);
  ::signal(SIGPIPE, old);
}

}  // namespace
}  // namespace dpb::comm
