#pragma once
// A small TCP key-value store at MASTER_ADDR:MASTER_PORT, for groups that span nodes
// (Gloo ships no TCP store; this one is ours and deliberately tiny). The rank that
// hosts it (global rank 0, as torchrun) runs the server in a thread; every rank,
// the host included, talks to it as a client. Requests are length-prefixed:
//   [op u8][key length u32][key][value length u32][value]
// with op SET, GET (does not wait: the client polls, so a blocking get never holds the
// server), ADD (value = decimal delta; reply the new value) and CHECK. Connecting and
// getting are bounded by the store's timeout.
#include <atomic>
#include <memory>
#include <thread>

#include "engine/comm/store.h"

namespace dpb::comm {

class TcpStoreServer {
 public:
  // Listens on `port` (0: any free port) on all interfaces.
  explicit TcpStoreServer(int port);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;
  int port() const { return port_; }

 private:
  void serve();
  int listen_fd_ = -1;
  int port_ = 0;
  int wake_[2] = {-1, -1};  // a pipe that ends serve()
  std::map<std::string, std::string> kv_;
  std::thread thread_;
};

class TcpStore : public Store {
 public:
  // Connects to host:port (retrying until `timeout` while the server starts); with
  // `host_server`, first starts the server on `port`.
  TcpStore(const std::string& host, int port, bool host_server, Millis timeout);
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
