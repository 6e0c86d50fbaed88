#pragma once
// The rendezvous store every rank of a group shares (PyTorch's c10d Store): ranks
// publish addresses, the NCCL unique id and their progress here. Every blocking call
// is bounded: get() waits for a key at most `timeout`, then fails naming the key.
//
//   MemoryStore  ranks as threads of one process (tests)
//   FileStore    a directory shared by the ranks of one node (the local launcher's)
//   TcpStore     MASTER_ADDR:MASTER_PORT, for several nodes (tcp_store.h)
//   PrefixStore  a namespace inside another store (one per group / attempt)
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace dpb::comm {

using Millis = std::chrono::milliseconds;

class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  // The value of `key`, waiting until some rank sets it; dpb::Error after `timeout`.
  virtual std::string get(const std::string& key, Millis timeout) = 0;
  // Adds `delta` to the integer at `key` (0 when absent) and returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Whether `key` is set now (does not wait).
  virtual bool check(const std::string& key) = 0;
  // The value when set now, else empty without waiting.
  std::string try_get(const std::string& key);
  // Waits until every key is set (bounded by `timeout` in all).
  void wait(const std::vector<std::string>& keys, Millis timeout);
  // What the store is, for messages ("file store /run/x", "tcp store host:port").
  virtual std::string describe() const = 0;
  // Why the store can no longer be reached, found without waiting (its host closed the
  // connection); empty while it can. A rank waiting on something else (Gloo's connect,
  // NCCL's bootstrap) asks this to end the wait at once when the store's host is gone.
  virtual std::string lost() { return {}; }
};

class MemoryStore : public Store {
 public:
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, Millis timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::string& key) override;
  std::string describe() const override { return "memory store"; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> kv_;
};

class FileStore : public Store {
 public:
  // Creates the directory when missing.
  explicit FileStore(std::string dir);
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, Millis timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::string& key) override;
  std::string describe() const override { return "file store " + dir_; }

 private:
  std::string path(const std::string& key) const;
  std::string dir_;
};

class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base) : prefix_(std::move(prefix)), base_(std::move(base)) {}
  void set(const std::string& key, const std::string& value) override { base_->set(prefix_ + key, value); }
  std::string get(const std::string& key, Millis timeout) override { return base_->get(prefix_ + key, timeout); }
  int64_t add(const std::string& key, int64_t delta) override { return base_->add(prefix_ + key, delta); }
  bool check(const std::string& key) override { return base_->check(prefix_ + key); }
  std::string describe() const override { return base_->describe(); }
  std::string lost() override { return base_->lost(); }

 private:
  std::string prefix_;
  std::shared_ptr<Store> base_;
};

}  // namespace dpb::comm
