// The shared-memory all-reduce of Gloo ranks on one host, ranks as threads of this
// process (the segment is the same one processes would map): exact sums and averages over
// buffers of several chunks, the same results as Gloo's TCP all-reduce, regions reduced in
// place in every rank's copy (DDP's buckets), a rank that never arrives named within the
// timeout, ranks on several hosts left to TCP, and no segment
// name left behind.
#include "engine/comm/gloo/shm_allreduce.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <thread>

#include "engine/comm/gloo/process_group_gloo.h"
#include "engine/core/error.h"
#include "tests/support/ranks.h"

namespace dpb::comm {
namespace {

// Runs fn(rank, allreduce, store) on `world` threads over one store; returns each rank's
// error.
using ShmFn = std::function<void(int, ShmAllreduce&, const std::shared_ptr<Store>&)>;
std::vector<std::string> with_shm_store(int world, Millis timeout, const ShmFn& fn) {
  auto store = std::make_shared<MemoryStore>();
  std::vector<std::string> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        std::string why;
        auto shm = ShmAllreduce::create(*store, r, world, timeout, &why);
        if (!shm) throw Error("no shared memory: " + why);
        fn(r, *shm, store);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}
std::vector<std::string> with_shm(int world, Millis timeout, const std::function<void(int, ShmAllreduce&)>& fn) {
  return with_shm_store(world, timeout, [&](int r, ShmAllreduce& shm, const std::shared_ptr<Store>&) { fn(r, shm); });
}

// Rank r's value at i: (r + 1) * (i % 7 + 1), exact in f32 and so are the sums.
std::vector<float> input(int rank, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>((rank + 1) * (i % 7 + 1));
  return v;
}

class ShmRanks : public ::testing::TestWithParam<int> {};

TEST_P(ShmRanks, SumsAndAveragesExactlyOverSeveralChunks) {
  const int world = GetParam();
  const float ranks = static_cast<float>(world * (world + 1) / 2);
  for (const size_t n : {size_t{1}, size_t{1001}, 2 * ShmAllreduce::kSlotFloats + 123}) {
    const auto errors = with_shm(world, Millis(10000), [&](int r, ShmAllreduce& shm) {
      auto sum = input(r, n), avg = input(r, n);
      shm.allreduce(sum.data(), n, false);
      shm.allreduce(avg.data(), n, true);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(sum[i], ranks * static_cast<float>(i % 7 + 1)) << "n " << n << " i " << i;
        ASSERT_FLOAT_EQ(avg[i], ranks * static_cast<float>(i % 7 + 1) / static_cast<float>(world));
      }
    });
    for (const auto& e : errors) EXPECT_EQ(e, "");
  }
}

// All-gathers and reduce-scatters over several chunks, back to back with all-reduces (a
// slot is not overwritten while another rank still reads it).
TEST_P(ShmRanks, GathersEveryRanksBufferOverSeveralChunks) {
  const int world = GetParam();
  for (const size_t n : {size_t{1}, size_t{1001}, 2 * ShmAllreduce::kSlotFloats + 123}) {
    const auto errors = with_shm(world, Millis(10000), [&](int r, ShmAllreduce& shm) {
      for (int round = 0; round < 3; ++round) {
        const auto mine = input(r + round, n);
        std::vector<float> all(n * static_cast<size_t>(world), -1.0f);
        shm.allgather(mine.data(), n * sizeof(float), all.data());
        for (int q = 0; q < world; ++q) {
          const auto theirs = input(q + round, n);
          for (size_t i = 0; i < n; ++i)
            ASSERT_EQ(all[static_cast<size_t>(q) * n + i], theirs[i]) << "rank " << q << " n " << n << " i " << i;
        }
        auto sum = input(r, n);
        shm.allreduce(sum.data(), n, false);
        ASSERT_EQ(sum[n - 1], static_cast<float>(world * (world + 1) / 2) * static_cast<float>((n - 1) % 7 + 1));
        // Reduce-scatter: rank r's chunk of the sum (and of the average) of every rank's
        // world x n input, exact in f32.
        const auto whole = input(r + round, n * static_cast<size_t>(world));
        std::vector<float> chunk(n, -1.0f), mean(n, -1.0f);
        shm.reduce_scatter(whole.data(), n, chunk.data(), false);
        shm.reduce_scatter(whole.data(), n, mean.data(), true);
        float ranks = 0;
        for (int q = 0; q < world; ++q) ranks += static_cast<float>(q + round + 1);
        for (size_t i = 0; i < n; ++i) {
          const float base = static_cast<float>((static_cast<size_t>(r) * n + i) % 7 + 1);
          ASSERT_EQ(chunk[i], ranks * base) << "n " << n << " i " << i;
          ASSERT_FLOAT_EQ(mean[i], ranks * base / static_cast<float>(world));
        }
      }
    });
    for (const auto& e : errors) EXPECT_EQ(e, "");
  }
}

// In place: every rank's copy of a shared region holds the sum (or average) of a piece
// afterwards, bit for bit what the copying all-reduce gives, the rest of the region
// untouched; back to back with the copying path (one phase count for both).
TEST_P(ShmRanks, ReducesARegionInPlaceInEveryRanksCopy) {
  const int world = GetParam();
  const size_t n = 3 * 2048 + 77, off = 100, len = n - 150;
  const auto errors = with_shm_store(world, Millis(10000), [&](int r, ShmAllreduce& shm, const auto& store) {
    std::string why;
    PrefixStore region_store("region/", store);
    auto region = shm.create_region(region_store, n, &why);
    if (!region) throw Error("no region: " + why);
    for (const bool average : {false, true}) {
      // Values that round differently in each order: the same bits everywhere only if
      // every rank sums in rank order, as the copying path does.
      std::vector<float> mine(n);
      for (size_t i = 0; i < n; ++i) mine[i] = 0.1f * static_cast<float>(r + 1) + 1e-3f * static_cast<float>(i);
      std::copy(mine.begin(), mine.end(), region->part(r));
      auto copied = std::vector<float>(mine.begin() + off, mine.begin() + off + len);
      shm.allreduce(copied.data(), len, average);
      shm.allreduce_in_place(*region, off, len, average);
      const float* got = region->part(r);
      for (size_t i = 0; i < n; ++i) {
        if (i < off || i >= off + len) {
          ASSERT_EQ(got[i], mine[i]) << "outside the piece, i " << i;
        } else {
          ASSERT_EQ(got[i], copied[i - off]) << "average " << average << " i " << i;
        }
      }
      shm.allreduce(copied.data(), 1, false);  // the phases still agree
    }
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
}

INSTANTIATE_TEST_SUITE_P(Ranks, ShmRanks, ::testing::Values(2, 3, 4));

// A group's shared buffer: DDP's buckets lie in it and are reduced where they are; the
// results equal Gloo's over TCP.
TEST(ShmAllreduce, SharedBuffersAreReducedInPlaceAsGlooWould) {
  for (const bool shm : {false, true}) {
    GroupOptions o;
    o.shared_memory = shm;
    test::expect_no_errors(test::run_ranks(
        3,
        [shm](int r, ProcessGroup& pg) {
          Tensor all = pg.shared_buffer(90000, Device::cpu(r));
          ASSERT_EQ(all.defined(), shm) << "a shared buffer only where the group has shared memory";
          if (!all.defined()) all = Tensor::zeros({90000}, Device::cpu(r));
          EXPECT_EQ(all.device(), Device::cpu(r));
          EXPECT_EQ(all.to_vector()[123], 0.0f) << "zeroed";
          Tensor piece = all.slice(20000, 90000);
          std::vector<float> v(70000);
          for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((r + 1) * (i % 11));
          piece.copy_from(Tensor::from_vector({70000}, v));
          pg.allreduce(piece, ReduceOp::avg)->wait();
          const auto out = piece.to_vector();
          for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], 2.0f * static_cast<float>(i % 11));
          EXPECT_EQ(all.to_vector()[19999], 0.0f) << "the rest of the buffer untouched";
        },
        o));
  }
}

TEST(ShmAllreduce, GivesGloosResults) {
  for (const bool shm : {false, true}) {
    GroupOptions o;
    o.shared_memory = shm;
    test::expect_no_errors(test::run_ranks(
        3,
        [](int r, ProcessGroup& pg) {
          std::vector<float> v(70000);
          for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((r + 1) * (i % 11));
          Tensor t = Tensor::from_vector({static_cast<int64_t>(v.size())}, v);
          pg.allreduce(t, ReduceOp::sum)->wait();
          const auto out = t.to_vector();
          for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], 6.0f * static_cast<float>(i % 11));
        },
        o));
  }
}

