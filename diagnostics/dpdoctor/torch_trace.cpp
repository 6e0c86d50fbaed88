#include "diagnostics/dpdoctor/torch_trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "diagnostics/dpdoctor/kineto_reader.h"
#include "engine/core/error.h"

namespace dpb::doctor {

namespace {

std::string gpu(int d) { return fmt::format("cuda:{}", d); }

double seconds(int64_t ns) { return static_cast<double>(ns) * 1e-9; }

TimelineEvidence timeline_evidence(const trace::RankAnalysis& a, const trace::DeviceAnalysis& d) {
  TimelineEvidence t;
  t.rank = a.rank;
  t.device = gpu(d.device);
  t.steps = a.steps;
  t.step_s = a.step_s;
  t.full_step_s = a.full_step_s;
  t.window = a.window_is_steps ? "profiled steps" : "kernel span";
  t.breakdown = d.breakdown;
  t.breakdown.device = t.device;
  t.compute_per_step_s = d.compute_per_step_s;
  t.comm_per_step_s = d.comm_per_step_s;
  t.exposed_comm_per_step_s = d.exposed_comm_per_step_s;
  t.collectives = d.collectives;
  t.launches_known = true;
  if (d.breakdown.idle_share && d.breakdown.idle_breakdown.host_wait && a.steps > 0)
    t.host_wait_per_step_s =
        *d.breakdown.idle_share * d.breakdown.window_s * *d.breakdown.idle_breakdown.host_wait / a.steps;
  t.launches = a.launches;
  t.syncs = a.syncs;
  t.copies = a.copies;
  t.idle = d.idle;
  t.lost = a.lost;
  t.input_ahead = a.input_ahead;
  return t;
}

// The work spans of one device within the window.
std::vector<trace::Span64> spans(const trace::RankTimeline& t, int device, trace::Span64 w) {
  std::vector<trace::Span64> s;
  for (const auto& x : t.work)
    if (x.device == device) s.emplace_back(x.begin_ns, x.end_ns);
  return trace::merged(std::move(s), w.first, w.second);
}

// Several ranks: the parallelism their collectives and host ops show, with that evidence:
//   expert          all-to-all kernels (NCCL's AllToAll, DeepEP's dispatch and combine);
//   sharded         FSDP's host ops (FSDP2's FSDP:: ranges, FSDP1's forward), or both
//                   all-gathers and reduce-scatters;
//   tensor          DTensor's functional collectives without DistributedDataParallel, or
//                   all-reduces in a job that runs no backward (inference: they can only
//                   be activations');
//   data            DistributedDataParallel's forward, or all-reduces with a backward;
//   point-to-point  send/recv kernels (pipeline stages, or an all-to-all built from them);
// joined with " + " where several hold; "unknown" where no collective ran. The mode the
// rules read is the nearest of dpbench's: fsdp for sharded, tp for tensor without data,
// else ddp.
ParallelMode ranks_mode(const std::vector<trace::RankTimeline>& ranks, const std::vector<trace::RankAnalysis>& analyses,
                        std::string* kind, std::string* evidence) {
  int64_t ddp = 0, fsdp = 0, functional = 0, backward = 0;
  std::map<trace::CollectiveKind, int64_t> kernels;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const auto& t = ranks[i];
    ddp += t.ddp_forwards;
    fsdp += t.fsdp_ops;
    functional += t.functional_collectives;
    backward += static_cast<int64_t>(t.optimizer_steps.size());
    for (size_t n = 0; n < t.names.size() && backward == 0; ++n)
      if (t.names.name(static_cast<uint32_t>(n)).rfind("autograd::engine::evaluate_function", 0) == 0) ++backward;
    for (const auto& d : analyses[i].devices)
      for (const auto& c : d.collectives) kernels[c.kind] += c.kernels;
  }
  auto has = [&](trace::CollectiveKind k) { return kernels.count(k) ? kernels[k] : 0; };
  std::vector<std::string> kinds, why;
  if (has(trace::CollectiveKind::all_to_all) > 0) {
    kinds.push_back("expert");
    why.push_back(fmt::format("{} all-to-all kernels", has(trace::CollectiveKind::all_to_all)));
  }
  const bool sharded = fsdp > 0 || (has(trace::CollectiveKind::all_gather) > 0 && has(trace::CollectiveKind::reduce_scatter) > 0);
  if (sharded) {
    kinds.push_back("sharded");
    why.push_back(fsdp > 0 ? fmt::format("{} FSDP host ops", fsdp)
                           : fmt::format("{} all-gathers and {} reduce-scatters", has(trace::CollectiveKind::all_gather),
                                         has(trace::CollectiveKind::reduce_scatter)));
  }
  const int64_t all_reduce = has(trace::CollectiveKind::all_reduce);
  const bool tensor = (functional > 0 && ddp == 0) || (all_reduce > 0 && backward == 0 && ddp == 0);
  if (tensor) {
    kinds.push_back("tensor");
    why.push_back(functional > 0 && ddp == 0 ? fmt::format("{} functional collectives (DTensor), no DDP", functional)
                                              : fmt::format("{} all-reduces and no backward", all_reduce));
  }
  if (ddp > 0 || (all_reduce > 0 && backward > 0 && !sharded)) {
    kinds.push_back("data");
    why.push_back(ddp > 0 ? fmt::format("{} DistributedDataParallel forwards", ddp)
                          : fmt::format("{} all-reduces with a backward", all_reduce));
  }
  if (has(trace::CollectiveKind::send_recv) > 0) {
    kinds.push_back("point-to-point");
    why.push_back(fmt::format("{} send/recv kernels", has(trace::CollectiveKind::send_recv)));
  }
  *kind = kinds.empty() ? "unknown" : kinds[0];
  for (size_t k = 1; k < kinds.size(); ++k) *kind += " + " + kinds[k];
  *evidence = why.empty() ? "no collective kernel or parallel wrapper's op recorded" : why[0];
  for (size_t k = 1; k < why.size(); ++k) *evidence += "; " + why[k];
  if (sharded) return ParallelMode::fsdp;
  if (tensor && std::find(kinds.begin(), kinds.end(), "data") == kinds.end()) return ParallelMode::tp;
  return ParallelMode::ddp;
}

Evidence ranks_evidence(const std::vector<trace::RankTimeline>& ranks, const std::vector<trace::RankAnalysis>& analyses) {
  Evidence e;
  e.mode = ranks_mode(ranks, analyses, &e.parallelism, &e.parallelism_evidence);
  e.world = static_cast<int>(ranks.size());
  e.visible = INT32_MAX;
  for (const auto& t : ranks) {
    e.world = std::max(e.world, t.world);
    e.visible = std::min(e.visible, t.visible_devices);
  }
  e.requested = e.world;
  e.hosts_known = std::all_of(ranks.begin(), ranks.end(), [](const auto& t) { return !t.host.empty(); });
  for (size_t i = 0; i < ranks.size(); ++i) {
    const auto& a = analyses[i];
    const int r = a.rank.value_or(static_cast<int>(i));
    e.step_s = std::max(e.step_s, a.step_s.value_or(0));
    e.data_wait_share = std::max(e.data_wait_share, a.data_wait_share);
    e.steps = std::max<int64_t>(e.steps, a.steps);
    if (a.devices.empty()) {
      e.ranks.push_back({r, ranks[i].host, "cpu", {"host " + ranks[i].host}, 0, 0, a.step_s.value_or(0), 0, 0, {}, {}});
      continue;
    }
    const auto& d = a.main();
    TimelineEvidence te = timeline_evidence(a, d);
    te.rank = r;
    e.ranks.push_back({r, ranks[i].host, gpu(d.device), {"gpu " + std::to_string(d.device)},
                       d.compute_per_step_s.value_or(0), d.comm_per_step_s.value_or(0), a.step_s.value_or(0),
                       d.busy_share(), 0, d.compute_steps_s, d.host_wait_steps_s});
    e.device.push_back({fmt::format("rank {} ({})", r, gpu(d.device)), d.busy_share(), 0});
    auto b = te.breakdown;
    b.rank = r;
    e.breakdown.push_back(b);
    auto k = d.hta_breakdown;
    k.rank = r;
    k.device = te.device;
    e.kernel_span.push_back(k);
    if (i == 0) {  // overlap as dpbench reports it: the first rank's
      e.overlap = d.breakdown.overlap.value_or(-1);
      if (d.breakdown.overlap && a.step_s && *a.step_s > 0)
        e.exposed_share = d.exposed_comm_per_step_s.value_or(0) / *a.step_s;
    }
    // FSDP: each rank's all-gathers from its NCCL kernels (rank 0's, or the first rank's,
    // are the step's figures, as dpbench reports rank 0's waits).
    if (e.mode == ParallelMode::fsdp) {
      for (const auto& c : d.collectives) {
        if (c.kind != trace::CollectiveKind::all_gather) continue;
        if (e.rank_allgather_waited_s.size() <= static_cast<size_t>(r)) e.rank_allgather_waited_s.resize(r + 1, 0.0);
        e.rank_allgather_waited_s[static_cast<size_t>(r)] = c.exposed_per_step_s;
        if (i == 0) {
          e.allgathers_from_kernels = true;
          e.allgathers = a.steps > 0 ? (c.kernels + a.steps - 1) / a.steps : c.kernels;
          e.allgather_s = c.per_step_s;
          e.allgather_waited_s = c.exposed_per_step_s;
        }
      }
    }
    e.timelines.push_back(std::move(te));
  }
  return e;
}

// One process: single, dp (DataParallel.forward) or model parallel over its GPUs.
Evidence process_evidence(const trace::RankTimeline& t, const trace::RankAnalysis& a) {
  Evidence e;
  e.step_s = a.step_s.value_or(0);
  e.steps = a.steps;
  e.data_wait_share = a.data_wait_share;
  e.visible = t.visible_devices;
  std::vector<int> used;
  for (const auto& d : a.devices)
    if (d.busy_share() > 0) used.push_back(d.device);
  e.world = std::max<int>(1, static_cast<int>(used.size()));
  e.requested = e.world;
  for (int d : used) {
    const auto* da = a.device(d);
    e.device.push_back({gpu(d), da->busy_share(), 0});
    e.breakdown.push_back(timeline_evidence(a, *da).breakdown);
    auto k = da->hta_breakdown;
    k.device = gpu(d);
    e.kernel_span.push_back(k);
    e.timelines.push_back(timeline_evidence(a, *da));
  }
  e.mode = t.dp_forwards > 0 ? ParallelMode::dp : used.size() >= 2 ? ParallelMode::pipeline : ParallelMode::single;
  const auto w = a.window;
  const double steps = std::max(1, a.steps);
  if (e.mode == ParallelMode::dp) {
    e.has_dp = true;
    e.scatter_calls = t.dp_forwards;
    // The GPUs it could see but never used.
    for (int d = 0; d < t.visible_devices; ++d)
      if (std::find(used.begin(), used.end(), d) == used.end()) e.device.push_back({gpu(d), 0.0, 0});
    if (used.size() >= 2) {
      // The primary's own work: its busy time while no replica was busy.
      std::vector<trace::Span64> others;
      for (size_t k = 1; k < used.size(); ++k) others = trace::unite(others, spans(t, used[k], w));
      const auto primary = spans(t, used[0], w);
      e.primary_only_s = seconds(trace::total_length(trace::difference(primary, others))) / steps;
      e.primary_replica_s = seconds(trace::intersection_length(primary, others)) / steps;
    }
  } else if (e.mode == ParallelMode::pipeline) {
    e.has_pipeline = true;
    std::vector<std::vector<std::pair<double, double>>> lanes;
    for (int d : used) {
      e.stage_busy.push_back(a.device(d)->busy_share());
      e.stage_units.push_back({gpu(d)});
      std::vector<std::pair<double, double>> lane;
      for (const auto& [b, en] : spans(t, d, w)) lane.emplace_back(seconds(b - w.first), seconds(en - w.first));
      lanes.push_back(std::move(lane));
    }
    e.concurrency = concurrency_share(lanes, 0, seconds(w.second - w.first));
  }
  return e;
}

// A trace that holds some steps and not those between them (a sampling schedule written
// to one file, a profiler stopped and started): steps whose numbers skip, or a stretch
// between two recorded steps longer than a step. The window runs across the holes, so
// their time reads as idle.
std::optional<std::string> sampled_steps(const trace::RankTimeline& t) {
  if (t.steps.size() < 2) return std::nullopt;
  std::vector<std::pair<trace::Span64, int>> steps;
  for (size_t i = 0; i < t.steps.size(); ++i)
    steps.emplace_back(t.steps[i], i < t.step_numbers.size() ? t.step_numbers[i] : -1);
  std::sort(steps.begin(), steps.end());
  std::vector<int64_t> lengths;
  for (const auto& [s, n] : steps) lengths.push_back(s.second - s.first);
  std::nth_element(lengths.begin(), lengths.begin() + static_cast<std::ptrdiff_t>(lengths.size() / 2), lengths.end());
  const int64_t median = lengths[lengths.size() / 2];
  int64_t missing = 0, unrecorded_ns = 0;
  int holes = 0;
  for (size_t i = 1; i < steps.size(); ++i) {
    const auto& [prev, a] = steps[i - 1];
    const auto& [next, b] = steps[i];
    const int64_t skipped = a >= 0 && b > a ? b - a - 1 : 0;
    const int64_t gap = next.first - prev.second;
    if (skipped > 0 || (median > 0 && gap > median)) {
      ++holes;
      missing += skipped;
      unrecorded_ns += std::max<int64_t>(0, gap);
    }
  }
  if (holes == 0) return std::nullopt;
  return fmt::format("{} holds {} profiler step(s) with {} hole(s) between them ({} step number(s) skipped, {:.1f} ms "
                     "unrecorded): a sampled or paused trace; the window runs across the holes, so their time reads as "
                     "idle and the shares are less certain",
                     t.source.empty() ? std::string("a trace") : t.source, steps.size(), holes, missing,
                     static_cast<double>(unrecorded_ns) * 1e-6);
}

}  // namespace

