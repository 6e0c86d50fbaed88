#include "tests/support/hostile_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "engine/comm/store_wire.h"

namespace dpb::test {

int connect_loopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) return fd;
  if (fd >= 0) ::close(fd);
  return -1;
}

bool closed_within(int fd, int ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  char buf[64];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    const ssize_t r = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) return true;
  }
}

namespace {

std::string u32(uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }

}  // namespace

std::string send_raw(int port, const std::string& bytes, int pause_ms) {
  const int fd = connect_loopback(port);
  if (fd < 0) {  // not listening (yet)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return {};
  }
  for (size_t i = 0; i < bytes.size();) {
    const size_t n = pause_ms > 0 ? 1 : bytes.size() - i;
    const ssize_t w = ::send(fd, bytes.data() + i, n, MSG_NOSIGNAL);
    if (w <= 0) break;
    i += static_cast<size_t>(w);
    if (pause_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
  }
  std::string got;
  pollfd p{fd, POLLIN, 0};
  char buf[256];
  while (::poll(&p, 1, 300) > 0) {
    const ssize_t r = ::recv(fd, buf, sizeof(buf), 0);
    if (r <= 0) break;
    got.append(buf, static_cast<size_t>(r));
  }
  ::close(fd);
  return got;
}

int attack_store(int port, const std::atomic<bool>& stop) {
  using namespace comm::wire;
  std::mt19937 rng(42);
  int made = 0;
  std::vector<int> held;  // half-sent requests, left open
  while (!stop) {
    std::string garbage(1 + rng() % 512, '\0');
    for (auto& c : garbage) c = static_cast<char>(rng());
    const std::string hello_ok_format = encode_request(kHello, kHelloKey, "not-the-token");
    const std::string huge = std::string(1, static_cast<char>(kSet)) + u32(0xFFFFFFFFu);
    const std::string huge_value = std::string(1, static_cast<char>(kSet)) + u32(1) + "k" + u32(0x7FFFFFFFu);
    switch (made % 5) {
      case 0: send_raw(port, garbage); break;
      case 1: send_raw(port, huge); break;
      case 2: send_raw(port, huge_value); break;
      case 3: send_raw(port, hello_ok_format.substr(0, 12), 20); break;  // slow, then stops
      case 4: {
        if (const int fd = connect_loopback(port); fd >= 0) {
          ::send(fd, hello_ok_format.data(), 7, MSG_NOSIGNAL);  // half a request, kept open
          held.push_back(fd);
        }
        break;
      }
    }
    ++made;
  }
  for (int fd : held) ::close(fd);
  return made;
}

}  // namespace dpb::test
