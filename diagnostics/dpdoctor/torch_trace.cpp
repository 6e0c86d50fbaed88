#include "diagnostics/dpdoctor/torch_trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <map>

#include "engine/core/error.h"
#include "engine/core/file_io.h"
#include "engine/core/stats.h"
#include "engine/trace/timeline.h"

namespace dpb::doctor {

namespace {

using Iv = std::pair<int64_t, int64_t>;  // [begin, end) in ns

struct GpuEvent {
  int device = 0;
  Iv span;
  bool comm = false;  // an NCCL kernel
};

// What one trace (one process) recorded.
struct RankTrace {
  std::string path;
  int rank = -1, world = 1, visible = 0;
  std::vector<GpuEvent> gpu;
  std::vector<Iv> steps;       // ProfilerStep#N
  std::vector<Iv> data_waits;  // DataLoader __next__
  int64_t dp_forwards = 0;     // DataParallel.forward
};

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

bool is_gpu_cat(const std::string& cat) { return cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset"; }

bool is_nccl(std::string name) {
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  return name.find("nccl") != std::string::npos;
}

bool is_data_wait(const std::string& name) {
  return starts_with(name, "enumerate(DataLoader)#") && name.find("__next__") != std::string::npos;
}

std::string text_of(const nlohmann::json& e, const char* key) {
  auto it = e.find(key);
  return it != e.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The events the rules read; everything else is dropped while parsing.
bool wanted(const nlohmann::json& e) {
  const std::string cat = text_of(e, "cat"), name = text_of(e, "name");
  return is_gpu_cat(cat) || starts_with(name, "ProfilerStep#") || is_data_wait(name) || name == "DataParallel.forward";
}

// Chrome trace times are microseconds (floats).
int64_t ns(const nlohmann::json& v) { return static_cast<int64_t>(std::llround(v.get<double>() * 1e3)); }

RankTrace read_trace(const std::string& path) {
  const std::vector<uint8_t> bytes = read_maybe_gzip(path, "trace");
  nlohmann::json doc;
  try {
    // An event is an object with "ph"; objects without one (deviceProperties entries,
    // args) are kept.
    doc = nlohmann::json::parse(
        bytes.begin(), bytes.end(), [](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
          if (event != nlohmann::json::parse_event_t::object_end || !parsed.is_object()) return true;
          return !parsed.contains("ph") || wanted(parsed);
        });
  } catch (const nlohmann::json::exception& e) {
    DPB_FAIL() << "trace '" << path << "' is not JSON: " << e.what();
  }
  // Chrome's trace formats: an object with traceEvents (Kineto's), or the bare array of
  // events (PyTorch built without Kineto).
  if (doc.is_array()) doc = nlohmann::json{{"traceEvents", std::move(doc)}};
  DPB_CHECK(doc.is_object() && doc.contains("traceEvents") && doc["traceEvents"].is_array())
      << "'" << path << "' is not a PyTorch profiler trace (no traceEvents; write one with torch.profiler's "
      << "export_chrome_trace or tensorboard_trace_handler)";
  RankTrace t;
  t.path = path;
  if (doc.contains("distributedInfo") && doc["distributedInfo"].is_object()) {
    const auto& d = doc["distributedInfo"];
    if (d.contains("rank") && d["rank"].is_number_integer()) t.rank = d["rank"].get<int>();
    if (d.contains("world_size") && d["world_size"].is_number_integer()) t.world = std::max(1, d["world_size"].get<int>());
  }
  if (doc.contains("deviceProperties") && doc["deviceProperties"].is_array())
    t.visible = static_cast<int>(doc["deviceProperties"].size());
  for (const auto& e : doc["traceEvents"]) {
    if (!e.is_object() || text_of(e, "ph") != "X" || !e.contains("ts") || !e["ts"].is_number() ||
        !e.contains("dur") || !e["dur"].is_number())
      continue;
    const Iv span{ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])};
    const std::string cat = text_of(e, "cat"), name = text_of(e, "name");
    if (is_gpu_cat(cat)) {
      int device = -1;
      if (e.contains("args") && e["args"].contains("device") && e["args"]["device"].is_number_integer())
        device = e["args"]["device"].get<int>();
      else if (e.contains("pid") && e["pid"].is_number_integer())
        device = e["pid"].get<int>();
      if (device >= 0) t.gpu.push_back({device, span, cat == "kernel" && is_nccl(name)});
    } else if (starts_with(name, "ProfilerStep#")) {
      t.steps.push_back(span);
    } else if (is_data_wait(name)) {
      t.data_waits.push_back(span);
    } else if (name == "DataParallel.forward") {
      ++t.dp_forwards;
    }
  }
  std::sort(t.steps.begin(), t.steps.end());
  DPB_CHECK(!t.gpu.empty() || !t.steps.empty())
      << "trace '" << path << "' has neither GPU activity nor profiler steps (profile with "
      << "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] and call prof.step() every iteration)";
  return t;
}

std::vector<std::string> expand(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const auto& p : paths) {
    if (!std::filesystem::is_directory(p)) {
      files.push_back(p);
      continue;
    }
    std::vector<std::string> found;
    for (const auto& entry : std::filesystem::directory_iterator(p)) {
      const std::string name = entry.path().filename().string();
      const bool json = name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0;
      const bool gz = name.size() > 8 && name.compare(name.size() - 8, 8, ".json.gz") == 0;
      if (entry.is_regular_file() && (json || gz)) found.push_back(entry.path().string());
    }
    DPB_CHECK(!found.empty()) << "no trace (*.json, *.json.gz) in directory '" << p << "'";
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

int64_t length(std::vector<Iv> iv, Iv window) { return trace::union_ns(std::move(iv), window.first, window.second); }

std::vector<Iv> joined(std::vector<Iv> a, const std::vector<Iv>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// One trace's measurements over its steps.
struct RankMeasure {
  Iv window{0, 0};
  std::vector<Iv> steps;
  double step_s = 0, step_total_s = 0;  // without the data waits: median, and the sum
  std::map<int, std::vector<Iv>> by_device;  // every GPU event, per device
  std::map<int, double> busy;                // share of the window
  double compute_s = 0, comm_s = 0;          // per step, medians
  double overlap = -1, exposed_s = 0, exposed_share = 0;
  double data_wait_share = 0;
  int main_device = 0;  // the GPU it ran most on
};

RankMeasure measure(const RankTrace& t) {
  RankMeasure m;
  if (!t.steps.empty()) {
    m.steps = t.steps;
  } else {
    Iv all{INT64_MAX, INT64_MIN};
    for (const auto& g : t.gpu) all = {std::min(all.first, g.span.first), std::max(all.second, g.span.second)};
    m.steps = {all};
  }
  m.window = {m.steps.front().first, m.steps.back().second};
  const double window_s = static_cast<double>(m.window.second - m.window.first) * 1e-9;
  // As dpbench measures: a step is its work without the wait for its batch (which a
  // ProfilerStep includes), and the data-wait share is wait / (wait + step).
  std::vector<double> lengths;
  double waited_s = 0;
  for (const auto& s : m.steps) {
    const double wait = static_cast<double>(length(t.data_waits, s)) * 1e-9;
    lengths.push_back(static_cast<double>(s.second - s.first) * 1e-9 - wait);
    waited_s += wait;
  }
  m.step_s = summarize(lengths).median;
  for (double l : lengths) m.step_total_s += l;
  m.data_wait_share = waited_s + m.step_total_s > 0 ? waited_s / (waited_s + m.step_total_s) : 0;

  std::vector<Iv> compute, comm;
  for (const auto& g : t.gpu) {
    m.by_device[g.device].push_back(g.span);
    (g.comm ? comm : compute).push_back(g.span);
  }
  double most = -1;
  for (const auto& [d, iv] : m.by_device) {
    m.busy[d] = window_s > 0 ? static_cast<double>(length(iv, m.window)) * 1e-9 / window_s : 0;
    if (m.busy[d] > most) {
      most = m.busy[d];
      m.main_device = d;
    }
  }
  std::vector<double> compute_per_step, comm_per_step;
  for (const auto& s : m.steps) {
    compute_per_step.push_back(static_cast<double>(length(compute, s)) * 1e-9);
    comm_per_step.push_back(static_cast<double>(length(comm, s)) * 1e-9);
  }
  m.compute_s = summarize(compute_per_step).median;
  m.comm_s = summarize(comm_per_step).median;
  const int64_t comm_ns = length(comm, m.window);
  if (comm_ns > 0) {
    // |comm \ compute| = |comm u compute| - |compute|; overlap = (|comm| - exposed) / |comm|.
    const int64_t exposed = length(joined(comm, compute), m.window) - length(compute, m.window);
    m.overlap = static_cast<double>(comm_ns - exposed) / static_cast<double>(comm_ns);
    m.exposed_s = static_cast<double>(exposed) * 1e-9 / static_cast<double>(m.steps.size());
    m.exposed_share = m.step_total_s > 0 ? static_cast<double>(exposed) * 1e-9 / m.step_total_s : 0;
  }
  return m;
}

std::string gpu(int d) { return fmt::format("cuda:{}", d); }

// Several ranks: DDP.
Evidence ranks_evidence(std::vector<RankTrace>& traces) {
  Evidence e;
  e.mode = ParallelMode::ddp;
  e.world = static_cast<int>(traces.size());
  e.visible = INT32_MAX;
  for (size_t i = 0; i < traces.size(); ++i) {
    if (traces[i].rank < 0) traces[i].rank = static_cast<int>(i);
    e.world = std::max(e.world, traces[i].world);
    e.visible = std::min(e.visible, traces[i].visible);
  }
  std::sort(traces.begin(), traces.end(), [](const RankTrace& a, const RankTrace& b) { return a.rank < b.rank; });
  for (size_t i = 1; i < traces.size(); ++i)
    DPB_CHECK(traces[i].rank != traces[i - 1].rank)
        << "traces '" << traces[i - 1].path << "' and '" << traces[i].path << "' are both rank " << traces[i].rank;
  e.requested = e.world;
  for (size_t i = 0; i < traces.size(); ++i) {
    const RankMeasure m = measure(traces[i]);
    const int r = traces[i].rank;
    e.ranks.push_back({r, "", gpu(m.main_device), {"gpu " + std::to_string(m.main_device)}, m.compute_s, m.comm_s,
                       m.step_s, m.busy.count(m.main_device) ? m.busy.at(m.main_device) : 0.0});
    e.device.push_back({fmt::format("rank {} ({})", r, gpu(m.main_device)), e.ranks.back().busy, 0});
    // A step lasts as long as its slowest rank; the loader that waits longest sets the pace.
    e.step_s = std::max(e.step_s, m.step_s);
    e.data_wait_share = std::max(e.data_wait_share, m.data_wait_share);
    e.steps = std::max<int64_t>(e.steps, static_cast<int64_t>(m.steps.size()));
    if (i == 0) {  // overlap as dpbench reports it: the first rank's
      e.overlap = m.overlap;
      e.exposed_share = m.overlap >= 0 ? m.exposed_share : -1;
    }
  }
  return e;
}

// One process: single, dp (DataParallel.forward) or model parallel over its GPUs.
Evidence process_evidence(const RankTrace& t) {
  Evidence e;
  const RankMeasure m = measure(t);
  e.step_s = m.step_s;
  e.steps = static_cast<int64_t>(m.steps.size());
  e.data_wait_share = m.data_wait_share;
  e.visible = t.visible;
  std::vector<int> used;
  for (const auto& [d, iv] : m.by_device)
    if (m.busy.at(d) > 0) used.push_back(d);
  e.world = std::max<int>(1, static_cast<int>(used.size()));
  e.requested = e.world;
  for (int d : used) e.device.push_back({gpu(d), m.busy.at(d), 0});
  e.mode = t.dp_forwards > 0 ? ParallelMode::dp : used.size() >= 2 ? ParallelMode::pipeline : ParallelMode::single;
  if (e.mode == ParallelMode::dp) {
    e.has_dp = true;
    e.scatter_calls = t.dp_forwards;
    if (used.size() >= 2) {
      // The primary's own work: its busy time while no replica was busy.
      std::vector<Iv> others;
      for (size_t k = 1; k < used.size(); ++k) others = joined(others, m.by_device.at(used[k]));
      const auto& primary = m.by_device.at(used[0]);
      const int64_t alone = length(joined(primary, others), m.window) - length(others, m.window);
      const int64_t together = length(primary, m.window) - alone;
      const double steps = static_cast<double>(m.steps.size());
      e.primary_only_s = static_cast<double>(alone) * 1e-9 / steps;
      e.primary_replica_s = static_cast<double>(together) * 1e-9 / steps;
    }
  } else if (e.mode == ParallelMode::pipeline) {
    e.has_pipeline = true;
    std::vector<std::vector<std::pair<double, double>>> lanes;
    for (int d : used) {
      e.stage_busy.push_back(m.busy.at(d));
      e.stage_units.push_back({gpu(d)});
      std::vector<std::pair<double, double>> lane;
      for (const auto& [b, en] : m.by_device.at(d))
        lane.emplace_back(static_cast<double>(b - m.window.first) * 1e-9, static_cast<double>(en - m.window.first) * 1e-9);
      lanes.push_back(std::move(lane));
    }
    e.concurrency = concurrency_share(lanes, 0, static_cast<double>(m.window.second - m.window.first) * 1e-9);
  }
  return e;
}

}  // namespace

Evidence read_torch_traces(const std::vector<std::string>& paths) {
  DPB_CHECK(!paths.empty()) << "no profiler trace given";
  std::vector<RankTrace> traces;
  for (const auto& f : expand(paths)) traces.push_back(read_trace(f));
  const bool distributed = traces.size() > 1 || traces.front().world > 1;
  Evidence e = distributed ? ranks_evidence(traces) : process_evidence(traces.front());
  e.source = "PyTorch profiler trace";
  e.samples_known = false;
  e.hosts_known = false;
  e.gpu = true;
  return e;
}

}  // namespace dpb::doctor