TEST(ShmAllreduce, ARankThatNeverArrivesIsNamedWithinTheTimeout) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto errors = with_shm(3, Millis(400), [](int r, ShmAllreduce& shm) {
    auto v = input(r, 100);
    shm.allreduce(v.data(), v.size(), false);  // everyone
    if (r == 2) return;                        // never reaches the second
    shm.allreduce(v.data(), v.size(), false);
  });
  EXPECT_EQ(errors[2], "");
  for (int r : {0, 1}) EXPECT_NE(errors[static_cast<size_t>(r)].find("rank(s) 2 did not reach phase 3"), std::string::npos)
                           << errors[static_cast<size_t>(r)];
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
}

TEST(ShmAllreduce, RanksOnSeveralHostsAreLeftToTcp) {
  MemoryStore store;
  store.set("host/1", "another-host/boot");
  std::string why;
  EXPECT_EQ(ShmAllreduce::create(store, 0, 2, Millis(1000), &why), nullptr);
  EXPECT_NE(why.find("several hosts"), std::string::npos) << why;
}

TEST(ShmAllreduce, LeavesNoSegmentNameBehind) {
  namespace fs = std::filesystem;
  auto names = [] {
    std::set<std::string> out;
    if (fs::exists("/dev/shm"))
      for (const auto& e : fs::directory_iterator("/dev/shm"))
        if (e.path().filename().string().rfind("dpb-shm-", 0) == 0) out.insert(e.path().filename().string());
    return out;
  };
  const auto before = names();
  const auto errors = with_shm(2, Millis(5000), [&](int r, ShmAllreduce& shm) {
    auto v = input(r, 10);
    shm.allreduce(v.data(), v.size(), false);
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(names(), before);
}


// A rank killed at any moment of the set-up (before, while and after the others map the
// segment) leaves no file in /dev/shm: the segment never had a name there. Before, a
// SIGKILL 0.24-0.30 s after start leaked one in 5 of 100 trials.
TEST(ShmAllreduce, ARankKilledDuringTheSetUpLeavesNothingInDevShm) {
  namespace fs = std::filesystem;
  auto names = [] {
    std::set<std::string> out;
    if (fs::exists("/dev/shm"))
      for (const auto& e : fs::directory_iterator("/dev/shm")) out.insert(e.path().filename().string());
    return out;
  };
  const auto before = names();
  const fs::path dir = fs::temp_directory_path() / ("dpb_shm_kill_" + std::to_string(::getpid()));
  for (const int delay_us : {0, 200, 1000, 5000, 20000}) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    pid_t pids[2];
    for (int r = 0; r < 2; ++r) {
      pids[r] = ::fork();
      if (pids[r] == 0) {
        try {
          FileStore store(dir.string());
          std::string why;
          auto shm = ShmAllreduce::create(store, r, 2, Millis(2000), &why);
          ::_exit(shm ? 0 : 1);
        } catch (...) {
          ::_exit(2);  // rank 0 died before it said where the segment is
        }
      }
    }
    ::usleep(delay_us);
    ::kill(pids[0], SIGKILL);  // rank 0 makes the segment
    for (pid_t p : pids) ::waitpid(p, nullptr, 0);
    EXPECT_EQ(names(), before) << "killed after " << delay_us << " us";
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace dpb::comm
