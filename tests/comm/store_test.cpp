// The rendezvous stores: values, atomic counters, and bounded waits that name the key.
#include "engine/comm/store.h"

#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "engine/comm/store_wire.h"
#include "engine/comm/tcp_store.h"
#include "engine/core/error.h"
#include "tests/support/hostile_client.h"

namespace dpb::comm {
namespace {

std::string temp_dir(const std::string& tag) {
  return (std::filesystem::temp_directory_path() / ("dpb_" + tag + "_" + std::to_string(::getpid()))).string();
}

// A socket listening on 127.0.0.1 at a free port (*port), standing in for a store host
// that misbehaves; -1 on failure.
int listen_loopback(int* port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(fd, 16) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    return -1;
  *port = ntohs(a.sin_port);
  return fd;
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
    TcpStoreServer probe("127.0.0.1", 0, "");
    port = probe.port();
  }
  std::unique_ptr<TcpStore> client;
  std::thread early([&] { client = std::make_unique<TcpStore>("127.0.0.1", port, false, Millis(10000), "t"); });
  std::this_thread::sleep_for(Millis(100));
  TcpStore host("127.0.0.1", port, true, Millis(5000), "t");
  early.join();
  EXPECT_EQ(host.port(), port);
  exercise(host);
  EXPECT_EQ(client->get("a", Millis(100)), std::string("x\0y", 3));  // sees what the host's client set
  EXPECT_EQ(client->add("n", 5), 105);
}

TEST(Store, TcpStoreWithoutServerFailsWithinTimeout) {
  int port = 0;
  {
    TcpStoreServer probe("127.0.0.1", 0, "");
    port = probe.port();
  }
  try {
    TcpStore s("127.0.0.1", port, false, Millis(300), "");
    FAIL() << "expected a connection error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("could not connect"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("MASTER_ADDR/MASTER_PORT"), std::string::npos) << e.what();
  }
}

TEST(StoreWire, ParsesWholeRequestsWaitsForPrefixesAndRejectsTheRest) {
  using namespace wire;
  const std::string req = encode_request(kSet, "key", std::string("v\0w", 3));
  for (size_t n = 0; n < req.size(); ++n) {
    Request r;
    size_t used = 0;
    std::string why;
    EXPECT_EQ(parse_request(std::string_view(req).substr(0, n), &r, &used, &why), Parse::need_more) << n;
  }
  Request r;
  size_t used = 0;
  std::string why;
  ASSERT_EQ(parse_request(req + "next", &r, &used, &why), Parse::done);
  EXPECT_EQ(used, req.size());
  EXPECT_EQ(r.key, "key");
  EXPECT_EQ(r.value, std::string("v\0w", 3));
  EXPECT_EQ(parse_request("\x09", &r, &used, &why), Parse::bad);
  EXPECT_NE(why.find("unknown request type 9"), std::string::npos) << why;
  const uint32_t huge = 0xFFFFFFFFu;
  EXPECT_EQ(parse_request(std::string(1, kGet) + std::string(reinterpret_cast<const char*>(&huge), 4), &r, &used, &why),
            Parse::bad);
  int64_t v = 0;
  EXPECT_TRUE(add_decimal("", "5", &v));
  EXPECT_EQ(v, 5);
  EXPECT_FALSE(add_decimal("9223372036854775807", "1", &v));  // overflow
  EXPECT_FALSE(add_decimal("12", "x", &v));
  EXPECT_FALSE(add_decimal("", "", &v));
}

TEST(Store, TcpStoreAdmitsOnlyItsJob) {
  TcpStore host("127.0.0.1", 0, true, Millis(2000), "secret");
  const int port = host.port();
  host.set("k", "v");
  try {
    TcpStore intruder("127.0.0.1", port, false, Millis(2000), "guess");
    FAIL() << "a wrong token must be turned away";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("DPB_STORE_TOKEN"), std::string::npos) << e.what();
  }
  // Without a hello, a request gets nothing and the connection is closed.
  EXPECT_EQ(test::send_raw(port, wire::encode_request(wire::kGet, "k", "")), "");
  // ADD on a value that is no number drops that client, not the server.
  TcpStore member("127.0.0.1", port, false, Millis(2000), "secret");
  EXPECT_EQ(member.get("k", Millis(100)), "v");
  EXPECT_THROW(member.add("k", 1), Error);
  TcpStore again("127.0.0.1", port, false, Millis(2000), "secret");
  EXPECT_EQ(again.add("n", 2), 2);
}

