#include "diagnostics/dpdoctor/trace_jobs.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "engine/core/error.h"
#include "engine/core/text.h"

namespace dpb::doctor {

namespace {

bool overlap(trace::Span64 a, trace::Span64 b) { return a.first < b.second && b.first < a.second; }

std::string process_name(const KinetoTrace& t) {
  std::string s = t.process >= 0 ? fmt::format("pid {}", t.process) : "pid unknown";
  if (!t.timeline.host.empty()) s = escape_untrusted(t.timeline.host) + " " + s;
  return s;
}

// The same process: the same pid (and host, where both say theirs).
bool same_process(const KinetoTrace& a, const KinetoTrace& b) {
  if (a.process < 0 || b.process < 0) return a.path == b.path;
  const bool hosts_differ = !a.timeline.host.empty() && !b.timeline.host.empty() && a.timeline.host != b.timeline.host;
  return a.process == b.process && !hosts_differ;
}

struct Group {
  std::vector<size_t> files;  // indices into the traces
  trace::Span64 span{0, 0};
  bool distributed = false;
  int world = 1;
};

// Whether trace `t` can join group `g` as another rank.
bool joins(const Group& g, const std::vector<KinetoTrace>& traces, const KinetoTrace& t) {
  if (!overlap(g.span, t.span)) return false;
  if (t.distributed_info != g.distributed) return false;
  for (size_t i : g.files) {
    const KinetoTrace& o = traces[i];
    if (t.distributed_info ? o.timeline.rank == t.timeline.rank : same_process(o, t)) return false;
  }
  return !t.distributed_info || t.timeline.world == g.world;
}

std::string seconds_apart(trace::Span64 earlier, trace::Span64 later) {
  return fmt::format("{:.1f} s", static_cast<double>(later.first - earlier.second) * 1e-9);
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    s += (s.empty() ? "" : ", ") + (j > i + 1 ? fmt::format("{}-{}", ranks[i], ranks[j])
                                              : j == i + 1 ? fmt::format("{}, {}", ranks[i], ranks[j])
                                                           : std::to_string(ranks[i]));
    i = j;
  }
  return s;
}

// Ranks in order, each timeline's rank set (file order where the files do not say).
void order_ranks(TraceJob& job) {
  std::stable_sort(job.traces.begin(), job.traces.end(), [](const KinetoTrace& a, const KinetoTrace& b) {
    return a.timeline.rank.value_or(INT32_MAX) < b.timeline.rank.value_or(INT32_MAX);
  });
  std::set<int> taken;
  for (const auto& t : job.traces)
    if (t.timeline.rank) taken.insert(*t.timeline.rank);
  int next = 0;
  for (auto& t : job.traces) {
    if (t.timeline.rank) continue;
    while (taken.count(next)) ++next;
    t.timeline.rank = next;
    taken.insert(next);
  }
  std::stable_sort(job.traces.begin(), job.traces.end(),
                   [](const KinetoTrace& a, const KinetoTrace& b) { return *a.timeline.rank < *b.timeline.rank; });
}

// What a job of ranks leaves uncertain: ranks its world size names that no file holds.
void note_missing_ranks(TraceJob& job) {
  int world = 1;
  for (const auto& t : job.traces) world = std::max(world, t.timeline.world);
  if (world <= static_cast<int>(job.traces.size())) return;
  job.notes.push_back(fmt::format("the world size is {} but {} rank(s) were given: collectives also wait on the ranks "
                                  "not in the files, which no analysis here can see",
                                  world, job.traces.size()));
}

TraceJob ranks_job(std::vector<KinetoTrace> traces, std::string reason) {
  TraceJob job;
  job.traces = std::move(traces);
  job.ranks = job.traces.size() > 1 || job.traces.front().timeline.world > 1;
  job.reason = std::move(reason);
  if (job.ranks) {
    order_ranks(job);
    note_missing_ranks(job);
  }
  return job;
}

std::vector<TraceJob> automatic(std::vector<KinetoTrace> traces) {
  std::vector<size_t> order(traces.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return traces[a].span.first < traces[b].span.first; });
  std::vector<Group> groups;
  for (size_t i : order) {
    const KinetoTrace& t = traces[i];
    auto it = std::find_if(groups.begin(), groups.end(), [&](const Group& g) { return joins(g, traces, t); });
    if (it == groups.end()) {
      groups.push_back({{i}, t.span, t.distributed_info, t.timeline.world});
    } else {
      it->files.push_back(i);
      it->span = {std::min(it->span.first, t.span.first), std::max(it->span.second, t.span.second)};
    }
  }
  std::vector<TraceJob> jobs;
  for (size_t g = 0; g < groups.size(); ++g) {
    const Group& group = groups[g];
    const KinetoTrace& first = traces[group.files.front()];
    std::string reason;
    if (group.files.size() > 1 && group.distributed) {
      std::vector<int> ranks;
      for (size_t i : group.files) ranks.push_back(*traces[i].timeline.rank);
      std::sort(ranks.begin(), ranks.end());
      reason = fmt::format("distributedInfo: ranks {} of world size {}{}, recorded at the same time", rank_list(ranks),
                           group.world, first.backend.empty() ? "" : " (" + escape_untrusted(first.backend) + ")");
    } else if (group.files.size() > 1) {
      std::string who;
      for (size_t i : group.files) who += (who.empty() ? "" : ", ") + process_name(traces[i]);
      reason = fmt::format("no distributedInfo; {} processes ({}) recorded at the same time: taken as ranks in file "
                           "order (--grouping=runs reads them one by one)",
                           group.files.size(), who);
    } else {
      // Alone: say what else it might have been taken for.
      reason = first.distributed_info ? fmt::format("rank {} of world size {}", *first.timeline.rank, first.timeline.world)
                                      : fmt::format("one process ({})", process_name(first));
      for (size_t h = 0; h < g; ++h) {
        const KinetoTrace& earlier = traces[groups[h].files.front()];
        const bool same = first.distributed_info ? earlier.distributed_info && earlier.timeline.rank == first.timeline.rank
                                                 : same_process(earlier, first);
        if (!same) continue;
        reason += overlap(earlier.span, first.span)
                      ? "; recorded again at the same time as another file: analysed on its own"
                      : fmt::format("; another recording of the same {} ({} after an earlier one): a run of its own",
                                    first.distributed_info ? "rank" : "process", seconds_apart(earlier.span, first.span));
        break;
      }
      if (reason.find("recording") == std::string::npos && reason.find("recorded again") == std::string::npos)
        reason += traces.size() > 1 ? ", recorded at another time than the other files: a run of its own"
                                    : ", recorded alone";
    }
    std::vector<KinetoTrace> members;
    for (size_t i : group.files) members.push_back(std::move(traces[i]));
    jobs.push_back(ranks_job(std::move(members), std::move(reason)));
  }
  return jobs;
}

}  // namespace

