#include "benchmarks/dpbench/distributed.h"

#include "engine/trace/timeline.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "engine/backend/cpu/cpu_context.h"
#include "engine/backend/device_info.h"
#include "engine/core/stats.h"
#include "engine/comm/launcher.h"
#include "engine/comm/rendezvous.h"
#include "engine/core/log.h"
#include "engine/trace/timeline.h"
#include "reports/report.h"

namespace dpb::bench {

namespace {

comm::Millis timeout_of(const BenchOptions& o) {
  return comm::Millis(static_cast<int64_t>(o.timeout_s * 1000.0));
}

std::string backend_of(const BenchOptions& o) {
  if (!o.backend.empty()) return o.backend;
  return o.devices == "cuda" ? "nccl" : "gloo";
}

bool is_loopback(const std::string& addr) {
  return addr.empty() || addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

// The address other ranks reach this one at: loopback when every rank is on this node.
std::string gloo_host(const BenchOptions& o, const RankEnv& env) {
  if (env.world_size == env.local_world_size && is_loopback(env.master_addr)) return "127.0.0.1";
  char name[256] = {0};
  ::gethostname(name, sizeof(name) - 1);
  return name;
}

}  // namespace

RankEnv rank_env(const BenchOptions& o) {
  RankFlags f;
  f.rank = o.rank;
  f.world_size = o.world_size;
  f.local_rank = o.local_rank;
  return resolve_rank_env(f);
}

bool should_launch(const BenchOptions& o, const RankEnv& env) {
  if (env.source != "none") return false;
  const char* launched = std::getenv("DPB_LAUNCHED");
  if (launched && *launched) return false;
  return o.gpus > 1 || o.nnodes > 1;
}

int launch_ranks(const BenchOptions& o, const std::vector<std::string>& argv) {
  comm::LaunchOptions lo;
  lo.nproc_per_node = o.gpus;
  lo.nnodes = o.nnodes;
  lo.node_rank = o.node_rank;
  lo.master_addr = o.master_addr;
  lo.master_port = o.master_port;
  lo.argv = argv;
  if (o.nnodes == 1)
    lo.run_dir = (std::filesystem::temp_directory_path() / ("dpbench-run-" + std::to_string(::getpid()))).string();
  log::info("launching {} rank(s) on this node (node {} of {}){}", o.gpus, o.node_rank, o.nnodes,
            o.nnodes > 1 ? fmt::format(", store at {}:{}", o.master_addr, o.master_port) : "");
  const comm::LaunchResult r = comm::launch(lo, std::cerr);
  if (r.exit_code != 0) std::cerr << "dpbench: error: " << r.failure << "\n";
  return r.exit_code;
}

int run_collectives_rank(const BenchOptions& o, const std::vector<std::string>& argv) {
  RankEnv env = rank_env(o);
  DPB_CHECK(o.collectives.kill_rank < env.world_size)
      << "--kill-rank=" << o.collectives.kill_rank << " but there are " << env.world_size << " rank(s)";
  const int threads = o.threads > 0 ? o.threads : std::max(1, cpu::hardware_threads() / env.local_world_size);
  cpu::set_threads_per_device(threads);
  cpu::CpuDeviceScope scope(0);
  const Device device = o.devices == "cuda" ? Device::cuda(env.local_rank) : Device::cpu(0);
  auto store = comm::rendezvous_store(env, timeout_of(o));
  comm::GroupOptions go;
  go.timeout = timeout_of(o);
  go.debug_collectives = o.debug_collectives;
  go.host = gloo_host(o, env);
  const std::string backend = backend_of(o);
  auto pg = comm::make_process_group(backend, store, env.rank, env.world_size, go, device);
  if (env.rank == 0) {
    std::cout << fmt::format("dpbench collectives | backend {} | {} rank(s) | {} | {} warm-up + {} timed iterations\n",
                             backend, env.world_size, o.devices == "cuda" ? "cuda" : "cpu", o.collectives.warmup,
                             o.collectives.iters);
    if (env.world_size == 1)
      std::cout << "note: one rank: collectives move no data between ranks, so the times are the cost of a call and "
                   "the bandwidths say nothing about links\n";
  }
  std::ostream null_out(nullptr);
  const nlohmann::json rows = run_collectives(*pg, device, o.collectives, env.rank == 0 ? std::cout : null_out);
  pg->barrier()->wait();  // no rank leaves while another still checks its results
  if (env.rank == 0 && !o.json_path.empty()) {
    nlohmann::json doc = reports::report_header(argv);
    doc["schema"] = "dpbench.collectives/1";
    doc["config"] = {{"backend", backend},
                     {"world_size", env.world_size},
                     {"devices", o.devices},
                     {"ops", o.collectives.ops},
                     {"min_bytes", o.collectives.min_bytes},
                     {"max_bytes", o.collectives.max_bytes},
                     {"factor", o.collectives.factor},
                     {"warmup", o.collectives.warmup},
                     {"iters", o.collectives.iters},
                     {"launcher", env.source}};
    doc["results"] = rows;
    reports::write_report(o.json_path, doc);
    log::info("report written to {}", o.json_path);
  }
  int64_t wrong = 0;
  for (const auto& r : rows) wrong += r["wrong"].get<int64_t>();
  if (wrong > 0) {
    std::cerr << "dpbench: error: " << wrong << " wrong element(s) in the collectives' results\n";
    return 1;
  }
  return 0;
}

}  // namespace dpb::bench

namespace dpb::bench {

namespace {

// Total length of the union of intervals, and of its intersection with [lo, hi).
void merged(std::vector<std::pair<int64_t, int64_t>> iv, int64_t lo, int64_t hi, int64_t* total, int64_t* inside) {
  std::sort(iv.begin(), iv.end());
  int64_t cur_a = -1, cur_b = -1;
  auto flush = [&] {
    if (cur_b <= cur_a) return;
    *total += cur_b - cur_a;
    *inside += std::max<int64_t>(0, std::min(cur_b, hi) - std::max(cur_a, lo));
  };
  for (const auto& [a, b] : iv) {
    if (a > cur_b) {
      flush();
      cur_a = a;
      cur_b = b;
    } else {
      cur_b = std::max(cur_b, b);
    }
  }
  flush();
}

}  // namespace

RankMetrics rank_metrics(const std::vector<StepRecord>& measured, const std::vector<StepRecord>& all, int device) {
  RankMetrics m;
  std::vector<double> times;
  double step_s = 0, data_s = 0;
  int64_t comm = 0, overlap = 0;
  for (const auto& r : measured) {
    times.push_back(r.seconds());
    step_s += r.seconds();
    data_s += static_cast<double>(r.data_ns) * 1e-9;
    std::vector<std::pair<int64_t, int64_t>> iv;
    for (const auto& b : r.buckets)
      if (b.comm_start_ns > 0 && b.comm_end_ns >= b.comm_start_ns) iv.emplace_back(b.comm_start_ns, b.comm_end_ns);
    merged(iv, r.backward_begin_ns, r.backward_end_ns, &comm, &overlap);
  }
  const Summary st = summarize(times);
  m.step_median_s = st.median;
  m.step_p90_s = st.p90;
  m.data_wait_share = data_s + step_s > 0 ? data_s / (data_s + step_s) : 0;
  const double window = measured.empty() ? 0
                                         : static_cast<double>(measured.back().end_ns - measured.front().begin_ns) *
                                                   1e-9 +
                                               static_cast<double>(measured.front().data_ns) * 1e-9;
  if (!measured.empty() && window > 0) {
    const int64_t lo = measured.front().begin_ns - measured.front().data_ns, hi = measured.back().end_ns;
    m.busy_fraction = static_cast<double>(trace::timeline().busy_ns(device, lo, hi)) * 1e-9 / window;
    std::vector<double> optim;
    std::vector<std::pair<int64_t, int64_t>> compute;
    for (const auto& i : trace::timeline().intervals()) {
      if (i.device != device || i.begin_ns < lo || i.end_ns > hi) continue;
      if (i.cat == trace::Category::optim) optim.push_back(static_cast<double>(i.end_ns - i.begin_ns) * 1e-9);
      if (i.cat == trace::Category::compute) compute.emplace_back(i.begin_ns, i.end_ns);
    }
    if (!optim.empty()) m.optimizer_s = summarize(optim).median;
    // Compute per step, the median over the measured steps: one step that the machine
    // interrupted does not make a rank look slow.
    std::vector<double> per_step;
    for (const auto& r : measured)
      per_step.push_back(static_cast<double>(trace::union_ns(compute, r.begin_ns, r.end_ns)) * 1e-9);
    m.compute_s = summarize(per_step).median;
  }
  // Per step: communication time, and the part of it outside backward.
  const double nsteps = std::max<double>(1.0, static_cast<double>(measured.size()));
  m.comm_s = static_cast<double>(comm) * 1e-9 / nsteps;
  m.overlap_ratio = comm > 0 ? static_cast<double>(overlap) / static_cast<double>(comm) : 0;
  m.exposed_comm_s = static_cast<double>(comm - overlap) * 1e-9 / nsteps;
  m.exposed_share = step_s > 0 ? m.exposed_comm_s * nsteps / step_s : 0;
  for (const auto& r : all) m.samples += static_cast<double>(r.samples);
  m.steps = static_cast<double>(measured.size());
  return m;
}

std::vector<RankMetrics> gather_metrics(comm::ProcessGroup& pg, const RankMetrics& mine, Device device) {
  const std::vector<float> v{static_cast<float>(mine.step_median_s), static_cast<float>(mine.step_p90_s),
                             static_cast<float>(mine.data_wait_share), static_cast<float>(mine.busy_fraction),
                             static_cast<float>(mine.comm_s),         static_cast<float>(mine.overlap_ratio),
                             static_cast<float>(mine.exposed_comm_s), static_cast<float>(mine.exposed_share),
                             static_cast<float>(mine.samples),        static_cast<float>(mine.steps),
                             static_cast<float>(mine.step_no_comm_s), static_cast<float>(mine.optimizer_s),
                             static_cast<float>(mine.compute_s)};
  const auto k = static_cast<int64_t>(v.size());
  Tensor local = Tensor::from_vector({k}, v, device), all = Tensor::empty({k * pg.size()}, device);
  pg.allgather(all, local)->wait();
  const auto a = all.to_vector();
  std::vector<RankMetrics> out(static_cast<size_t>(pg.size()));
  for (int r = 0; r < pg.size(); ++r) {
    const float* f = a.data() + r * k;
    out[static_cast<size_t>(r)] = RankMetrics{f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9], f[10], f[11], f[12]};
  }
  return out;
}

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

nlohmann::json buckets_json(const StepRecord& step) {
  nlohmann::json rows = nlohmann::json::array();
  const auto ms = [&](int64_t t) {
    return t > 0 ? reports::number(static_cast<double>(t - step.backward_begin_ns) * 1e-6) : nlohmann::json(nullptr);
  };
  for (const auto& b : step.buckets)
    rows.push_back({{"index", b.index},
                    {"bytes", b.bytes},
                    {"params", b.params},
                    {"ready_ms", ms(b.ready_ns)},
                    {"launch_ms", ms(b.launch_ns)},
                    {"comm_start_ms", ms(b.comm_start_ns)},
                    {"comm_end_ms", ms(b.comm_end_ns)},
                    {"done_ms", ms(b.done_ns)}});
  return rows;
}

namespace {

// The CPUs this process may run on (its affinity mask), in order.
std::vector<int> allowed_cores() {
  std::vector<int> cores;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cores.push_back(c);
  if (cores.empty())
    for (int c = 0; c < cpu::hardware_threads(); ++c) cores.push_back(c);
  return cores;
}

// Local rank r's device: r mod the devices there are (--device-map=same: all on 0). On
// the CPU a device is a group of --threads cores the process is pinned to, so ranks that
// share a device share those cores, as ranks that share a GPU share it.
Device place_rank(const BenchOptions& o, const RankEnv& env) {
  if (o.devices == "cuda") {
    int visible = std::max(1, cuda_device_count());
    if (o.visible_devices > 0) visible = std::min(visible, o.visible_devices);
    return Device::cuda(o.device_map == "same" ? 0 : env.local_rank % visible);
  }
  const std::vector<int> cores = allowed_cores();
  const int n = static_cast<int>(cores.size());
  int visible = std::max(1, n / o.threads);
  if (o.visible_devices > 0) visible = std::min(visible, o.visible_devices);
  const int slot = o.device_map == "same" ? 0 : env.local_rank % visible;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int k = 0; k < o.threads; ++k) CPU_SET(cores[static_cast<size_t>((slot * o.threads + k) % n)], &set);
  if (::sched_setaffinity(0, sizeof(set), &set) != 0)
    log::warn("rank {}: could not pin to the cores of cpu:{}: {}", env.rank, slot, std::strerror(errno));
  return Device::cpu(slot);
}

}  // namespace

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
  for (const auto& r : measured) mine["hashes"].push_back(r.data_hash);
  std::vector<RankRecord> out;
  for (const auto& text : gather_strings(pg, mine.dump(), device)) {
    const auto j = nlohmann::json::parse(text);
    out.push_back({{j["host"], j["device"], j["hardware"]}, j.value("hashes", std::vector<uint64_t>{})});
  }
  return out;
}

