#include "engine/trace/activity.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_set>

#include "engine/core/error.h"

namespace dpb::trace {

ClockConversion ClockConversion::fit(const std::vector<ClockPair>& pairs) {
  DPB_CHECK(!pairs.empty()) << "clock conversion: no pair of host and GPU clock reads";
  ClockConversion c;
  const ClockPair& a = pairs.front();
  const ClockPair& b = pairs.back();
  c.device0_ = a.device_ns;
  c.host0_ = a.host_ns;
  if (pairs.size() > 1) {
    DPB_CHECK(b.device_ns > a.device_ns && b.host_ns > a.host_ns)
        << "clock conversion: the last pair (host " << b.host_ns << ", GPU " << b.device_ns
        << ") is not after the first (host " << a.host_ns << ", GPU " << a.device_ns << ")";
    c.rate_ = static_cast<double>(b.host_ns - a.host_ns) / static_cast<double>(b.device_ns - a.device_ns);
  }
  for (const ClockPair& p : pairs) {
    const int64_t off = std::llabs(c.to_host(p.device_ns) - p.host_ns) + p.uncertainty_ns;
    c.residual_ns_ = std::max(c.residual_ns_, off);
  }
  return c;
}

int64_t ClockConversion::to_host(int64_t device_ns) const {
  return host0_ + static_cast<int64_t>(std::llround(static_cast<double>(device_ns - device0_) * rate_));
}

const char* lane_name(Lane l) {
  switch (l) {
    case Lane::compute:
      return "compute";
    case Lane::communication:
      return "communication";
    case Lane::copy:
      return "copy";
  }
  return "compute";
}

const StreamRole* StreamMap::find(int device, uint32_t stream) const {
  const auto it = roles_.find({device, stream});
  if (it != roles_.end()) return &it->second;
  const auto d = defaults_.find(device);
  return d == defaults_.end() ? nullptr : &d->second;
}

bool ActivityLog::add(const ActivityRecord& r, std::string_view name) {
  // A record costs its entry; a name it brings first, its bytes and the table's entries.
  const size_t entry = sizeof(records_.front()), name_cost = name.size() + 2 * sizeof(std::string);
  if (bytes_ + entry + name_cost > max_bytes_) {
    ++dropped_;
    return false;
  }
  const size_t names_before = names_.size();
  const uint32_t id = names_.intern(name);
  bytes_ += entry + (names_.size() > names_before ? name_cost : 0);
  records_.emplace_back(r, id);
  return true;
}

void ActivityLog::clear() {
  records_.clear();
  records_.shrink_to_fit();
  bytes_ = 0;
}

RankTimeline ActivityLog::to_timeline(const ClockConversion& clock, const StreamMap& streams, Span64 window) const {
  RankTimeline t;
  t.source = "cupti";
  const auto [lo, hi] = window;
  std::unordered_set<int64_t> launched;
  for (const auto& [r, name_id] : records_) {
    if (r.kind != ActivityKind::kernel && r.kind != ActivityKind::memcpy && r.kind != ActivityKind::memset) continue;
    const int64_t begin = clock.to_host(r.start), end = clock.to_host(r.end);
    if (end <= lo || begin >= hi) continue;
    const std::string& name = names_.name(name_id);
    const StreamRole* role = streams.find(r.device, r.stream);
    DeviceWork w;
    w.device = role ? role->logical_device : r.device;
    w.stream = r.stream;
    if (role && role->lane == Lane::communication)
      w.work = Work::communication;
    else
      w.work = r.kind == ActivityKind::kernel ? classify_kernel(name) : Work::memory;
    w.begin_ns = begin;
    w.end_ns = end;
    w.correlation = r.correlation;
    w.name = t.names.intern(name);
    w.copy = r.kind == ActivityKind::memset ? CopyKind::memset : r.copy;
    w.bytes = r.bytes;
    w.pinned = r.pinned;
    t.work.push_back(w);
    if (r.correlation >= 0) launched.insert(r.correlation);
  }
  for (const auto& [r, name_id] : records_) {
    if (r.kind != ActivityKind::runtime && r.kind != ActivityKind::sync) continue;
    const int64_t begin = clock.to_host(r.start), end = clock.to_host(r.end);
    const bool in_window = end > lo && begin < hi;
    if (!in_window && !launched.count(r.correlation)) continue;
    const std::string& name = names_.name(name_id);
    HostCall c;
    c.correlation = r.correlation;
    c.begin_ns = begin;
    c.end_ns = end;
    c.kind = r.kind == ActivityKind::sync ? CallKind::sync : classify_runtime_call(name);
    c.name = t.names.intern(name);
    c.thread = r.thread;
    t.calls.push_back(c);
  }
  return t;
}

}  // namespace dpb::trace