Grouping parse_grouping(std::string_view name) {
  if (name == "auto") return Grouping::automatic;
  if (name == "job") return Grouping::one_job;
  if (name == "runs") return Grouping::separate;
  DPB_FAIL() << "unknown grouping '" << escape_untrusted(name)
             << "': valid are auto (by distributedInfo, process and time), job (every file a rank of one job), "
                "runs (every file on its own)";
}

std::vector<TraceJob> group_traces(std::vector<KinetoTrace> traces, Grouping grouping) {
  DPB_CHECK(!traces.empty()) << "no profiler trace given";
  if (grouping == Grouping::automatic) return automatic(std::move(traces));
  std::vector<TraceJob> jobs;
  if (grouping == Grouping::separate) {
    for (auto& t : traces) {
      std::vector<KinetoTrace> one;
      one.push_back(std::move(t));
      TraceJob job;
      job.traces = std::move(one);
      job.reason = "--grouping=runs: every file on its own";
      jobs.push_back(std::move(job));
    }
    return jobs;
  }
  std::set<int> seen;
  for (const auto& t : traces)
    if (t.timeline.rank) {
      DPB_CHECK(seen.insert(*t.timeline.rank).second)
          << "--grouping=job: two files say they are rank " << *t.timeline.rank << " ('"
          << escape_untrusted(t.path) << "' is one): give one file per rank, or --grouping=auto";
    }
  const size_t n = traces.size();
  jobs.push_back(ranks_job(std::move(traces), fmt::format("--grouping=job: the {} file(s) are ranks of one job", n)));
  if (n > 1) jobs.back().ranks = true;
  return jobs;
}

}  // namespace dpb::doctor