TEST(Store, TcpStoreKeepsServingWhileClientsSendGarbage) {
  TcpStore host("127.0.0.1", 0, true, Millis(5000), "secret");
  std::atomic<bool> stop{false};
  int attacks = 0;
  std::thread attacker([&] { attacks = test::attack_store(host.port(), stop); });
  TcpStore member("127.0.0.1", host.port(), false, Millis(5000), "secret");
  // Every kind of attack runs (each waits up to 300 ms for an answer) while the job's
  // clients keep working; none of their requests may wait on the attackers.
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  double slowest = 0;
  int i = 0;
  for (; Clock::now() - t0 < std::chrono::milliseconds(2500); ++i) {
    const auto a = Clock::now();
    EXPECT_EQ(member.add("count", 1), i + 1);
    const std::string key = std::string("k").append(std::to_string(i));
    host.set(key, "v");
    EXPECT_EQ(member.get(key, Millis(1000)), "v");
    slowest = std::max(slowest, std::chrono::duration<double>(Clock::now() - a).count());
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  stop = true;
  attacker.join();
  EXPECT_GT(attacks, 5);
  EXPECT_GT(i, 100);
  EXPECT_LT(slowest, 0.5) << "hostile clients stalled the store";
}

TEST(Store, StrangersHoldingHugePartialHellosCannotStarveTheJob) {
  // Four connections each start a hello whose token claims 16,777,212 bytes and send a
  // few MiB of it: before, each could buffer up to 16 MiB, and the connection whose read
  // crossed the store's 64 MiB cap was dropped, an admitted rank's included. Now a
  // stranger is dropped past one hello's size, and the ranks never notice.
  TcpStore host("127.0.0.1", 0, true, Millis(5000), "secret");
  TcpStore member("127.0.0.1", host.port(), false, Millis(5000), "secret");
  std::string header(1, static_cast<char>(wire::kHello));
  const auto klen = static_cast<uint32_t>(wire::kHelloKey.size());
  const uint32_t vlen = 16777212;
  header.append(reinterpret_cast<const char*>(&klen), 4).append(wire::kHelloKey);
  header.append(reinterpret_cast<const char*>(&vlen), 4);
  std::vector<int> strangers;
  const std::string megabyte(1 << 20, 'x');
  for (int k = 0; k < 4; ++k) {
    const int fd = test::connect_loopback(host.port());
    ASSERT_GE(fd, 0);
    strangers.push_back(fd);
    (void)!::send(fd, header.data(), header.size(), MSG_NOSIGNAL);
  }
  // A rank keeps setting a 1 MiB value (a rank's metrics can be that large) while the
  // strangers send their megabytes: 64 MiB of partial hellos in all, what crossed the cap.
  for (int round = 0; round < 16; ++round) {
    for (int fd : strangers) (void)!::send(fd, megabyte.data(), megabyte.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    member.set("big" + std::to_string(round), megabyte);
    EXPECT_EQ(member.get("big" + std::to_string(round), Millis(1000)).size(), megabyte.size());
  }
  for (int fd : strangers) {
    EXPECT_TRUE(test::closed_within(fd, 2000)) << "a stranger past one hello's size is dropped";
    ::close(fd);
  }
  EXPECT_EQ(member.add("still", 1), 1);
  EXPECT_EQ(host.get("big15", Millis(100)).size(), megabyte.size());
}

TEST(Store, TcpStoreClosesSilentConnectionsAndStillAdmitsARank) {
  // Sockets that connect and never say a word: each is closed within the hello limit
  // after its accept, and however many there are, a rank of the job still gets in at once.
  TcpStoreServer server("127.0.0.1", 0, "secret", Millis(300));
  std::vector<int> idle;
  for (int i = 0; i < 300; ++i)  // far more than the store holds unadmitted
    if (const int fd = test::connect_loopback(server.port()); fd >= 0) idle.push_back(fd);
  ASSERT_EQ(idle.size(), 300u);
  const auto t0 = std::chrono::steady_clock::now();
  TcpStore member("127.0.0.1", server.port(), false, Millis(5000), "secret");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2)) << "idle sockets kept a rank waiting";
  member.set("k", "v");
  EXPECT_EQ(member.get("k", Millis(100)), "v");
  // The silent ones are gone: the newest within the limit (plus the server's poll period).
  EXPECT_TRUE(test::closed_within(idle.back(), 2500));
  for (int fd : idle) EXPECT_TRUE(test::closed_within(fd, 100));
  for (int fd : idle) ::close(fd);
  // The admitted member is never timed out for being quiet.
  std::this_thread::sleep_for(Millis(600));
  EXPECT_EQ(member.add("n", 1), 1);
}

