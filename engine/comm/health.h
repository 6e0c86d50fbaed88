#pragma once
// Every rank's progress, for naming who is missing when a collective fails. A background
// thread publishes this rank's record to the store every `interval`:
//   "<heartbeat count> <sequence number> <op>"
// where the sequence number is that of the collective the rank has entered last. When
// a collective fails or times out, diagnose() reads every rank's record twice, a few
// intervals apart: a rank whose heartbeat did not advance is gone (dead or hung); a
// live rank with a lower sequence number has not reached the collective yet. Clocks
// are never compared, so it holds across nodes.
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "engine/comm/store.h"

namespace dpb::comm {

class GroupHealth {
 public:
  GroupHealth(std::shared_ptr<Store> store, int rank, int size, Millis interval = Millis(200));
  ~GroupHealth();
  GroupHealth(const GroupHealth&) = delete;
  GroupHealth& operator=(const GroupHealth&) = delete;

  // This rank enters collective `seq` (cheap: the thread publishes it).
  void entering(int64_t seq, const char* op);
  // Which ranks did not arrive at collective `seq` and why, for an error message;
  // waits a few intervals to tell dead ranks from slow ones.
  std::string diagnose(int64_t seq, const std::string& op);

 private:
  void publish_loop();
  std::shared_ptr<Store> store_;
  int rank_, size_;
  Millis interval_;
  std::atomic<int64_t> seq_{-1};
  std::atomic<bool> store_failing_{false};  // the last publish failed
  bool store_warned_ = false;               // publish thread only
  std::atomic<const char*> op_{"start"};
  int64_t beats_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace dpb::comm
