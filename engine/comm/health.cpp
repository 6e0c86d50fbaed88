#include "engine/comm/health.h"

#include <sstream>
#include <vector>

#include "engine/core/log.h"

namespace dpb::comm {

namespace {

struct Record {
  bool present = false;
  int64_t beats = 0, seq = -1;
  std::string op;
};

Record parse(const std::string& s) {
  Record r;
  if (s.empty()) return r;
  std::istringstream in(s);
  in >> r.beats >> r.seq >> r.op;
  r.present = !in.fail();
  return r;
}

std::string key(int rank) { return "health/" + std::to_string(rank); }

std::string join(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ", ") + std::to_string(x);
  return s;
}

}  // namespace

GroupHealth::GroupHealth(std::shared_ptr<Store> store, int rank, int size, Millis interval)
    : store_(std::move(store)), rank_(rank), size_(size), interval_(interval) {
  thread_ = std::thread([this] { publish_loop(); });
}

GroupHealth::~GroupHealth() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void GroupHealth::entering(int64_t seq, const char* op) {
  op_.store(op);
  seq_.store(seq);
}

void GroupHealth::publish_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    lock.unlock();
    try {
      store_->set(key(rank_), std::to_string(++beats_) + " " + std::to_string(seq_.load()) + " " + op_.load());
      store_failing_ = false;
    } catch (const std::exception& e) {
      // Said once: training goes on without the store, but a failing collective can
      // then no longer name the missing rank.
      if (!store_failing_.exchange(true) && !store_warned_) {
        store_warned_ = true;
        log::warn("rank {}: the job's store ({}) stopped answering ({}); training goes on, but a failing collective "
                  "will not be able to name missing ranks", rank_, store_->describe(), e.what());
      }
    }
    lock.lock();
    cv_.wait_for(lock, interval_, [&] { return stop_; });
  }
}

std::string GroupHealth::diagnose(int64_t seq, const std::string& op) {
  std::string store_error;
  auto read_all = [&] {
    std::vector<Record> v(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      try {
        v[static_cast<size_t>(r)] = parse(store_->try_get(key(r)));
      } catch (const std::exception& e) {
        store_error = e.what();
      }
    }
    return v;
  };
  const auto first = read_all();
  std::this_thread::sleep_for(interval_ * 4);
  const auto second = read_all();
  if (!store_error.empty() || store_failing_)
    return "the job's store (" + store_->describe() + ") does not answer" +
           (store_error.empty() ? std::string() : " (" + store_error + ")") +
           ", so the rank(s) missing from " + op + " #" + std::to_string(seq) + " cannot be named";
  std::vector<int> gone, behind;
  std::ostringstream detail;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    const Record& a = first[static_cast<size_t>(r)];
    const Record& b = second[static_cast<size_t>(r)];
    if (!b.present || b.beats == a.beats) {
      gone.push_back(r);
      detail << "; rank " << r << ": no heartbeat for " << (interval_ * 4).count() << " ms, last reported "
             << (!b.present   ? std::string("nothing")
                 : b.seq < 0  ? std::string("before its first collective")
                              : "at " + b.op + " #" + std::to_string(b.seq))
             << " (its process died or hangs)";
    } else if (b.seq < seq) {
      behind.push_back(r);
      detail << "; rank " << r << ": alive, last entered " << b.op << " #" << b.seq;
    }
  }
  std::ostringstream msg;
  if (gone.empty() && behind.empty()) {
    // Every peer is alive and there: what failed is the transfer itself, a link that broke
    // or is too slow for the timeout (a brown-out), between this rank and them.
    std::vector<int> peers;
    for (int r = 0; r < size_; ++r)
      if (r != rank_) peers.push_back(r);
    msg << "every rank reached " << op << " #" << seq << " and is alive (the transport failed under it: the link "
        << "to rank(s) " << join(peers) << " broke, or is too slow for the timeout)";
  } else {
    msg << "rank(s) " << join(gone.empty() ? behind : gone) << " did not arrive at " << op << " #" << seq;
    if (!gone.empty() && !behind.empty()) msg << "; rank(s) " << join(behind) << " are behind";
  }
  return msg.str() + detail.str();
}

}  // namespace dpb::comm
