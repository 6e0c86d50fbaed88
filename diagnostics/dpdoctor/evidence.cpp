#include "diagnostics/dpdoctor/evidence.h"

#include <algorithm>
#include <map>

namespace dpb::doctor {

namespace {

// Share of the last step in which at least two stages were busy.
double stage_concurrency(const std::vector<reports::PipelineEventStats>& events) {
  std::map<int, std::vector<std::pair<double, double>>> by_stage;
  double span = 0;
  for (const auto& e : events) {
    by_stage[e.stage].emplace_back(e.begin_s.value_or(0), e.end_s.value_or(0));
    span = std::max(span, e.end_s.value_or(0));
  }
  std::vector<std::vector<std::pair<double, double>>> lanes;
  for (auto& [stage, iv] : by_stage) lanes.push_back(std::move(iv));
  return concurrency_share(lanes, 0, span);
}

// Where a sweep's lost efficiency went (evidence.h), from its one-rank run and its largest.
std::optional<SweepBudget> sweep_budget(const reports::RunReport& report, const reports::RunMetrics& run) {
  if (!run.scaling_efficiency || run.world_size < 2 || !run.breakdown || !run.step_time_s.median) return std::nullopt;
  const reports::RunMetrics* one = nullptr;
  for (const auto& r : report.runs)
    if (r.world_size == 1 && r.breakdown && !r.breakdown->empty() && r.step_time_s.median) one = &r;
  if (!one) return std::nullopt;
  const auto& b1 = one->breakdown->front();
  if (!b1.compute_share || !b1.idle_share) return std::nullopt;
  SweepBudget s;
  s.efficiency = *run.scaling_efficiency;
  s.one_rank_step_s = *one->step_time_s.median;
  s.step_s = *run.step_time_s.median;
  s.world = run.world_size;
  const double e = s.efficiency;
  const double one_busy = *b1.compute_share + b1.memory_share.value_or(0) + b1.comm_share.value_or(0);
  for (size_t k = 0; k < run.breakdown->size(); ++k) {
    const auto& b = (*run.breakdown)[k];
    if (!b.compute_share || !b.idle_share) return std::nullopt;
    SweepBudget::Rank r;
    r.rank = b.rank.value_or(static_cast<int>(k));
    const double comm = b.comm_share.value_or(0);
    std::optional<double> wait;
    if (run.ranks)
      for (const auto& rs : *run.ranks)
        if (rs.rank == r.rank && rs.wait_for_peers_s && s.step_s > 0) wait = std::min(comm, *rs.wait_for_peers_s / s.step_s);
    const double compute = *b.compute_share + b.memory_share.value_or(0) - one_busy * e;
    const double idle = *b.idle_share - *b1.idle_share * e;
    r.parts = {{"compute slower than alone", compute},
               {"waiting for the slower rank", wait},
               {"exposed communication", comm - wait.value_or(0)},
               {"idle", idle}};
    double sum = 0;
    for (const auto& p : r.parts) sum += p.share.value_or(0);
    r.residual = (1 - e) - sum;
    r.compute_s = (*b.compute_share + b.memory_share.value_or(0)) * s.step_s;
    r.one_rank_compute_s = one_busy * s.one_rank_step_s;
    s.ranks.push_back(std::move(r));
  }
  return s;
}

}  // namespace

std::string TimelineEvidence::who() const {
  return rank ? "rank " + std::to_string(*rank) + " (" + device + ")" : device;
}

double concurrency_share(const std::vector<std::vector<std::pair<double, double>>>& lanes, double lo, double hi) {
  if (hi <= lo) return 0;
  std::vector<std::pair<double, int>> edges;  // (time, +1 start / -1 end)
  for (auto lane : lanes) {
    // Merge the lane's own overlaps (kernels on two streams of one GPU) first.
    std::sort(lane.begin(), lane.end());
    std::vector<std::pair<double, double>> merged;
    for (auto [b, e] : lane) {
      b = std::max(b, lo);
      e = std::min(e, hi);
      if (e <= b) continue;
      if (!merged.empty() && b <= merged.back().second) merged.back().second = std::max(merged.back().second, e);
      else merged.emplace_back(b, e);
    }
    for (const auto& [b, e] : merged) {
      edges.emplace_back(b, +1);
      edges.emplace_back(e, -1);
    }
  }
  std::sort(edges.begin(), edges.end(), [](const auto& a, const auto& c) {
    return a.first < c.first || (a.first == c.first && a.second < c.second);  // ends first
  });
  int open = 0;
  double last = lo, both = 0;
  for (const auto& [t, d] : edges) {
    if (open >= 2) both += t - last;
    open += d;
    last = t;
  }
  return both / (hi - lo);
}

Evidence evidence_from_report(const reports::RunReport& report) {
  const auto& cfg = report.config;
  const auto& run = report.largest_run();
  Evidence e;
  e.mode = run.mode.value_or(cfg.mode);
  e.model = cfg.model;
  e.gpu = cfg.devices == DeviceKind::cuda;
  e.timeline_source = run.timeline ? run.timeline->source : trace::TimelineSource::host;
  e.world = run.world_size;
  // Each point of a sweep asked for its own count.
  e.requested = report.sweep ? e.world : cfg.gpus_requested;
  e.visible = cfg.visible_devices;
  e.batch_per_device = run.batch_per_device;
  e.global_batch = run.global_batch;
  e.base_batch = cfg.base_batch;
  e.steps = run.steps;
  e.batchnorm = cfg.batchnorm;
  e.sync_bn = cfg.sync_bn;
  e.lr_scale = cfg.lr_scale;
  e.lr = cfg.optimizer.lr;
  e.lr_effective = cfg.lr_effective.value_or(e.lr);
  e.step_s = run.step_time_s.median.value_or(0);
  e.throughput = run.throughput_samples_per_s.value_or(0);
  e.data_wait_share = run.data_wait_share.value_or(0);
  e.workers = cfg.workers;
  for (const auto& d : run.devices) e.device.push_back({d.id, d.busy_fraction.value_or(0), d.samples});
  if (run.dp) {
    const auto& dp = *run.dp;
    e.has_dp = true;
    e.dp_forward = dp.forward;
    e.dp_input = dp.input;
    e.scatter_calls = dp.scatter_calls;
    e.chunks = dp.full_chunks.empty() ? dp.last_chunks : dp.full_chunks;
    e.primary_only_s = dp.primary_only_s.value_or(-1);
    e.primary_replica_s = dp.primary_replica_s.value_or(-1);
    e.host_only_s = dp.host_only_s.value_or(-1);
    const bool all = dp.replica_s.size() == run.devices.size() &&
                     std::all_of(dp.replica_s.begin(), dp.replica_s.end(), [](const auto& v) { return v.has_value(); });
    if (all)
      for (const auto& v : dp.replica_s) e.replica_s.push_back(*v);
    const bool waits = dp.replica_waited_s.size() == run.devices.size() &&
                       std::all_of(dp.replica_waited_s.begin(), dp.replica_waited_s.end(),
                                   [](const auto& v) { return v.has_value(); });
    if (waits)
      for (const auto& v : dp.replica_waited_s) e.replica_waited_s.push_back(*v);
  }
  if (run.ranks)
    for (const auto& r : *run.ranks)
      e.ranks.push_back({r.rank, r.host, r.device, r.hardware, r.compute_s.value_or(0), r.comm_s.value_or(0),
                         r.step_time_median_s.value_or(0), r.busy_fraction.value_or(0),
                         run.steps > 0 ? static_cast<double>(r.samples) / static_cast<double>(run.steps) : 0.0,
                         {},
                         {}});
  if (run.ranks) {
    for (size_t k = 0; k < run.ranks->size(); ++k)
      for (const auto& c : (*run.ranks)[k].compute_steps_s)
        if (c) e.ranks[k].compute_steps_s.push_back(*c);
    const bool waits = std::all_of(run.ranks->begin(), run.ranks->end(),
                                   [](const reports::RankStats& r) { return r.wait_for_peers_s.has_value(); });
    if (waits)
      for (const auto& r : *run.ranks) e.wait_for_peers_s.push_back(*r.wait_for_peers_s);
    const bool costs = std::all_of(run.ranks->begin(), run.ranks->end(), [](const reports::RankStats& r) {
      return r.allreduce_s.has_value() && r.allreduce_handoff_s.has_value();
    });
    if (costs)
      for (const auto& r : *run.ranks) {
        e.allreduce_s.push_back(*r.allreduce_s);
        e.allreduce_handoff_s.push_back(*r.allreduce_handoff_s);
      }
  }
  // The sweep's efficiency at the diagnosed point (a sweep: the largest run).
  if (run.scaling_efficiency && run.world_size > 1) e.scaling_efficiency = *run.scaling_efficiency;
  e.sweep_budget = sweep_budget(report, run);
  if (run.overlap) {
    e.overlap = run.overlap->ratio.value_or(-1);
    e.exposed_share = run.overlap->exposed_share.value_or(-1);
    if (run.overlap->ab) {
      e.exposed_share_ab = run.overlap->ab->exposed_share.value_or(-1);
      e.step_without_comm_s = run.overlap->ab->step_without_comm_s.value_or(-1);
    }
  }
  if (run.buckets) {
    e.buckets = static_cast<int64_t>(run.buckets->size());
    for (const auto& b : *run.buckets) e.bucket_bytes_max = std::max(e.bucket_bytes_max, b.bytes);
  }
  e.bucket_mb = cfg.bucket_mb.value_or(0);
  if (run.data) {
    e.data_compared = run.data->compared_steps;
    e.data_identical = run.data->identical_steps;
  }
  if (run.fsdp) {
    const auto& f = *run.fsdp;
    e.has_fsdp = true;
    e.fsdp_reshard = f.reshard_after_forward;
    e.fsdp_prefetch = f.prefetch;
    e.fsdp_units = f.units;
    e.fsdp_full_bytes = f.full_parameter_bytes;
    e.fsdp_largest_unit_bytes = f.largest_unit_bytes;
    for (const auto& r : f.ranks) {
      e.fsdp_state_bytes =
          std::max(e.fsdp_state_bytes, r.shard_parameter_bytes + r.shard_gradient_bytes + r.optimizer_state_bytes);
      e.fsdp_peak_gathered_bytes = std::max(e.fsdp_peak_gathered_bytes, r.peak_gathered_parameter_bytes);
    }
    const bool per_rank = !f.ranks.empty() && std::all_of(f.ranks.begin(), f.ranks.end(), [](const auto& r) {
      return r.allgather_waited_s.has_value();
    });
    if (per_rank)
      for (const auto& r : f.ranks) e.rank_allgather_waited_s.push_back(*r.allgather_waited_s);
    for (const auto& c : f.collectives)
      if (c.kind == "all-gather") {
        e.allgathers = c.count;
        e.allgather_bytes = c.bytes;
        e.allgather_s = c.seconds.value_or(-1);
        e.allgather_waited_s = c.waited_s.value_or(-1);
      }
  }
  if (run.tp) {
    e.has_tp = true;
    for (const auto& c : run.tp->collectives)
      if (c.kind == "all-reduce") {
        e.tp_allreduces = c.count;
        e.tp_allreduce_bytes = c.bytes;
        e.tp_allreduce_s = c.seconds.value_or(-1);
        e.tp_allreduce_waited_s = c.waited_s.value_or(-1);
      }
  }
  if (run.pipeline) {
    const auto& p = *run.pipeline;
    e.has_pipeline = true;
    e.schedule = pipeline_schedule_name(p.schedule);
    e.split_by = p.split_by;
    e.micro_batches = p.micro_batches;
    e.micro_sizes = p.micro_batch_sizes;
    e.bubble = p.bubble_measured.value_or(-1);
    e.bubble_theory = p.bubble_theory;
    if (p.unit_costs)
      for (const auto& u : *p.unit_costs) {
        e.unit_names.push_back(u.unit);
        e.unit_costs.push_back(u.seconds.value_or(0));
      }
    e.concurrency = stage_concurrency(p.last_step_events);
  }
  if (run.stages)
    for (const auto& s : *run.stages) {
      e.stage_busy.push_back(1.0 - s.idle_share.value_or(0));
      e.stage_units.push_back(s.units);
    }
  if (run.breakdown) e.breakdown = *run.breakdown;
  return e;
}

}  // namespace dpb::doctor
