#include "engine/comm/tcp_store.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fcntl.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <map>
#include <thread>

#include "engine/comm/store_wire.h"
#include "engine/core/error.h"
#include "engine/core/log.h"
#include "engine/core/text.h"

namespace dpb::comm {

namespace wire {

namespace {
uint32_t u32(std::string_view b, size_t at) {
  uint32_t v = 0;
  std::memcpy(&v, b.data() + at, 4);
  return v;
}
}  // namespace

Parse parse_request(std::string_view buf, Request* out, size_t* used, std::string* why) {
  if (buf.empty()) return Parse::need_more;
  const auto op = static_cast<uint8_t>(buf[0]);
  if (op < kSet || op > kHello) {
    *why = "unknown request type " + std::to_string(op);
    return Parse::bad;
  }
  if (buf.size() < 5) return Parse::need_more;
  const uint32_t klen = u32(buf, 1);
  if (klen > kMaxKey) {
    *why = "a key of " + std::to_string(klen) + " bytes (at most " + std::to_string(kMaxKey) + ")";
    return Parse::bad;
  }
  if (buf.size() < 5 + size_t{klen} + 4) return Parse::need_more;
  const uint32_t vlen = u32(buf, 5 + klen);
  if (vlen > kMaxValue) {
    *why = "a value of " + std::to_string(vlen) + " bytes (at most " + std::to_string(kMaxValue) + ")";
    return Parse::bad;
  }
  const size_t total = 5 + size_t{klen} + 4 + size_t{vlen};
  if (buf.size() < total) return Parse::need_more;
  out->op = static_cast<Op>(op);
  out->key.assign(buf.data() + 5, klen);
  out->value.assign(buf.data() + 9 + klen, vlen);
  *used = total;
  return Parse::done;
}

std::string encode_request(Op op, std::string_view key, std::string_view value) {
  std::string b(1, static_cast<char>(op));
  const auto k = static_cast<uint32_t>(key.size()), v = static_cast<uint32_t>(value.size());
  b.append(reinterpret_cast<const char*>(&k), 4).append(key);
  b.append(reinterpret_cast<const char*>(&v), 4).append(value);
  return b;
}

bool add_decimal(std::string_view current, std::string_view delta, int64_t* result) {
  auto parse = [](std::string_view s, int64_t* v) {
    if (s.empty()) return false;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
    return ec == std::errc() && end == s.data() + s.size();
  };
  int64_t a = 0, d = 0;
  if ((!current.empty() && !parse(current, &a)) || !parse(delta, &d)) return false;
  return !__builtin_add_overflow(a, d, result);
}

}  // namespace wire

namespace {

using namespace wire;

// What a connection that has not said the token may send: one hello, its token at most
// kMaxToken bytes. Strangers hold at most kMaxUnadmitted such buffers, so they cannot
// make the store hold more than a few hundred KB, and an admitted rank (up to one whole
// request) never pays for what they sent.
constexpr size_t kMaxHelloBytes = 1 + 4 + kHelloKey.size() + 4 + kMaxToken;
constexpr size_t kMaxConnections = 4096;        // admitted clients (they know the token)
constexpr size_t kMaxUnadmitted = 64;           // connections that have not said the token yet
constexpr auto kPartialRequestLimit = std::chrono::seconds(30);  // a request sent slower is dropped
// The answers to the first request (kHello).
constexpr uint8_t kAdmitted = 1, kWrongToken = 0;

// Reads or writes exactly n bytes on a blocking socket; false on EOF or error.
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
  if (!read_all(fd, &len, 4) || len > kMaxValue) return false;
  s->resize(len);
  return len == 0 || read_all(fd, s->data(), len);
}

void put_string(std::string& out, const std::string& s) {
  const auto len = static_cast<uint32_t>(s.size());
  out.append(reinterpret_cast<const char*>(&len), 4).append(s);
}

}  // namespace

// One client of the server: what it sent that is not served yet, and the replies not
// yet taken.
struct TcpStoreServer::Conn {
  int fd = -1;
  bool hello = false;
  std::string in, out;
  std::chrono::steady_clock::time_point accepted{}, partial_since{};
};