nlohmann::json same_data_json(const std::vector<RankRecord>& ranks) {
  size_t steps = ranks.empty() ? 0 : ranks.front().data_hashes.size();
  for (const auto& r : ranks) steps = std::min(steps, r.data_hashes.size());
  int64_t identical = 0;
  for (size_t k = 0; k < steps; ++k) {
    bool same = true;
    for (const auto& r : ranks) same = same && r.data_hashes[k] == ranks.front().data_hashes[k];
    identical += same ? 1 : 0;
  }
  return {{"compared_steps", static_cast<int64_t>(steps)}, {"identical_steps", identical}};
}

int run_ddp_rank(const BenchOptions& o_in, const std::vector<std::string>& argv) {
  BenchOptions o = o_in;
  const RankEnv env = rank_env(o);
  if (o.threads <= 0) o.threads = std::max(1, cpu::hardware_threads() / env.local_world_size);
  auto store = comm::rendezvous_store(env, timeout_of(o));
  comm::GroupOptions go;
  go.timeout = timeout_of(o);
  go.debug_collectives = o.debug_collectives;
  go.host = gloo_host(o, env);
  const Device device = place_rank(o, env);
  auto pg = comm::make_process_group(backend_of(o), store, env.rank, env.world_size, go, device);
  int code = 0;
  if (o.verify) code = run_verify(o, std::cout, pg.get(), device).passed ? 0 : 1;
  else run_benchmark(o, argv, std::cout, pg.get(), device);
  pg->barrier()->wait();  // no rank leaves while rank 0 still gathers and reports
  return code;
}

}  // namespace dpb::bench