Evidence evidence_from_timelines(const std::vector<trace::RankTimeline>& ranks) {
  DPB_CHECK(!ranks.empty()) << "no profiler trace given";
  std::vector<trace::RankAnalysis> analyses;
  for (const auto& t : ranks) analyses.push_back(trace::analyze_rank(t));
  const bool distributed = ranks.size() > 1 || ranks.front().world > 1 || ranks.front().rank.has_value();
  Evidence e = distributed ? ranks_evidence(ranks, analyses) : process_evidence(ranks.front(), analyses.front());
  e.source = "PyTorch profiler trace";
  e.samples_known = false;
  e.device_activity = std::any_of(ranks.begin(), ranks.end(), [](const auto& t) { return !t.work.empty(); });
  e.gpu = e.device_activity;
  // Kineto's device times are CUPTI's activity records.
  e.timeline_source = e.device_activity ? trace::TimelineSource::cupti : trace::TimelineSource::host;
  if (distributed) {
    trace::CrossRank x = trace::analyze_ranks(ranks, analyses);
    e.collectives_compared = x.collectives;
    e.last_starts = x.last_starts;
    if (x.clocks_agree)
      for (size_t i = 0; i < e.timelines.size() && i < x.wait_exposed_ns.size(); ++i)
        e.timelines[i].wait_exposed_s = seconds(x.wait_exposed_ns[i]);
    else if (x.collectives > 0)
      e.notes.push_back(fmt::format("the ranks' clocks disagree (a collective ends {:.2f} ms apart on different ranks): "
                                    "the order in which they reach collectives is not judged",
                                    static_cast<double>(x.end_spread_ns) * 1e-6));
    e.cross = std::move(x);
  }
  // A window that is the kernel span, not the steps: host time before the first kernel and
  // after the last is outside it.
  for (const auto& t : e.timelines)
    if (t.window == "kernel span") {
      e.notes.push_back(fmt::format("{} records no profiler step (ProfilerStep#N): its window is the span from its "
                                    "first to its last kernel, so host time before and after them is not counted",
                                    t.who()));
      break;
    }
  // What the trace lost lowers confidence in what it says.
  for (const auto& t : ranks)
    if (auto note = sampled_steps(t)) e.notes.push_back(*note);
  for (const auto& t : e.timelines) {
    if (t.lost.share() < 0.01) continue;
    e.notes.push_back(fmt::format("{} lost events: {} of {} launch calls have no device work and {} of {} kernels and "
                                  "copies no launch call (buffers that overflowed, or a cut or sampled trace); "
                                  "what its gaps are charged to is less certain",
                                  t.who(), t.lost.launches_without_work, t.lost.launches, t.lost.work_without_launch,
                                  t.lost.work));
  }
  return e;
}

Evidence evidence_from_job(TraceJob job) {
  std::vector<trace::RankTimeline> timelines;
  reports::TraceJobInfo info;
  info.ranks = job.ranks;
  info.reason = job.reason;
  for (auto& t : job.traces) {
    info.files.push_back({t.path, job.ranks ? t.timeline.rank : std::optional<int>(),
                          t.process >= 0 ? std::optional<int64_t>(t.process) : std::nullopt, t.timeline.host});
    timelines.push_back(std::move(t.timeline));
  }
  if (!job.ranks)
    for (auto& t : timelines) t.rank.reset();  // one process: no rank to speak of
  Evidence e = evidence_from_timelines(timelines);
  e.job = std::move(info);
  e.notes.insert(e.notes.begin(), job.notes.begin(), job.notes.end());
  return e;
}

std::vector<Evidence> read_torch_traces(const std::vector<std::string>& paths, Grouping grouping) {
  std::vector<Evidence> out;
  for (auto& job : group_traces(read_kineto_traces(trace_files(paths)), grouping))
    out.push_back(evidence_from_job(std::move(job)));
  return out;
}

}  // namespace dpb::doctor