TcpStoreServer::TcpStoreServer(const std::string& bind_host, int port, std::string token,
                               std::chrono::milliseconds hello_limit)
    : token_(std::move(token)), hello_limit_(hello_limit) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  const int rc = ::getaddrinfo(bind_host.c_str(), std::to_string(port).c_str(), &hints, &res);
  DPB_CHECK(rc == 0) << "tcp store: cannot resolve the address to listen on, '" << escape_untrusted(bind_host)
                     << "': " << gai_strerror(rc);
  std::string why = "no address";
  for (addrinfo* a = res; a && listen_fd_ < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1, zero = 0;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    // "::" serves IPv4 clients too.
    if (a->ai_family == AF_INET6) ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 256) == 0) {
      listen_fd_ = fd;
      sockaddr_storage addr{};
      socklen_t len = sizeof(addr);
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
      port_ = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                               : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
      char host[NI_MAXHOST] = {0};
      if (::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) == 0)
        address_ = host;
    } else {
      why = std::strerror(errno);
      ::close(fd);
    }
  }
  ::freeaddrinfo(res);
  DPB_CHECK(listen_fd_ >= 0) << "tcp store: cannot listen on " << escape_untrusted(bind_host) << ":" << port << ": "
                             << why << " (another run on this MASTER_PORT? pick another with --master-port; "
                             << "MASTER_ADDR must be an address of the node that runs rank 0)";
  // An IPv6 address in brackets ("[::]:29500"), as in a URL.
  log::info("tcp store: listening on {}:{}{}", address_.find(':') != std::string::npos ? "[" + address_ + "]" : address_,
            port_, address_ == "0.0.0.0" || address_ == "::" ? " (every address of this node)" : "");
  ::fcntl(listen_fd_, F_SETFL, ::fcntl(listen_fd_, F_GETFL) | O_NONBLOCK);
  DPB_CHECK(::pipe2(wake_, O_CLOEXEC) == 0) << "tcp store: pipe(): " << std::strerror(errno);
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

// Serves what `c` sent; false when it must be dropped (a wrong token, garbage, or more
// than the store holds).
bool TcpStoreServer::handle(Conn& c) {
  for (;;) {
    Request r;
    size_t used = 0;
    std::string why;
    const Parse p = parse_request(c.in, &r, &used, &why);
    if (p == Parse::bad) return false;
    if (p == Parse::need_more) {
      if (c.in.empty()) c.partial_since = {};
      else if (c.partial_since == std::chrono::steady_clock::time_point{})
        c.partial_since = std::chrono::steady_clock::now();
      return true;
    }
    c.in.erase(0, used);
    c.partial_since = {};
    if (!c.hello) {  // the first request proves the client is of this job
      if (r.op != kHello || r.key != kHelloKey) return false;
      if (r.value != token_) {  // said so, best effort, before the connection is dropped
        const uint8_t no = kWrongToken;
        (void)!::send(c.fd, &no, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
        return false;
      }
      c.hello = true;
      c.out.push_back(static_cast<char>(kAdmitted));
      continue;
    }
    switch (r.op) {
      case kSet:
        kv_[r.key] = std::move(r.value);
        put_string(c.out, "");
        break;
      case kGet: {
        auto it = kv_.find(r.key);
        c.out.push_back(it != kv_.end() ? 1 : 0);
        put_string(c.out, it != kv_.end() ? it->second : std::string());
        break;
      }
      case kAdd: {
        int64_t v = 0;
        auto it = kv_.find(r.key);
        if (!add_decimal(it == kv_.end() ? std::string_view() : std::string_view(it->second), r.value, &v)) return false;
        kv_[r.key] = std::to_string(v);
        put_string(c.out, kv_[r.key]);
        break;
      }
      case kCheck:
        c.out.push_back(kv_.count(r.key) ? 1 : 0);
        break;
      case kHello:
        return false;
    }
  }
}

void TcpStoreServer::serve() {
  std::vector<Conn> conns;
  std::vector<pollfd> fds;
  std::vector<char> chunk(64 << 10);
  auto drop = [&](size_t i) {
    ::close(conns[i].fd);
    conns.erase(conns.begin() + static_cast<std::ptrdiff_t>(i));
  };
  for (;;) {
    fds.assign({{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}});
    for (const auto& c : conns) fds.push_back({c.fd, static_cast<short>(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
    if (::poll(fds.data(), fds.size(), 1000) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[0].revents) break;
    // fds[k + 2] is conns[k]; walk backwards so that dropping keeps the pairing.
    const auto now = std::chrono::steady_clock::now();
    for (size_t k = conns.size(); k-- > 0;) {
      Conn& c = conns[k];
      const short ev = fds[k + 2].revents;
      bool ok = true;
      if (ev & (POLLIN | POLLHUP | POLLERR)) {
        for (;;) {
          const ssize_t n = ::recv(c.fd, chunk.data(), chunk.size(), MSG_DONTWAIT);
          if (n > 0) {
            c.in.append(chunk.data(), static_cast<size_t>(n));
            if (c.in.size() > (c.hello ? kMaxRequest : kMaxHelloBytes)) {
              ok = false;
              break;
            }
            continue;
          }
          if (n < 0 && errno == EINTR) continue;
          if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) ok = false;  // gone
          break;
        }
        if (!handle(c)) ok = false;
      }
      if (ok && c.partial_since != std::chrono::steady_clock::time_point{} && now - c.partial_since > kPartialRequestLimit)
        ok = false;
      if (ok && !c.hello && now - c.accepted > hello_limit_) ok = false;  // silent, or too slow to say the token
      if (ok && !c.out.empty()) {
        const ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
          c.out.erase(0, static_cast<size_t>(n));
        } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          ok = false;
        }
        if (c.out.size() > kMaxRequest) ok = false;  // a client that asks but never reads
      }
      if (!ok) drop(k);
    }
    if (fds[1].revents & POLLIN) {
      for (;;) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;
        // Room for a newcomer: the oldest connection that has not said the token goes
        // (it had its chance); a full house of admitted ranks turns the newcomer away.
        size_t unadmitted = 0, oldest = conns.size();
        for (size_t k = 0; k < conns.size(); ++k)
          if (!conns[k].hello && unadmitted++ == 0) oldest = k;
        if (unadmitted >= kMaxUnadmitted) drop(oldest);
        if (conns.size() >= kMaxConnections) {
          ::close(fd);
          continue;
        }
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        conns.push_back({fd, false, {}, {}, std::chrono::steady_clock::now(), {}});
      }
    }
  }
  for (const auto& c : conns) ::close(c.fd);
}

