#include "benchmarks/dpbench/rank.h"

#include <fmt/format.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "benchmarks/dpbench/benchmark.h"
#include "benchmarks/dpbench/collectives/runner.h"
#include "benchmarks/dpbench/gather.h"
#include "benchmarks/dpbench/setup.h"
#include "benchmarks/dpbench/verify.h"
#include "engine/backend/cpu/cpu_context.h"
#include "engine/backend/device_info.h"
#include "engine/comm/launcher.h"
#include "engine/comm/rendezvous.h"
#include "engine/core/log.h"
#include "reports/collectives_report.h"
#include "reports/report.h"

namespace dpb::bench {

namespace {

comm::Millis timeout_of(const BenchOptions& o) {
  return comm::Millis(static_cast<int64_t>(o.ranks.timeout_s * 1000.0));
}

comm::GroupOptions group_options(const BenchOptions& o, const RankEnv& env) {
  comm::GroupOptions go;
  go.timeout = timeout_of(o);
  go.debug_collectives = o.ranks.debug_collectives;
  go.spin = comm::Millis(o.ranks.spin_ms);
  go.shared_memory = o.ranks.shared_memory;
  const comm::LocalAddress self = comm::advertised_address(env);
  if (env.world_size > env.local_world_size)
    log::info("rank {}: the other ranks reach this one at {} ({})", env.rank, self.address, self.why);
  go.host = self.address;
  return go;
}

// This rank's process group over the run's store (and the store, for further groups).
std::unique_ptr<comm::ProcessGroup> join_group(const BenchOptions& o, const RankEnv& env, Device device,
                                               std::shared_ptr<comm::Store>* store_out = nullptr) {
  auto store = comm::rendezvous_store(env, timeout_of(o));
  if (store_out) *store_out = store;
  return comm::make_process_group(backend_name(resolved_backend(o)), store, env.rank, env.world_size,
                                  group_options(o, env), device);
}

// Local rank r's device: r mod the devices there are (--device-map=same: all on 0). On
// the CPU a device is a group of --threads cores the process is pinned to, so ranks that
// share a device share those cores, as ranks that share a GPU share it.
Device place_rank(const BenchOptions& o, const RankEnv& env) {
  const bool same = o.ddp.device_map == DeviceMap::same;
  if (o.device.kind == DeviceKind::cuda) {
    int visible = std::max(1, cuda_device_count());
    if (o.device.visible > 0) visible = std::min(visible, o.device.visible);
    return Device::cuda(same ? 0 : env.local_rank % visible);
  }
  const std::vector<int> cores = allowed_cores();
  const int n = static_cast<int>(cores.size());
  const int threads = o.device.threads;
  int visible = std::max(1, n / threads);
  if (o.device.visible > 0) visible = std::min(visible, o.device.visible);
  const int slot = same ? 0 : env.local_rank % visible;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int k = 0; k < threads; ++k) CPU_SET(cores[static_cast<size_t>((slot * threads + k) % n)], &set);
  if (::sched_setaffinity(0, sizeof(set), &set) != 0)
    log::warn("rank {}: could not pin to the cores of cpu:{}: {}", env.rank, slot, std::strerror(errno));
  return Device::cpu(slot);
}

// The flags that decide which collectives a rank calls, and in what order: every rank of a
// run must take the same ones (torchrun passes each node the same command). Across two
// nodes, rank 0 given --trace and rank 1 not: rank 0's gather of the trace met rank 1's
// gather of its step records, and both ranks died parsing what they got. Each flag as
// the user spells it.
nlohmann::json collective_flags(const BenchOptions& o) {
  return {{"--mode", parallel_mode_name(o.mode)},
          {"--model", o.data.model},
          {"--dataset", o.data.dataset},
          {"--seq", o.data.seq},
          {"--batch", o.train.batch},
          {"--steps", o.train.steps},
          {"--epochs", o.train.epochs},
          {"--warmup", o.train.warmup},
          {"--accum-steps", o.train.accum_steps},
          {"--eval-every", o.data.eval_every},
          {"--eval", o.data.eval == EvalMode::on ? "on" : o.data.eval == EvalMode::off ? "off" : "auto"},
          {"--bucket-mb", o.ddp.bucket_mb},
          {"--sync-bn", o.ddp.sync_bn},
          {"--tp", o.ddp.tp},
          {"--fsdp-reshard", o.fsdp.reshard_after_forward},
          {"--fsdp-prefetch", o.fsdp.prefetch},
          {"--precision", precision_name(o.device.precision)},
          {"--verify", o.verify.enabled},
          {"--verify-steps", o.verify.steps},
          {"--trace", !o.out.trace_path.empty()},
          {"--doctor", o.out.doctor},
          {"--layer-profile", o.out.layer_profile},
          {"--save", !o.train.save_path.empty()},
          {"--resume", !o.train.resume_path.empty()}};
}

// Fails on every rank, naming each flag where some rank differs from rank 0, before any
// rank trains.
void agree_on_flags(const BenchOptions& o, const RankContext& rank) {
  const nlohmann::json mine = collective_flags(o);
  const auto all = gather_strings(*rank.group, mine.dump(), rank.device);
  const nlohmann::json first = nlohmann::json::parse(all[0]);
  std::vector<std::string> differ;
  for (size_t r = 1; r < all.size(); ++r) {
    const nlohmann::json theirs = nlohmann::json::parse(all[r]);
    for (const auto& [flag, value] : first.items()) {
      if (theirs.contains(flag) && theirs[flag] == value) continue;
      // A flag that is on or off (--trace, --doctor) is given or not; the rest have values.
      auto said = [&](const nlohmann::json& v) {
        return v.is_boolean() && flag != "--fsdp-reshard" ? (v.get<bool>() ? "given" : "not given") : v.dump();
      };
      differ.push_back(fmt::format("{} {} on rank 0, {} on rank {}", flag, said(value),
                                   theirs.contains(flag) ? said(theirs[flag]) : "unknown", r));
    }
  }
  if (differ.empty()) return;
  std::string list;
  for (const auto& d : differ) list += (list.empty() ? "" : "; ") + d;
  DPB_FAIL() << "the ranks were started with different flags (" << list
             << "): every rank of a run takes the same command (as torchrun gives each node), else their "
                "collectives do not match";
}

}  // namespace

