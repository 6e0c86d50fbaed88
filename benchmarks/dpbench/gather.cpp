#include "benchmarks/dpbench/gather.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "benchmarks/dpbench/setup.h"
#include "engine/backend/device_info.h"
#include "engine/core/error.h"

namespace dpb::bench {

std::vector<std::string> gather_strings(comm::ProcessGroup& pg, const std::string& mine, Device device) {
  const int world = pg.size();
  // Lengths first (exact in f32 up to 2^24 bytes per rank), then the bytes, one per f32.
  DPB_CHECK(mine.size() < (1u << 24)) << "gather_strings: " << mine.size() << " bytes is more than this gathers";
  Tensor len = Tensor::from_vector({1}, {static_cast<float>(mine.size())}, device);
  Tensor lens = Tensor::empty({world}, device);
  pg.allgather(lens, len)->wait();
  const auto l = lens.to_vector();
  int64_t longest = 1;
  for (float v : l) longest = std::max<int64_t>(longest, static_cast<int64_t>(v));
  std::vector<float> bytes(static_cast<size_t>(longest), 0.0f);
  for (size_t i = 0; i < mine.size(); ++i) bytes[i] = static_cast<float>(static_cast<unsigned char>(mine[i]));
  Tensor local = Tensor::from_vector({longest}, bytes, device), all = Tensor::empty({longest * world}, device);
  pg.allgather(all, local)->wait();
  const auto a = all.to_vector();
  std::vector<std::string> out(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    auto& s = out[static_cast<size_t>(r)];
    const auto n = static_cast<int64_t>(l[static_cast<size_t>(r)]);
    s.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) s[static_cast<size_t>(i)] = static_cast<char>(static_cast<int>(a[static_cast<size_t>(r * longest + i)]));
  }
  return out;
}

std::vector<RankMetrics> gather_metrics(comm::ProcessGroup& pg, const RankMetrics& mine, Device device) {
  const std::vector<float> v{static_cast<float>(mine.step_median_s), static_cast<float>(mine.step_p90_s),
                             static_cast<float>(mine.data_wait_share), static_cast<float>(mine.busy_fraction),
                             static_cast<float>(mine.comm_s),         static_cast<float>(mine.overlap_ratio),
                             static_cast<float>(mine.exposed_comm_s), static_cast<float>(mine.exposed_share),
                             static_cast<float>(mine.samples),        static_cast<float>(mine.steps),
                             static_cast<float>(mine.step_no_comm_s), static_cast<float>(mine.optimizer_s),
                             static_cast<float>(mine.compute_s),      static_cast<float>(mine.window_s),
                             static_cast<float>(mine.idle_share),     static_cast<float>(mine.compute_share),
                             static_cast<float>(mine.comm_share),     static_cast<float>(mine.memory_share),
                             static_cast<float>(mine.overlap)};
  const auto k = static_cast<int64_t>(v.size());
  Tensor local = Tensor::from_vector({k}, v, device), all = Tensor::empty({k * pg.size()}, device);
  pg.allgather(all, local)->wait();
  const auto a = all.to_vector();
  std::vector<RankMetrics> out(static_cast<size_t>(pg.size()));
  for (int r = 0; r < pg.size(); ++r) {
    const float* f = a.data() + r * k;
    out[static_cast<size_t>(r)] = RankMetrics{f[0],  f[1],  f[2],  f[3],  f[4],  f[5],  f[6],  f[7],  f[8],  f[9],
                                              f[10], f[11], f[12], f[13], f[14], f[15], f[16], f[17], f[18]};
  }
  return out;
}

RankPlacement describe_placement(Device device) {
  RankPlacement p;
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) == 0) p.host = host;
  if (device.is_cuda()) {
    p.device = device.str();
    for (const auto& g : cuda_info().gpus)
      if (g.index == device.index) p.hardware.push_back("gpu " + (g.pci_bus_id.empty() ? device.str() : g.pci_bus_id));
    if (p.hardware.empty()) p.hardware.push_back("gpu " + device.str());
    return p;
  }
  const std::vector<int> cores = allowed_cores();
  p.device = fmt::format("{} (cores {})", device.str(), fmt::join(cores, ","));
  for (int c : cores) p.hardware.push_back(fmt::format("core {}", c));
  return p;
}

std::vector<RankRecord> gather_rank_records(comm::ProcessGroup& pg, const std::vector<StepRecord>& measured,
                                            Device device) {
  const RankPlacement p = describe_placement(device);
  nlohmann::json mine = {{"host", p.host}, {"device", p.device}, {"hardware", p.hardware}};
  mine["hashes"] = nlohmann::json::array();
  for (const auto& r : measured) mine["hashes"].push_back(r.data_hash);
  mine["compute"] = compute_per_step(measured, device.index);
  mine["collectives"] = nlohmann::json::array();
  for (const auto& r : measured) {
    nlohmann::json step = nlohmann::json::array();
    for (const auto& b : r.buckets)
      step.push_back({b.launch_ns, b.comm_start_ns, b.comm_end_ns, b.done_ns, b.wait_ns});
    mine["collectives"].push_back(step);
  }
  std::vector<RankRecord> out;
  for (const auto& text : gather_strings(pg, mine.dump(), device)) {
    const auto j = nlohmann::json::parse(text);
    RankRecord r{{j["host"], j["device"], j["hardware"]},
                 j["hashes"].get<std::vector<uint64_t>>(),
                 j["compute"].get<std::vector<double>>(),
                 {}};
    for (const auto& step : j["collectives"]) {
      r.collectives.emplace_back();
      for (const auto& b : step) r.collectives.back().push_back({b.at(0), b.at(1), b.at(2), b.at(3), b.at(4)});
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace dpb::bench