namespace {

// connect(), bounded by `deadline`: where the server's accept queue is full the kernel
// drops the SYNs and a blocking connect would wait out its own timeout (minutes).
bool connect_within(int fd, const sockaddr* addr, socklen_t len, std::chrono::steady_clock::time_point deadline,
                    std::string* error) {
  const int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  int rc = ::connect(fd, addr, len);
  if (rc != 0 && errno == EINPROGRESS) {
    for (;;) {
      const auto left = std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now()).count();
      if (left <= 0) {
        if (error->empty()) *error = "no answer to the connection request";  // else the last attempt's reason
        return false;
      }
      pollfd p{fd, POLLOUT, 0};
      const int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
      if (n < 0 && errno != EINTR) break;
      if (n <= 0) continue;
      int err = 0;
      socklen_t el = sizeof(err);
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
      errno = err;
      rc = err == 0 ? 0 : -1;
      break;
    }
  }
  if (rc != 0) {
    *error = std::strerror(errno);
    return false;
  }
  ::fcntl(fd, F_SETFL, flags);
  return true;
}

}  // namespace

TcpStore::TcpStore(const std::string& host, int port, const TcpStoreOptions& o) : host_(host), port_(port) {
  if (o.host_server) {
    server_ = std::make_unique<TcpStoreServer>(o.bind.empty() ? host : o.bind, port, o.token);
    port_ = server_->port();
  }
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port_).c_str(), &hints, &res);
  DPB_CHECK(rc == 0) << "tcp store: cannot resolve MASTER_ADDR '" << escape_untrusted(host) << "': " << gai_strerror(rc);
  const auto deadline = std::chrono::steady_clock::now() + o.timeout;
  DPB_CHECK(o.token.size() <= kMaxToken) << "DPB_STORE_TOKEN has " << o.token.size() << " bytes; a store token has "
                                         << kMaxToken << " at most";
  const std::string hello = encode_request(kHello, kHelloKey, o.token);
  // A reply is bounded by the store's timeout too: a host that stops answering is an error.
  const timeval tv{static_cast<time_t>(std::max<int64_t>(o.timeout.count(), 1000) / 1000), 0};
  std::string last_error;
  std::string refused;  // the server's own answer: "wrong token", or bytes no store sends
  bool connected_once = false;
  for (int attempt = 0;; ++attempt) {
    for (addrinfo* a = res; a && fd_ < 0; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      if (!connect_within(fd, a->ai_addr, a->ai_addrlen, deadline, &last_error)) {
        ::close(fd);
        continue;
      }
      connected_once = true;
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));  // a partitioned host must not block a send
      uint8_t answer = 0xFF;
      if (write_all(fd, hello.data(), hello.size()) && read_all(fd, &answer, 1)) {
        if (answer == kAdmitted) {
          fd_ = fd;
          break;
        }
        ::close(fd);
        refused = answer == kWrongToken ? "wrong token" : "not a store";
        break;
      }
      // Closed (or silent) without an answer: the store was full or starting; try again.
      last_error = "the store closed the connection before admitting this rank";
      ::close(fd);
    }
    if (fd_ >= 0 || !refused.empty() || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(Millis(std::min(10 * (attempt + 1), 200)));
  }
  ::freeaddrinfo(res);
  DPB_CHECK(refused != "wrong token") << describe() << " turned this rank away: its job token differs from rank 0's "
                                      << "(every rank of a job needs the same DPB_STORE_TOKEN)";
  DPB_CHECK(refused.empty()) << describe() << " answered as no dpbench store does: is MASTER_PORT another service's?";
  DPB_CHECK(fd_ >= 0) << "tcp store: could not connect to " << escape_untrusted(host) << ":" << port_ << " within "
                      << o.timeout.count() << " ms (" << last_error << ")"
                      << (connected_once ? "" : "; is rank 0 running with the same MASTER_ADDR/MASTER_PORT, and "
                                                "listening where this node can reach it (--store-bind)?");
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) ::close(fd_);
}