RankEnv rank_env(const BenchOptions& o) {
  RankFlags f;
  f.rank = o.ranks.rank;
  f.world_size = o.ranks.world_size;
  f.local_rank = o.ranks.local_rank;
  f.store_bind = o.ranks.store_bind;
  if (o.ranks.master_addr_given) f.master_addr = o.ranks.master_addr;
  if (o.ranks.master_port_given) f.master_port = o.ranks.master_port;
  return resolve_rank_env(f);
}

int run_ddp_rank(const BenchOptions& o_in, const std::vector<std::string>& argv) {
  BenchOptions o = o_in;
  const RankEnv env = rank_env(o);
  comm::end_with_launcher(std::getenv);
  // The cores shared out over the ranks of this node (the sweep passes its own budget).
  o.device.threads = threads_per_device(o, env.local_world_size);
  const Device device = place_rank(o, env);
  std::shared_ptr<comm::Store> store;
  auto pg = join_group(o, env, device, &store);
  RankContext rank{pg.get(), device};
  // 2D: the tensor-parallel and data-parallel groups, each in its own part of the store.
  comm::MeshGroups mesh;
  if (o.ddp.tp > 1) {
    mesh = comm::make_mesh_groups(backend_name(resolved_backend(o)), std::make_shared<comm::PrefixStore>("mesh/", store),
                                  env.rank, env.world_size, o.ddp.tp, group_options(o, env), device);
    rank.data_group = mesh.data.get();
    rank.tensor_group = mesh.tensor.get();
  }
  agree_on_flags(o, rank);
  int code = 0;
  if (o.verify.enabled) code = run_verify(o, std::cout, &rank).passed ? 0 : 1;
  else run_benchmark(o, argv, std::cout, &rank);
  pg->barrier()->wait();  // no rank leaves while rank 0 still gathers and reports
  return code;
}

int run_collectives_rank(const BenchOptions& o, const std::vector<std::string>& argv) {
  const RankEnv env = rank_env(o);
  comm::end_with_launcher(std::getenv);
  DPB_CHECK(o.collectives.kill_rank < env.world_size)
      << "--kill-rank=" << o.collectives.kill_rank << " but there are " << env.world_size << " rank(s)";
  apply_process_settings(o, env.local_world_size);
  cpu::CpuDeviceScope scope(0);
  const Device device = o.device.kind == DeviceKind::cuda ? Device::cuda(env.local_rank) : Device::cpu(0);
  auto pg = join_group(o, env, device);
  const std::string backend = backend_name(resolved_backend(o));
  if (env.rank == 0) {
    std::cout << fmt::format("dpbench collectives | backend {} | {} rank(s) | {} | {} warm-up + {} timed iterations\n",
                             backend, env.world_size, device_kind_name(o.device.kind), o.collectives.warmup,
                             o.collectives.iters);
    if (env.world_size == 1)
      std::cout << "note: one rank: collectives move no data between ranks, so the times are the cost of a call and "
                   "the bandwidths say nothing about links\n";
  }
  std::ostream null_out(nullptr);
  const auto rows = run_collectives(*pg, device, o.collectives, env.rank == 0 ? std::cout : null_out);
  pg->barrier()->wait();  // no rank leaves while another still checks its results
  if (env.rank == 0 && !o.out.json_path.empty()) {
    reports::CollectivesReport doc;
    doc.tool = reports::this_tool();
    doc.command = argv;
    doc.env = reports::collect_environment();
    auto& c = doc.config;
    c.backend = backend;
    c.world_size = env.world_size;
    c.devices = o.device.kind;
    c.ops = o.collectives.ops;
    c.min_bytes = o.collectives.min_bytes;
    c.max_bytes = o.collectives.max_bytes;
    c.factor = o.collectives.factor;
    c.warmup = o.collectives.warmup;
    c.iters = o.collectives.iters;
    c.load = o.collectives.load ? "compute" : "none";
    c.isolated = o.collectives.isolated;
    c.isolated_pause_us = o.collectives.isolated > 0 ? static_cast<double>(o.collectives.isolated_pause_us) : 0.0;
    c.launcher = env.source;
    doc.results = rows;
    reports::write_report(o.out.json_path, doc.to_json());
    log::info("report written to {}", o.out.json_path);
  }
  int64_t wrong = 0;
  for (const auto& r : rows) wrong += r.wrong;
  if (wrong > 0) {
    std::cerr << "dpbench: error: " << wrong << " wrong element(s) in the collectives' results\n";
    return 1;
  }
  return 0;
}

}  // namespace dpb::bench
