// ddp ranks placed on the same hardware (all on cuda:0, more local ranks than GPUs, CPU
// ranks pinned to the same cores): they take turns instead of running side by side.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "diagnostics/dpdoctor/rules/rules.h"

namespace dpb::doctor::check {

namespace {
bool overlap(const RankEvidence& a, const RankEvidence& b) {
  if (a.host != b.host) return false;
  for (const auto& h : a.hardware)
    if (std::find(b.hardware.begin(), b.hardware.end(), h) != b.hardware.end()) return true;
  return false;
}
}  // namespace

std::optional<Finding> ranks_share_device(const Evidence& e) {
  if (e.ranks.size() < 2) return std::nullopt;
  // Without the ranks' hosts (a profiler trace), the same GPU index means the same GPU
  // only if the whole job fits on one node.
  if (!e.hosts_known && e.world > e.visible) return std::nullopt;
  // Each rank that shares hardware, with the ranks it shares it with.
  nlohmann::json shared = nlohmann::json::array();
  std::set<int> crowded;
  size_t most = 1;          // the most ranks on one device
  double crowded_compute = 0;  // the longest compute of a rank that shares
  for (size_t i = 0; i < e.ranks.size(); ++i) {
    std::vector<int> with;
    for (size_t j = 0; j < e.ranks.size(); ++j)
      if (i != j && overlap(e.ranks[i], e.ranks[j])) with.push_back(e.ranks[j].rank);
    if (with.empty()) continue;
    crowded.insert(e.ranks[i].rank);
    most = std::max(most, with.size() + 1);
    crowded_compute = std::max(crowded_compute, e.ranks[i].compute_s);
    shared.push_back({{"rank", e.ranks[i].rank}, {"host", e.ranks[i].host}, {"device", e.ranks[i].device},
                      {"shares_with", with}});
  }
  if (crowded.empty()) return std::nullopt;
  std::set<std::string> devices;
  for (const auto& r : e.ranks) devices.insert(r.host + "/" + r.device);
  Finding f;
  f.severity = Severity::error;
  f.title = fmt::format("{} of {} ranks share their device with another rank (ranks {})", crowded.size(),
                        e.ranks.size(), fmt::join(crowded, ", "));
  nlohmann::json compute = nlohmann::json::array();
  for (const auto& r : e.ranks) compute.push_back({{"rank", r.rank}, {"device", r.device}, {"compute_s", r.compute_s}});
  f.evidence = {{"shared", shared}, {"distinct_devices", devices.size()}, {"ranks", compute}};
  if (!e.hosts_known)
    f.evidence["assumption"] = fmt::format("one node: the {} ranks fit in the {} GPUs each process sees", e.world,
                                           e.visible);
  f.explanation =
      "Ranks on one device run their forward and backward in turn on the same hardware (one GPU, or the same CPU "
      "cores), so adding ranks adds work to that device instead of devices to the job; the usual causes are every "
      "process using cuda:0 (no torch.cuda.set_device(local_rank)) or more processes per node than devices.";
  f.fix = "give each local rank its own device (torch.cuda.set_device(LOCAL_RANK); in dpbench --device-map=spread), "
          "and start at most as many ranks per node as it has devices";
  // k ranks taking turns on one device each get 1/k of it: on a device of its own a rank's
  // compute takes 1/k of the time it measured.
  const double k = static_cast<double>(most);
  if (e.step_s > 0 && crowded_compute > 0)
    f.predicted = scaled_step(e, 1 - std::min(crowded_compute, e.step_s) / e.step_s * (1 - 1 / k),
                              "time sharing: k ranks on one device each had 1/k of it, so on a device of its own a "
                              "rank's compute takes 1/k of what it measured; the rest of the step (communication, "
                              "the host) stays, and devices of their own that are slower than the shared one are not "
                              "known",
                              {{"ranks_per_device", most}, {"compute_s", figure(crowded_compute)}});
  return f;
}

}  // namespace dpb::doctor::check
