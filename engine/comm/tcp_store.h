#pragma once
// A small TCP key-value store at MASTER_ADDR:MASTER_PORT, for groups that span nodes
// (Gloo ships no TCP store; this one is ours and deliberately tiny). The rank that
// hosts it (global rank 0, as torchrun) runs the server in a thread; every rank,
// the host included, talks to it as a client. Requests are length-prefixed
// (store_wire.h), with op SET, GET (does not wait: the client polls, so a blocking get
// never holds the server), ADD (value = decimal delta; reply the new value) and CHECK.
// Connecting and getting are bounded by the store's timeout.
//
// Only its own job gets in: a client's first request must carry the job's token
// (DPB_STORE_TOKEN; the local launcher makes one), and the server answers it: admitted,
// or turned away for a wrong token (the only case a client reports as one). Where it
// listens is the caller's choice (rendezvous.h: the wildcard address for a job that spans
// nodes, MASTER_ADDR's address otherwise, or --store-bind); it logs the address.
// The server never blocks on a client: sockets are non-blocking, each connection's
// unserved bytes are bounded (one request; one hello's worth before it has said the
// token, so strangers cannot make an admitted rank pay for their memory), and a
// client with a wrong token, garbage, an oversized length or a request dribbled over more
// than 30 s is dropped. A connection that has not said its token within 10 s of being
// accepted is closed, and at most 64 such connections are held (a new one evicts the
// oldest), so sockets that connect and stay silent cannot fill the store while a rank
// waits to get in; a rank turned away without an answer tries again until its timeout.
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "engine/comm/store.h"

namespace dpb::comm {

class TcpStoreServer {
 public:
  // Listens on `bind_host`'s address ("0.0.0.0" or "::": every address of this node),
  // `port` (0: any free port); admits clients that say `token`.
  // `hello_limit`: how long a connection may stay without saying the token.
  TcpStoreServer(const std::string& bind_host, int port, std::string token,
                 std::chrono::milliseconds hello_limit = std::chrono::seconds(10));
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;
  int port() const { return port_; }
  const std::string& address() const { return address_; }  // numeric, as bound

 private:
  struct Conn;
  void serve();
  bool handle(Conn& c);
  std::string token_;
  std::chrono::milliseconds hello_limit_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::string address_;
  int wake_[2] = {-1, -1};  // a pipe that ends serve()
  std::map<std::string, std::string> kv_;
  std::thread thread_;
};

struct TcpStoreOptions {
  Millis timeout{300000};
  std::string token;
  bool host_server = false;  // start the server first (rank 0)
  std::string bind;          // where the server listens: an address or name; empty: `host`
};

class TcpStore : public Store {
 public:
  // Connects to host:port (retrying until `timeout` while the server starts or while it
  // closes the connection unanswered) and proves it is of the job with the token; with
  // `host_server`, first starts the server (on `bind`, else on host's address).
  TcpStore(const std::string& host, int port, const TcpStoreOptions& options);
  TcpStore(const std::string& host, int port, bool host_server, Millis timeout, const std::string& token)
      : TcpStore(host, port, TcpStoreOptions{timeout, token, host_server, {}}) {}
  ~TcpStore() override;
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, Millis timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::string& key) override;
  std::string describe() const override;
  std::string lost() override;
  int port() const { return port_; }

 private:
  std::string request(uint8_t op, const std::string& key, const std::string& value, bool* found = nullptr);
  std::string gone() const;  // why the connection ended, from where this rank stands
  std::string host_;
  int port_;
  std::unique_ptr<TcpStoreServer> server_;
  int fd_ = -1;
  std::mutex mu_;
  // Why the connection failed, once it has: a request that got no whole reply leaves
  // the stream out of step, and every later request fails at once with the same reason
  // instead of waiting out the timeout again (a partitioned store costs one timeout).
  std::string broken_;
};

}  // namespace dpb::comm