std::string TcpStore::gone() const {
  // The rank that hosts the store is not gone itself: its server dropped this connection.
  return server_ ? "the store this rank hosts dropped its own connection" : "the store's host (rank 0) is gone";
}

std::string TcpStore::describe() const { return "tcp store " + host_ + ":" + std::to_string(port_); }

std::string TcpStore::request(uint8_t op, const std::string& key, const std::string& value, bool* found_out) {
  std::lock_guard<std::mutex> lock(mu_);
  DPB_CHECK(broken_.empty()) << broken_;
  const std::string req = encode_request(static_cast<Op>(op), key, value);
  if (!write_all(fd_, req.data(), req.size())) {
    broken_ = describe() + ": " + gone() + " (" + std::strerror(errno) +
              " sending a request for '" + escape_untrusted(key) + "')";
    DPB_FAIL() << broken_;
  }
  std::string reply;
  bool ok = true;
  errno = 0;  // what a failed read leaves here says why (0: the peer closed)
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
  if (!ok) {
    const int e = errno;
    const std::string why = e == 0                                ? "the connection closed"
                            : e == EAGAIN || e == EWOULDBLOCK ? "no reply within the timeout"
                                                              : std::string(std::strerror(e));
    broken_ = describe() + ": " + gone() + " (" + why + " waiting for the reply about '" +
              escape_untrusted(key) + "')";
    DPB_FAIL() << broken_;
  }
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
  const std::string reply = request(kAdd, key, std::to_string(delta));
  int64_t v = 0;
  DPB_CHECK(add_decimal(reply, "0", &v)) << describe() << ": the counter '" << escape_untrusted(key)
                                         << "' holds no number ('" << escape_untrusted(reply) << "')";
  return v;
}

bool TcpStore::check(const std::string& key) { return !request(kCheck, key, "").empty(); }

std::string TcpStore::lost() {
  // Never blocks: a request in flight holds mu_ while it reads its reply.
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (lock.owns_lock() && !broken_.empty()) return broken_;
  // Between requests the server sends nothing, so a readable end or a hang-up on this
  // socket is the server's side closed (rank 0 gone). A request in flight may be reading
  // its reply now: its bytes are left alone (poll does not consume them), and a hang-up
  // is reported by that request too.
  pollfd p{fd_, POLLRDHUP, 0};
  if (::poll(&p, 1, 0) != 1 || !(p.revents & (POLLRDHUP | POLLHUP | POLLERR))) return {};
  const std::string why = describe() + ": " + gone() + " (it closed this rank's connection)";
  if (lock.owns_lock() && broken_.empty()) broken_ = why;
  return why;
}

}  // namespace dpb::comm
