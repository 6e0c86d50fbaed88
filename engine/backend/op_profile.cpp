#include "engine/backend/op_profile.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>

namespace dpb::ops {

namespace {
std::atomic<bool> g_on{false};
std::mutex g_mu;
std::map<std::string, OpTime>& totals() {
  static auto* t = new std::map<std::string, OpTime>;
  return *t;
}
}  // namespace

void set_op_profiling(bool on) { g_on.store(on); }
bool op_profiling() { return g_on.load(std::memory_order_relaxed); }

void reset_op_profile() {
  std::lock_guard<std::mutex> lock(g_mu);
  totals().clear();
}

std::vector<OpTime> op_profile() {
  std::lock_guard<std::mutex> lock(g_mu);
  std::vector<OpTime> v;
  for (const auto& [name, t] : totals()) v.push_back(t);
  std::sort(v.begin(), v.end(), [](const OpTime& a, const OpTime& b) { return a.seconds > b.seconds; });
  return v;
}

void record_op_time(const char* op, double seconds) {
  std::lock_guard<std::mutex> lock(g_mu);
  OpTime& t = totals()[op];
  t.op = op;
  ++t.calls;
  t.seconds += seconds;
}

}  // namespace dpb::ops