TEST(Store, ATokenIsBlamedOnlyWhenTheStoreSaysItIsWrong) {
  // A server that accepts and closes without answering (full, or shutting down) is not a
  // wrong token: the rank retries until its timeout, then says what happened.
  int port = 0;
  const int listener = listen_loopback(&port);
  ASSERT_GE(listener, 0);
  std::atomic<bool> stop{false};
  std::thread closer([&] {
    while (!stop) {
      pollfd p{listener, POLLIN, 0};
      if (::poll(&p, 1, 20) > 0)
        if (const int fd = ::accept(listener, nullptr, nullptr); fd >= 0) ::close(fd);
    }
  });
  try {
    TcpStore s("127.0.0.1", port, false, Millis(500), "secret");
    FAIL() << "a store that never admits must fail";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find("token"), std::string::npos) << what;
    EXPECT_NE(what.find("closed the connection before admitting"), std::string::npos) << what;
  }
  stop = true;
  closer.join();
  ::close(listener);
  // The real store says so when the token is wrong, and only then.
  TcpStore host("127.0.0.1", 0, true, Millis(2000), "secret");
  EXPECT_EQ(test::send_raw(host.port(), wire::encode_request(wire::kHello, wire::kHelloKey, "guess")),
            std::string(1, '\0'));
  EXPECT_EQ(test::send_raw(host.port(), wire::encode_request(wire::kHello, wire::kHelloKey, "secret")),
            std::string(1, '\1'));
}

TEST(Store, AStoreThatStopsAnsweringCostsOneTimeoutNotOnePerRequest) {
  // A host cut off by a partition: it admitted the rank, then answers nothing. The first
  // request waits out the timeout; every later one fails at once with the same reason
  // (a health check reading every rank's record would otherwise wait once per key).
  int port = 0;
  const int listener = listen_loopback(&port);
  ASSERT_GE(listener, 0);
  int conn = -1;
  std::thread host([&] {
    conn = ::accept(listener, nullptr, nullptr);
    const std::string hello = wire::encode_request(wire::kHello, wire::kHelloKey, "t");
    std::string got(hello.size(), '\0');
    ASSERT_EQ(::recv(conn, got.data(), got.size(), MSG_WAITALL), static_cast<ssize_t>(got.size()));
    const char admitted = 1;
    ASSERT_EQ(::send(conn, &admitted, 1, MSG_NOSIGNAL), 1);
  });
  TcpStore s("127.0.0.1", port, false, Millis(1000), "t");
  host.join();
  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  try {
    s.check("k");
    FAIL() << "a store that answers nothing must fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no reply within the timeout"), std::string::npos) << e.what();
  }
  EXPECT_GE(Clock::now() - t0, Millis(900));
  t0 = Clock::now();
  for (int i = 0; i < 5; ++i) EXPECT_THROW(s.set("k", "v"), Error);
  EXPECT_LT(Clock::now() - t0, Millis(200)) << "later requests waited again";
  ::close(conn);
  ::close(listener);
}

}  // namespace
}  // namespace dpb::comm
