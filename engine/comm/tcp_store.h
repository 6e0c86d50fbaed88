#pragma once
// A small TCP key-value store at MASTER_ADDR:MASTER_PORT, for groups that span nodes
// (Gloo ships no TCP store; this one is ours and deliberately tiny). The rank that
// hosts it (global rank 0, as torchrun) runs the server in a thread; every rank,
// the host included, talks to it as a client. Requests are length-prefixed
// (store_wire.h), with op SET, GET (does not wait: the client polls, so a blocking get
// never holds the server), ADD (value = decimal delta; reply the new value) and CHECK.
// Connecting and getting are bounded by the store's timeout.
//
// Only its own job gets in: the server listens on MASTER_ADDR's address only (loopback
// for 127.0.0.1 or localhost), and a client's first request must carry the job's token
// (DPB_STORE_TOKEN; the local launcher makes one). The server never blocks on a client:
// sockets are non-blocking, each connection's unserved bytes are bounded (one request)
// as are all connections' together, and a client with a wrong token, garbage, an
// oversized length or a request dribbled over more than 30 s is dropped.
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "engine/comm/store.h"

namespace dpb::comm {

class TcpStoreServer {
 public:
  // Listens on `bind_host`'s address, `port` (0: any free port); admits clients that
  // say `token`.
  TcpStoreServer(const std::string& bind_host, int port, std::string token);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;
  int port() const { return port_; }

 private:
  struct Conn;
  void serve();
  bool handle(Conn& c);
  std::string token_;
  int listen_fd_ = -1;
  int port_ = 0;
  int wake_[2] = {-1, -1};  // a pipe that ends serve()
  std::map<std::string, std::string> kv_;
  std::thread thread_;
};

class TcpStore : public Store {
 public:
  // Connects to host:port (retrying until `timeout` while the server starts) and proves
  // it is of the job with `token`; with `host_server`, first starts the server there.
  TcpStore(const std::string& host, int port, bool host_server, Millis timeout, const std::string& token);
  ~TcpStore() override;
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, Millis timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::string& key) override;
  std::string describe() const override;
  int port() const { return port_; }

 private:
  std::string request(uint8_t op, const std::string& key, const std::string& value, bool* found = nullptr);
  std::string host_;
  int port_;
  std::unique_ptr<TcpStoreServer> server_;
  int fd_ = -1;
  std::mutex mu_;
};

}  // namespace dpb::comm
