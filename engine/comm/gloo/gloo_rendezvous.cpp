#include "engine/comm/gloo/gloo_rendezvous.h"

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/core/error.h"

namespace dpb::comm {

namespace {

// Our store as Gloo's rendezvous store, with our timeout on every wait.
class GlooStore : public gloo::rendezvous::Store {
 public:
  GlooStore(std::shared_ptr<comm::Store> s, Millis timeout) : s_(std::move(s)), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    s_->set(key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    try {
      const std::string v = s_->get(key, timeout_);
      return {v.begin(), v.end()};
    } catch (const Error& e) {
      name_missing({key}, e);
    }
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    try {
      s_->wait(keys, timeout);
    } catch (const Error& e) {
      name_missing(keys, e);
    }
  }

 private:
  // Gloo's full mesh keys each rank's address by its number: a wait that timed out says
  // which ranks never joined, where the store can still tell.
  [[noreturn]] void name_missing(const std::vector<std::string>& keys, const Error& e) {
    std::string missing;
    try {
      for (const auto& k : keys)
        if (!k.empty() && k.find_first_not_of("0123456789") == std::string::npos && !s_->check(k))
          missing += (missing.empty() ? "" : ", ") + k;
    } catch (const Error&) {
    }
    if (missing.empty()) throw e;
    DPB_FAIL() << "rank(s) " << missing << " never joined the group (not started, dead, or turned away by the "
               << "store): " << e.what();
  }
  std::shared_ptr<comm::Store> s_;
  Millis timeout_;
};

}  // namespace

void connect_full_mesh(const std::shared_ptr<gloo::rendezvous::Context>& ctx,
                       std::shared_ptr<gloo::transport::Device> device, const std::shared_ptr<Store>& store,
                       Millis timeout, int rank, int size, const std::string& listening) {
  struct Attempt {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::exception_ptr error;
  };
  auto attempt = std::make_shared<Attempt>();
  auto gs = std::make_shared<GlooStore>(std::make_shared<PrefixStore>("gloo/", store), timeout);
  std::thread([ctx, device, gs, attempt]() mutable {
    std::exception_ptr error;
    try {
      ctx->connectFullMesh(*gs, device);
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(attempt->mu);
    attempt->done = true;
    attempt->error = error;
    attempt->cv.notify_all();
  }).detach();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock<std::mutex> lock(attempt->mu);
  for (;;) {
    if (attempt->cv.wait_for(lock, Millis(100), [&] { return attempt->done; })) {
      if (attempt->error) std::rethrow_exception(attempt->error);
      return;
    }
    if (const std::string lost = store->lost(); !lost.empty())
      DPB_FAIL() << "gloo: rank " << rank << " of " << size << " was connecting to the others when the store went "
                 << "away: " << lost;
    if (std::chrono::steady_clock::now() >= deadline) {
      std::string absent;
      try {
        for (int r = 0; r < size; ++r)
          if (r != rank && !store->check("gloo/" + std::to_string(r))) absent += (absent.empty() ? "" : ", ") + std::to_string(r);
      } catch (const Error&) {
      }
      std::string others;
      for (int r = 0; r < size; ++r)
        if (r != rank) others += (others.empty() ? "" : ", ") + std::to_string(r);
      const std::string which = size == 2 ? "rank " + others : "one of ranks " + others;
      DPB_FAIL() << "gloo: rank " << rank << " of " << size << " (listening at " << listening
                 << ") did not connect to every other rank within " << timeout.count() << " ms through the "
                 << store->describe() << ": "
                 << (absent.empty() ? "every rank published its address, so " + which +
                                          " died while connecting or cannot be reached where it said "
                                          "(GLOO_SOCKET_IFNAME picks the interface)"
                                    : "rank(s) " + absent + " never joined the group (no address published: not "
                                      "started, dead, or turned away by the store)");
    }
  }
}


}  // namespace dpb::comm
