// The rendezvous stores: values, atomic counters, and bounded waits that name the key.
#include "engine/comm/store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "engine/comm/tcp_store.h"
#include "engine/core/error.h"

namespace dpb::comm {
namespace {

std::string temp_dir(const std::string& tag) {
  return (std::filesystem::temp_directory_path() / ("dpb_" + tag + "_" + std::to_string(::getpid()))).string();
}

void exercise(Store& s) {
  EXPECT_FALSE(s.check("a"));
  std::thread writer([&] {
    std::this_thread::sleep_for(Millis(50));
    s.set("a", std::string("x\0y", 3));  // any bytes
  });
  EXPECT_EQ(s.get("a", Millis(5000)), std::string("x\0y", 3));  // waits for the writer
  writer.join();
  EXPECT_TRUE(s.check("a"));
  // Counters are atomic across concurrent writers.
  std::vector<std::thread> adders;
  for (int t = 0; t < 4; ++t)
    adders.emplace_back([&] {
      for (int i = 0; i < 25; ++i) s.add("n", 1);
    });
  for (auto& t : adders) t.join();
  EXPECT_EQ(s.add("n", 0), 100);
  // A key nobody sets: a bounded wait, and the message names it.
  const auto t0 = std::chrono::steady_clock::now();
  try {
    s.get("never", Millis(200));
    FAIL() << "expected a timeout";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'never' was not set within 200 ms"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
  PrefixStore p("group1/", std::shared_ptr<Store>(&s, [](Store*) {}));
  p.set("a", "other");
  EXPECT_EQ(p.get("a", Millis(100)), "other");
  EXPECT_EQ(s.get("a", Millis(100)), std::string("x\0y", 3));
}

TEST(Store, MemoryStore) {
  MemoryStore s;
  exercise(s);
}

TEST(Store, FileStore) {
  const auto dir = temp_dir("filestore");
  {
    FileStore s(dir);
    exercise(s);
  }
  std::filesystem::remove_all(dir);
}

TEST(Store, TcpStoreServesClientsThatConnectBeforeItStarts) {
  // Find a free port, then start a client before the server that owns it.
  int port = 0;
  {
    TcpStoreServer probe(0);
    port = probe.port();
  }
  std::unique_ptr<TcpStore> client;
  std::thread early([&] { client = std::make_unique<TcpStore>("127.0.0.1", port, false, Millis(10000)); });
  std::this_thread::sleep_for(Millis(100));
  TcpStore host("127.0.0.1", port, true, Millis(5000));
  early.join();
  EXPECT_EQ(host.port(), port);
  exercise(host);
  EXPECT_EQ(client->get("a", Millis(100)), std::string("x\0y", 3));  // sees what the host's client set
  EXPECT_EQ(client->add("n", 5), 105);
}

TEST(Store, TcpStoreWithoutServerFailsWithinTimeout) {
  int port = 0;
  {
    TcpStoreServer probe(0);
    port = probe.port();
  }
  try {
    TcpStore s("127.0.0.1", port, false, Millis(300));
    FAIL() << "expected a connection error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("could not connect"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("MASTER_ADDR/MASTER_PORT"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dpb::comm
