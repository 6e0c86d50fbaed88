#include "engine/comm/tcp_store.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <thread>

#include "engine/core/error.h"

namespace dpb::comm {

namespace {

enum Op : uint8_t { kSet = 1, kGet = 2, kAdd = 3, kCheck = 4 };

// Reads or writes exactly n bytes; false on EOF or error.
bool read_all(int fd, void* buf, size_t n) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r == 0) return false;
    if (r < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool write_all(int fd, const void* buf, size_t n) {
  const auto* p = static_cast<const char*>(buf);
  while (n > 0) {
    const ssize_t r = ::send(fd, p, n, MSG_NOSIGNAL);
    if (r < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool read_string(int fd, std::string* s) {
  uint32_t len = 0;
  if (!read_all(fd, &len, 4) || len > (64u << 20)) return false;
  s->resize(len);
  return len == 0 || read_all(fd, s->data(), len);
}

bool write_string(int fd, const std::string& s) {
  const auto len = static_cast<uint32_t>(s.size());
  return write_all(fd, &len, 4) && (len == 0 || write_all(fd, s.data(), len));
}

// Serves one request from `fd`; false when the client is gone (or sent garbage).
bool serve_one(int fd, std::map<std::string, std::string>& kv) {
  uint8_t op = 0;
  std::string key, value;
  if (!read_all(fd, &op, 1) || !read_string(fd, &key) || !read_string(fd, &value)) return false;
  switch (op) {
    case kSet:
      kv[key] = value;
      return write_string(fd, "");
    case kGet: {
      auto it = kv.find(key);
      const uint8_t found = it != kv.end();
      return write_all(fd, &found, 1) && write_string(fd, found ? it->second : "");
    }
    case kAdd: {
      auto it = kv.find(key);
      const int64_t v = (it == kv.end() ? 0 : std::stoll(it->second)) + std::stoll(value);
      kv[key] = std::to_string(v);
      return write_string(fd, kv[key]);
    }
    case kCheck: {
      const uint8_t found = kv.count(key) > 0;
      return write_all(fd, &found, 1);
    }
    default:
      return false;
  }
}

}  // namespace

TcpStoreServer::TcpStoreServer(int port) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  DPB_CHECK(listen_fd_ >= 0) << "tcp store: socket(): " << std::strerror(errno);
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const std::string why = std::strerror(errno);
    ::close(listen_fd_);
    DPB_FAIL() << "tcp store: cannot listen on port " << port << ": " << why
               << " (another run on this MASTER_PORT? pick another with --master-port)";
  }
  DPB_CHECK(::listen(listen_fd_, 256) == 0) << "tcp store: listen(): " << std::strerror(errno);
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  DPB_CHECK(::pipe(wake_) == 0) << "tcp store: pipe(): " << std::strerror(errno);
  thread_ = std::thread([this] { serve(); });
}

TcpStoreServer::~TcpStoreServer() {
  const char c = 0;
  if (::write(wake_[1], &c, 1) < 0) {
  }
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
  ::close(wake_[0]);
  ::close(wake_[1]);
}

void TcpStoreServer::serve() {
  std::vector<pollfd> fds{{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
  for (;;) {
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[0].revents) break;
    if (fds[1].revents & POLLIN) {
      const int c = ::accept(listen_fd_, nullptr, nullptr);
      if (c >= 0) {
        int one = 1;
        ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        // A client that stops halfway through a request cannot hold the server.
        timeval tv{5, 0};
        ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        fds.push_back({c, POLLIN, 0});
      }
    }
    for (size_t i = 2; i < fds.size();) {
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        if (!serve_one(fds[i].fd, kv_)) {
          ::close(fds[i].fd);
          fds.erase(fds.begin() + static_cast<std::ptrdiff_t>(i));
          continue;
        }
      }
      fds[i].revents = 0;
      ++i;
    }
  }
  for (size_t i = 2; i < fds.size(); ++i) ::close(fds[i].fd);
}

TcpStore::TcpStore(const std::string& host, int port, bool host_server, Millis timeout) : host_(host), port_(port) {
  if (host_server) {
    server_ = std::make_unique<TcpStoreServer>(port);
    port_ = server_->port();
  }
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port_).c_str(), &hints, &res);
  DPB_CHECK(rc == 0) << "tcp store: cannot resolve MASTER_ADDR '" << host << "': " << gai_strerror(rc);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string last_error;
  for (int attempt = 0;; ++attempt) {
    for (addrinfo* a = res; a && fd_ < 0; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
      if (fd < 0) continue;
      if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
        fd_ = fd;
      } else {
        last_error = std::strerror(errno);
        ::close(fd);
      }
    }
    if (fd_ >= 0 || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(Millis(std::min(10 * (attempt + 1), 200)));
  }
  ::freeaddrinfo(res);
  DPB_CHECK(fd_ >= 0) << "tcp store: could not connect to " << host << ":" << port_ << " within " << timeout.count()
                      << " ms (" << last_error << "); is rank 0 running with the same MASTER_ADDR/MASTER_PORT?";
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) ::close(fd_);
}

std::string TcpStore::describe() const { return "tcp store " + host_ + ":" + std::to_string(port_); }

std::string TcpStore::request(uint8_t op, const std::string& key, const std::string& value, bool* found_out) {
  std::lock_guard<std::mutex> lock(mu_);
  const bool sent = write_all(fd_, &op, 1) && write_string(fd_, key) && write_string(fd_, value);
  DPB_CHECK(sent) << describe() << ": the store's host (rank 0) is gone (sending a request for '" << key << "')";
  std::string reply;
  bool ok = true;
  if (op == kGet) {
    uint8_t found = 0;
    ok = read_all(fd_, &found, 1) && read_string(fd_, &reply);
    if (found_out) *found_out = found != 0;
  } else if (op == kCheck) {
    uint8_t found = 0;
    ok = read_all(fd_, &found, 1);
    if (found) reply.assign(1, '1');
  } else {
    ok = read_string(fd_, &reply);
  }
  DPB_CHECK(ok) << describe() << ": the store's host (rank 0) is gone (waiting for the reply about '" << key << "')";
  return reply;
}

void TcpStore::set(const std::string& key, const std::string& value) { request(kSet, key, value); }

std::string TcpStore::get(const std::string& key, Millis timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int us = 200;
  for (;;) {
    bool found = false;
    std::string r = request(kGet, key, "", &found);
    if (found) return r;
    DPB_CHECK(std::chrono::steady_clock::now() < deadline)
        << "rendezvous: key '" << key << "' was not set within " << timeout.count() << " ms in the " << describe()
        << " (a rank that should publish it has not started or has died)";
    std::this_thread::sleep_for(std::chrono::microseconds(us));
    us = std::min(us * 2, 20000);
  }
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  return std::stoll(request(kAdd, key, std::to_string(delta)));
}

bool TcpStore::check(const std::string& key) { return !request(kCheck, key, "").empty(); }

}  // namespace dpb::comm
