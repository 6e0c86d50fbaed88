#include "benchmarks/simulate/link.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "engine/core/error.h"
#include "engine/core/stats.h"
#include "engine/core/text.h"
#include "reports/collectives_report.h"
#include "reports/json_view.h"

namespace dpb::sim {

// The built-in presets' files, embedded at build time (presets.cpp, generated).
const std::vector<std::pair<std::string, std::string>>& builtin_presets();

const char* algorithm_name(Algorithm a) { return a == Algorithm::ring ? "ring" : "tree"; }

namespace {

int nodes_of(int ranks, int per_node) { return (ranks + per_node - 1) / per_node; }

// The bus bandwidth a collective over `ranks` gets: within a node the intra tier, across
// nodes the slower of the two.
double bus_bandwidth(const LinkModel& l, int ranks) {
  if (nodes_of(ranks, l.gpus_per_node) <= 1) return l.intra.bus_bandwidth;
  return std::min(l.intra.bus_bandwidth, l.inter.bus_bandwidth);
}

// Latency of a ring over `ranks`: each of its steps crosses the slowest hop in it.
double ring_alpha(const LinkModel& l, int ranks) {
  return nodes_of(ranks, l.gpus_per_node) <= 1 ? l.intra.alpha_s : std::max(l.intra.alpha_s, l.inter.alpha_s);
}

const FittedAllReduce* fitted_at(const LinkModel& l, int ranks) {
  auto it = l.fitted.find(ranks);
  return it == l.fitted.end() ? nullptr : &it->second;
}

}  // namespace

double FittedAllReduce::seconds(double bytes, int ranks) const {
  const double n = ranks, share = 2.0 * (n - 1) / n, latency = 2.0 * (n - 1) * alpha_s;
  const auto line = [&](double s) { return latency + share * s / bus_bandwidth; };
  if (measured.empty()) return line(bytes);
  const auto& [s0, t0] = measured.front();
  if (bytes <= s0) return std::max(std::min(t0, latency), t0 - share * (s0 - bytes) / bus_bandwidth);
  for (size_t i = 1; i < measured.size(); ++i) {
    const auto& [sa, ta] = measured[i - 1];
    const auto& [sb, tb] = measured[i];
    if (bytes <= sb) return ta + (tb - ta) * (bytes - sa) / (sb - sa);
  }
  const auto& [sl, tl] = measured.back();
  double per_byte = share / bus_bandwidth;
  if (measured.size() >= 2) {
    const auto& [sp, tp] = measured[measured.size() - 2];
    if (tl > tp && sl > sp) per_byte = (tl - tp) / (sl - sp);
  }
  return tl + per_byte * (bytes - sl);
}

void FittedAllReduce::scale_time(double k) {
  alpha_s *= k;
  bus_bandwidth /= k;
  for (auto& [bytes, t] : measured) t *= k;
}

double LinkModel::allreduce_s(double bytes, int ranks, Algorithm* chosen) const {
  if (chosen) *chosen = Algorithm::ring;
  if (ranks <= 1) return 0;
  const double n = ranks, share = 2.0 * (n - 1) / n;
  if (const FittedAllReduce* f = fitted_at(*this, ranks)) return f->seconds(bytes, ranks);
  const double bw = bus_bandwidth(*this, ranks);
  const double ring = 2.0 * (n - 1) * ring_alpha(*this, ranks) + share * bytes / bw;
  const int nodes = nodes_of(ranks, gpus_per_node);
  if (nodes <= 1 || tree_bandwidth_share <= 0) return ring;
  const int g = std::min(ranks, gpus_per_node);
  const double tree = 2.0 * (std::ceil(std::log2(static_cast<double>(nodes))) * inter.alpha_s + (g - 1) * intra.alpha_s) +
                      share * bytes / (bw * tree_bandwidth_share);
  if (tree < ring) {
    if (chosen) *chosen = Algorithm::tree;
    return tree;
  }
  return ring;
}

double LinkModel::allreduce_on_idle_link_s(double bytes, int ranks) const {
  if (ranks <= 1) return 0;
  return on_idle_link_s(Collective::allreduce, bytes, ranks, allreduce_s(bytes, ranks));
}

double LinkModel::on_idle_link_s(Collective op, double bytes, int ranks, double otherwise) const {
  if (ranks <= 1 || bytes <= 0) return otherwise;
  const auto& fits = op == Collective::allgather        ? fitted_allgather_isolated
                     : op == Collective::reduce_scatter ? fitted_reduce_scatter_isolated
                                                        : fitted_isolated;
  const auto it = fits.find(ranks);
  if (it == fits.end()) return otherwise;
  const double s = it->second.seconds(bytes, ranks);
  return op == Collective::allreduce ? s : s / 2;  // the half-ring ones: fitted on doubled times
}

double LinkModel::allreduce_under_load_s(double bytes, int ranks) const {
  if (ranks <= 1) return 0;
  if (auto it = fitted_under_load.find(ranks); it != fitted_under_load.end()) return it->second.seconds(bytes, ranks);
  const double idle = allreduce_s(bytes, ranks);
  return contention_scope == ContentionScope::transfers ? idle * (1 + contention) : idle;
}

namespace {
// Fitted on doubled times: half the all-reduce's form.
double half_ring(const FittedAllReduce& f, double bytes, int ranks) { return f.seconds(bytes, ranks) / 2; }
}  // namespace

// Half the ring all-reduce: (n-1) steps, (n-1)/n * S.
double LinkModel::half_allreduce_s(double bytes, int ranks) const {
  if (ranks <= 1) return 0;
  const double n = ranks;
  if (const FittedAllReduce* f = fitted_at(*this, ranks)) return f->seconds(bytes, ranks) / 2;
  return (n - 1) * ring_alpha(*this, ranks) + (n - 1) / n * bytes / bus_bandwidth(*this, ranks);
}

double LinkModel::reduce_scatter_s(double bytes, int ranks) const {
  if (ranks <= 1) return 0;
  if (auto it = fitted_reduce_scatter.find(ranks); it != fitted_reduce_scatter.end())
    return half_ring(it->second, bytes, ranks);
  return half_allreduce_s(bytes, ranks);
}

double LinkModel::all_gather_s(double bytes, int ranks) const {
  if (ranks <= 1) return 0;
  if (auto it = fitted_allgather.find(ranks); it != fitted_allgather.end()) return half_ring(it->second, bytes, ranks);
  return half_allreduce_s(bytes, ranks);
}

namespace {
// A half-ring collective beside compute: its own under-load fit at `ranks` where there is
// one, else its idle time stretched as the all-reduce of the same size is under load.
double half_ring_under_load(const LinkModel& l, const std::map<int, FittedAllReduce>& loaded, double idle,
                            double bytes, int ranks) {
  if (ranks <= 1) return 0;
  if (auto it = loaded.find(ranks); it != loaded.end()) return half_ring(it->second, bytes, ranks);
  const double ar = l.allreduce_s(bytes, ranks);
  return ar > 0 ? idle * l.allreduce_under_load_s(bytes, ranks) / ar : idle;
}
}  // namespace

double LinkModel::all_gather_under_load_s(double bytes, int ranks) const {
  return half_ring_under_load(*this, fitted_allgather_under_load, all_gather_s(bytes, ranks), bytes, ranks);
}

double LinkModel::reduce_scatter_under_load_s(double bytes, int ranks) const {
  return half_ring_under_load(*this, fitted_reduce_scatter_under_load, reduce_scatter_s(bytes, ranks), bytes, ranks);
}

double LinkModel::send_s(double bytes, bool across_nodes) const {
  const Tier& t = across_nodes ? inter : intra;
  return t.alpha_s + bytes / t.bus_bandwidth;
}

namespace {
nlohmann::json stolen_json(const std::optional<StolenCompute>& s) {
  if (!s) return nullptr;
  return {{"per_message_s", s->per_message_s}, {"per_byte_s", s->per_byte_s}, {"rows", s->points}};
}
}  // namespace

nlohmann::json LinkModel::to_json() const {
  nlohmann::json j{{"name", name},
                   {"source", source},
                   {"gpus_per_node", gpus_per_node},
                   {"intra_node", {{"alpha_s", intra.alpha_s}, {"bus_bandwidth_bytes_per_s", intra.bus_bandwidth}}},
                   {"inter_node", {{"alpha_s", inter.alpha_s}, {"bus_bandwidth_bytes_per_s", inter.bus_bandwidth}}},
                   {"tree_bandwidth_share", tree_bandwidth_share},
                   {"contention", contention},
                   {"stolen_compute", stolen_json(stolen)},
                   {"stolen_compute_allgather", stolen_json(stolen_allgather)},
                   {"stolen_compute_reduce_scatter", stolen_json(stolen_reduce_scatter)},
                   {"contention_scope", contention_scope == ContentionScope::in_flight ? "in-flight" : "transfers"},
                   {"contention_source", contention_source},
                   {"kernel_contention", kernel_contention},
                   {"reducer_per_gradient_s", reducer_per_gradient_s},
                   {"hardware",
                    {{"gpu", hardware.gpu},
                     {"peak_flops", hardware.peak_flops},
                     {"memory_bandwidth_bytes_per_s", hardware.memory_bandwidth}}},
                   {"citations", citations}};
  const auto fits = [&](const char* key, const std::map<int, FittedAllReduce>& by_ranks) {
    if (by_ranks.empty()) return;
    nlohmann::json f = nlohmann::json::array();
    for (const auto& [ranks, p] : by_ranks)
      f.push_back({{"ranks", ranks},
                   {"alpha_s", p.alpha_s},
                   {"bus_bandwidth_bytes_per_s", p.bus_bandwidth},
                   {"points", p.points},
                   {"max_relative_residual", p.max_residual},
                   {"interpolated", !p.measured.empty()}});
    j[key] = f;
  };
  fits("fitted_allreduce", fitted);
  fits("fitted_allreduce_under_load", fitted_under_load);
  fits("fitted_allreduce_isolated", fitted_isolated);
  fits("fitted_allgather_isolated", fitted_allgather_isolated);
  fits("fitted_reduce_scatter_isolated", fitted_reduce_scatter_isolated);
  if (!fitted_isolated.empty() || !fitted_allgather_isolated.empty() || !fitted_reduce_scatter_isolated.empty())
    j["isolated_pause_s"] = isolated_pause_s;
  fits("fitted_allgather", fitted_allgather);
  fits("fitted_reduce_scatter", fitted_reduce_scatter);
  fits("fitted_allgather_under_load", fitted_allgather_under_load);
  fits("fitted_reduce_scatter_under_load", fitted_reduce_scatter_under_load);
  return j;
}

LinkModel preset_from_json(const nlohmann::json& j, const std::string& document) {
  const reports::JsonView v(j, document);
  LinkModel l;
  l.name = v.str("name", 128);
  l.source = "preset " + l.name;
  for (const auto& c : v.items("sources", 64)) l.citations.push_back(c.text(4096));
  DPB_CHECK(!l.citations.empty()) << document << ": a preset cites its sources (\"sources\" is empty)";
  l.gpus_per_node = static_cast<int>(v.integer("gpus_per_node", 1, 1 << 16));
  const auto tier = [&](const char* key) {
    const reports::JsonView t = v.member(key);
    Tier out;
    out.alpha_s = t.number("alpha_s", 0, 1);
    out.bus_bandwidth = t.number("bus_bandwidth_bytes_per_s", 1, 1e15);
    return out;
  };
  l.intra = tier("intra_node");
  l.inter = tier("inter_node");
  l.tree_bandwidth_share = v.number("tree_bandwidth_share", 0, 4);
  l.contention = v.number("contention", 0, 100);
  l.contention_scope = v.choice("contention_scope", {std::pair<std::string_view, LinkModel::ContentionScope>{
                                                         "in-flight", LinkModel::ContentionScope::in_flight},
                                                     {"transfers", LinkModel::ContentionScope::transfers}});
  l.contention_source = "preset " + l.name;
  l.kernel_contention = v.maybe_number("kernel_contention", 0, 100).value_or(0);
  l.reducer_per_gradient_s = v.maybe_number("reducer_per_gradient_s", 0, 1).value_or(0);
  const reports::JsonView hw = v.member("hardware");
  l.hardware.gpu = hw.str("device", 128);
  l.hardware.peak_flops = hw.number("peak_flops", 1, 1e20);
  l.hardware.memory_bandwidth = hw.number("memory_bandwidth_bytes_per_s", 1, 1e16);
  return l;
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& [name, text] : builtin_presets()) names.push_back(name);
  return names;
}

LinkModel load_preset(const std::string& name_or_path) {
  for (const auto& [name, text] : builtin_presets())
    if (name == name_or_path) return preset_from_json(nlohmann::json::parse(text), "preset '" + name + "'");
  if (name_or_path.find('/') == std::string::npos && name_or_path.find(".json") == std::string::npos) {
    std::string valid;
    for (const auto& n : preset_names()) valid += (valid.empty() ? "" : ", ") + n;
    DPB_FAIL() << "unknown hardware preset '" << escape_untrusted(name_or_path) << "' (valid: " << valid
               << ", or a preset file's path)";
  }
  const nlohmann::json j = reports::read_json_file(name_or_path, "hardware preset", size_t{1} << 20);
  return preset_from_json(j, "hardware preset '" + escape_untrusted(name_or_path) + "'");
}

FittedAllReduce fit_allreduce(const std::vector<std::pair<double, double>>& bytes_seconds, int ranks) {
  DPB_CHECK(ranks >= 2) << "an all-reduce fit needs at least 2 ranks, got " << ranks;
  DPB_CHECK(bytes_seconds.size() >= 2) << "an all-reduce fit needs at least 2 sizes, got " << bytes_seconds.size();
  const double n = ranks, steps = 2.0 * (n - 1), share = 2.0 * (n - 1) / n;
  // t = steps * alpha + share * S * beta, beta = 1 / busbw; least squares weighted by
  // 1/t so small and large sizes count alike (relative error).
  double sww = 0, swx = 0, swxx = 0, swy = 0, swxy = 0;
  for (const auto& [s, t] : bytes_seconds) {
    const double w = 1.0 / (t * t), x = share * s;
    sww += w, swx += w * x, swxx += w * x * x, swy += w * t, swxy += w * x * t;
  }
  const double det = sww * swxx - swx * swx;
  DPB_CHECK(det > 0) << "an all-reduce fit needs at least 2 different sizes";
  double beta = (sww * swxy - swx * swy) / det;
  double a = (swy - beta * swx) / sww;
  if (a < 0) {  // latency below resolution: a line through the origin
    a = 0;
    beta = swxy / swxx;
  }
  if (beta <= 0) {  // times that do not grow with size: latency alone, a vanishing byte cost
    beta = 1e-15;
    a = swy / sww;
  }
  FittedAllReduce f;
  f.alpha_s = a / steps;
  f.bus_bandwidth = 1.0 / beta;
  f.points = static_cast<int>(bytes_seconds.size());
  for (const auto& [s, t] : bytes_seconds)
    f.max_residual = std::max(f.max_residual, std::fabs(a + share * s * beta - t) / t);
  return f;
}

namespace {

struct Measured {
  int ranks = 0;
  std::vector<std::pair<double, double>> points;  // bytes, seconds
  std::vector<std::pair<double, double>> allgather, reduce_scatter;  // the same, of those collectives
  bool under_load = false;  // dpbench --load
  double slowdown_time = 0, time = 0;  // sum of slowdown x timed duration, and of duration
  // Under load, per size: the compute each collective took (its load slowdown times its
  // time), of the all-reduces, all-gathers and reduce-scatters; and the seconds that
  // slowdown was measured over (the row's timed iterations).
  std::vector<std::pair<double, double>> stolen, allgather_stolen, reduce_scatter_stolen;
  std::vector<std::pair<double, double>> stolen_window, allgather_stolen_window, reduce_scatter_stolen_window;
  // --isolated: each size's time alone after a pause of isolated_pause_s, of the
  // all-reduces, all-gathers and reduce-scatters.
  std::vector<std::pair<double, double>> isolated, allgather_isolated, reduce_scatter_isolated;
  double isolated_pause_s = 0;
  // Where it ran (dpbench: host, backend and devices); two reports from the same place are
  // repeats of one measurement. Empty (nccl-tests): never taken for a repeat.
  std::string place;
};

// Repeated measurements of one link: each size's median time over the runs that have it.
using Points = std::vector<std::pair<double, double>>;  // bytes, seconds
Points median_per_size(const std::vector<Points>& runs) {
  std::map<double, std::vector<double>> by_size;
  for (const auto& run : runs)
    for (const auto& [bytes, t] : run) by_size[bytes].push_back(t);
  Points out;
  for (const auto& [bytes, ts] : by_size) out.emplace_back(bytes, percentile(ts, 0.5));
  return out;
}

// The same runs' seconds per size, summed: how long all of them measured it for.
Points sum_per_size(const std::vector<Points>& runs) {
  std::map<double, double> by_size;
  for (const auto& run : runs)
    for (const auto& [bytes, t] : run) by_size[bytes] += t;
  return {by_size.begin(), by_size.end()};
}

// Several reports of one kind (idle, or under load) at one rank count from the same place:
// one measurement, each size its median; the load's slowdown summed over them.
Measured merged(const std::vector<Measured>& runs) {
  Measured m = runs.front();
  if (runs.size() == 1) return m;
  std::vector<Points> ar, ag, rs, ar_stolen, ag_stolen, rs_stolen, ar_window, ag_window, rs_window;
  m.slowdown_time = m.time = 0;
  for (const auto& r : runs) {
    ar.push_back(r.points);
    ag.push_back(r.allgather);
    rs.push_back(r.reduce_scatter);
    ar_stolen.push_back(r.stolen);
    ag_stolen.push_back(r.allgather_stolen);
    rs_stolen.push_back(r.reduce_scatter_stolen);
    ar_window.push_back(r.stolen_window);
    ag_window.push_back(r.allgather_stolen_window);
    rs_window.push_back(r.reduce_scatter_stolen_window);
    m.slowdown_time += r.slowdown_time;
    m.time += r.time;
  }
  m.points = median_per_size(ar);
  m.allgather = median_per_size(ag);
  m.reduce_scatter = median_per_size(rs);
  m.stolen = median_per_size(ar_stolen);
  m.allgather_stolen = median_per_size(ag_stolen);
  m.reduce_scatter_stolen = median_per_size(rs_stolen);
  m.stolen_window = sum_per_size(ar_window);
  m.allgather_stolen_window = sum_per_size(ag_window);
  m.reduce_scatter_stolen_window = sum_per_size(rs_window);
  std::vector<Points> iso, ag_iso, rs_iso;
  for (const auto& r : runs) {
    iso.push_back(r.isolated);
    ag_iso.push_back(r.allgather_isolated);
    rs_iso.push_back(r.reduce_scatter_isolated);
    if (!r.isolated.empty() || !r.allgather_isolated.empty() || !r.reduce_scatter_isolated.empty())
      m.isolated_pause_s = std::max(m.isolated_pause_s, r.isolated_pause_s);
  }
  m.isolated = median_per_size(iso);
  m.allgather_isolated = median_per_size(ag_iso);
  m.reduce_scatter_isolated = median_per_size(rs_iso);
  return m;
}

// nccl-tests' -J output (version 2): all_reduce_perf's results, out-of-place times in us.
// Each "devices" entry is one process of nthreads x ngpus ranks.
Measured from_nccl_tests(const nlohmann::json& j, const std::string& doc) {
  const reports::JsonView v(j, doc);
  Measured m;
  const auto args = v.items("args", 1 << 12);
  DPB_CHECK(!args.empty() && args.front().text(4096).find("all_reduce") != std::string::npos)
      << doc << " is nccl-tests output of '" << (args.empty() ? "" : escape_untrusted(args.front().text(4096)))
      << "'; a link is fitted on all_reduce_perf";
  const reports::JsonView config = v.member("config");
  const int64_t per_process = config.integer("nthreads", 1, 1 << 16) * config.integer("ngpus", 1, 1 << 16);
  const int64_t processes = std::max<int64_t>(1, static_cast<int64_t>(config.maybe_items("devices", 1 << 20).size()));
  DPB_CHECK(per_process * processes <= (1 << 20)) << doc << ": more than 1048576 ranks";
  m.ranks = static_cast<int>(per_process * processes);
  for (const auto& row : v.items("results", 1 << 16)) {
    const auto oop = row.maybe_member("out_of_place");
    if (!oop || oop->is_null() || !oop->has("time")) continue;
    const reports::JsonView time = oop->member("time");
    if (!time.raw().is_number()) continue;  // "nan": not measured
    const double us = time.number(0, 1e12);
    const auto wrong = oop->maybe_number("nwrong", 0, 1e18);
    if (us > 0 && (!wrong || *wrong == 0))
      m.points.emplace_back(static_cast<double>(row.integer("size", 1, int64_t{1} << 50)), us * 1e-6);
  }
  return m;
}

Measured from_dpbench(const nlohmann::json& j, const std::string& doc) {
  const reports::CollectivesReport r = reports::CollectivesReport::from_json(j, doc);
  Measured m;
  m.ranks = r.config.world_size;
  m.under_load = r.config.load != "none";
  m.place = r.env.host + " " + r.config.backend + " " + (r.config.devices == DeviceKind::cuda ? "cuda" : "cpu");
  m.isolated_pause_s = r.config.isolated_pause_us * 1e-6;
  for (const auto& row : r.results) {
    if ((row.op == "allgather" || row.op == "reduce_scatter") && row.time_us && *row.time_us > 0 && row.bytes > 0 &&
        row.wrong == 0) {
      const bool gather = row.op == "allgather";
      (gather ? m.allgather : m.reduce_scatter).emplace_back(static_cast<double>(row.bytes), *row.time_us * 1e-6);
      if (row.isolated_us && *row.isolated_us > 0)
        (gather ? m.allgather_isolated : m.reduce_scatter_isolated)
            .emplace_back(static_cast<double>(row.bytes), *row.isolated_us * 1e-6);
      if (m.under_load && row.load_slowdown) {
        (gather ? m.allgather_stolen : m.reduce_scatter_stolen)
            .emplace_back(static_cast<double>(row.bytes), *row.load_slowdown * *row.time_us * 1e-6);
        (gather ? m.allgather_stolen_window : m.reduce_scatter_stolen_window)
            .emplace_back(static_cast<double>(row.bytes), *row.time_us * 1e-6 * r.config.iters);
      }
    }
    if (row.op == "allreduce" && row.time_us && *row.time_us > 0 && row.bytes > 0 && row.wrong == 0) {
      m.points.emplace_back(static_cast<double>(row.bytes), *row.time_us * 1e-6);
      if (row.isolated_us && *row.isolated_us > 0)
        m.isolated.emplace_back(static_cast<double>(row.bytes), *row.isolated_us * 1e-6);
      if (m.under_load && row.load_slowdown) {
        const double duration = *row.time_us * 1e-6 * r.config.iters;
        m.slowdown_time += *row.load_slowdown * duration;
        m.time += duration;
        m.stolen.emplace_back(static_cast<double>(row.bytes), *row.load_slowdown * *row.time_us * 1e-6);
        m.stolen_window.emplace_back(static_cast<double>(row.bytes), duration);
      }
    }
  }
  DPB_CHECK(!m.under_load || m.time > 0)
      << doc << " was recorded with --load but no all-reduce row has its load_slowdown";
  return m;
}

// The line through a report's sizes, and the sizes themselves to interpolate between.
FittedAllReduce fit_measured(std::vector<std::pair<double, double>> points, int ranks) {
  std::sort(points.begin(), points.end());
  FittedAllReduce f = fit_allreduce(points, ranks);
  f.measured = std::move(points);
  return f;
}

// All-gather and reduce-scatter: (n-1) alpha + (n-1)/n S / busbw is the all-reduce's fit
// with every time doubled.
FittedAllReduce fit_doubled(std::vector<std::pair<double, double>> points, int ranks) {
  for (auto& [bytes, t] : points) t *= 2;
  return fit_measured(std::move(points), ranks);
}

// The compute each size's collective took, beside its time (the same size's) and the
// seconds it was measured over, to fit on.
StolenCompute stolen_of(const Points& stolen, const Points& times, const Points& windows) {
  std::map<double, double> time_of(times.begin(), times.end()), window_of(windows.begin(), windows.end());
  std::vector<std::array<double, 4>> rows;
  for (const auto& [bytes, s] : stolen) {
    auto t = time_of.find(bytes);
    auto w = window_of.find(bytes);
    if (t != time_of.end() && w != window_of.end()) rows.push_back({bytes, t->second, s, w->second});
  }
  return fit_stolen(rows);
}

}  // namespace

LinkModel fit_link(const std::vector<std::string>& paths, const LinkModel& base) {
  DPB_CHECK(!paths.empty()) << "--link needs at least one collectives report";
  LinkModel l = base;
  l.fitted.clear();
  l.fitted_under_load.clear();
  l.fitted_isolated.clear();
  l.fitted_allgather_isolated.clear();
  l.fitted_reduce_scatter_isolated.clear();
  l.isolated_pause_s = 0;
  l.fitted_allgather.clear();
  l.fitted_reduce_scatter.clear();
  l.fitted_allgather_under_load.clear();
  l.fitted_reduce_scatter_under_load.clear();
  l.stolen = l.stolen_allgather = l.stolen_reduce_scatter = std::nullopt;
  std::string sources, loaded_sources;
  // Reports of one kind at one rank count: repeats of one measurement when they come from
  // the same place (the median of each size is fitted), else which to believe is not guessed.
  struct Repeats {
    std::vector<Measured> runs;
    std::string paths;  // theirs, listed
  };
  std::map<std::pair<bool, int>, Repeats> kinds;
  for (const auto& path : paths) {
    const std::string doc = "link '" + escape_untrusted(path) + "'";
    const nlohmann::json j = reports::read_json_file(path, "collectives report", size_t{64} << 20);
    const bool nccl_tests = j.is_object() && j.contains("results") && j.contains("config") && !j.contains("schema");
    const Measured m = nccl_tests ? from_nccl_tests(j, doc) : from_dpbench(j, doc);
    // One size is enough for a repeat (a size measured alone, the size a job's bucket has);
    // the measurement its repeats make together needs two (below).
    DPB_CHECK(!m.points.empty()) << doc
                                 << " has no correct all-reduce size to fit a link on (dpbench "
                                    "--bench=collectives --ops=allreduce, or nccl-tests' all_reduce_perf -J)";
    DPB_CHECK(m.ranks >= 2) << doc << " ran on 1 rank: a link needs at least 2";
    Repeats& group = kinds[{m.under_load, m.ranks}];
    const std::vector<Measured>& same = group.runs;
    DPB_CHECK(same.empty() || (!m.place.empty() && m.place == same.front().place))
        << doc << ": two " << (m.under_load ? "reports under load" : "idle reports") << " for " << m.ranks
        << " ranks from different places (" << (same.front().place.empty() ? "nccl-tests" : same.front().place)
        << ", " << (m.place.empty() ? "nccl-tests" : m.place)
        << "): which to believe is not guessed; repeats of one link (dpbench, same host, backend and devices) are "
           "fitted on each size's median";
    group.runs.push_back(m);
    group.paths += (group.paths.empty() ? "" : ", ") + path;
    std::string& listed = m.under_load ? loaded_sources : sources;
    listed += (listed.empty() ? "" : ", ") + path;
  }
  for (const auto& [kind, group] : kinds) {
    const Measured m = merged(group.runs);
    DPB_CHECK(m.points.size() >= 2)
        << "link " << escape_untrusted(group.paths) << " (" << (m.under_load ? "under load" : "idle") << ", "
        << m.ranks << " ranks) has fewer than 2 correct all-reduce sizes to fit a link on, in all its files together "
        << "(dpbench --bench=collectives --ops=allreduce, or nccl-tests' all_reduce_perf -J)";
    if (m.under_load) {
      l.fitted_under_load[m.ranks] = fit_measured(m.points, m.ranks);
      l.contention = std::max(0.0, m.slowdown_time / m.time);  // each row's own is noisy, either way
      l.stolen = stolen_of(m.stolen, m.points, m.stolen_window);
      l.contention_scope = LinkModel::ContentionScope::transfers;
      l.contention_source = "measured: compute slowed by the all-reduces in " + group.paths;
      // FSDP's collectives, where the report has them under load too.
      if (m.allgather.size() >= 2) l.fitted_allgather_under_load[m.ranks] = fit_doubled(m.allgather, m.ranks);
      if (m.reduce_scatter.size() >= 2)
        l.fitted_reduce_scatter_under_load[m.ranks] = fit_doubled(m.reduce_scatter, m.ranks);
      if (!m.allgather_stolen.empty()) l.stolen_allgather = stolen_of(m.allgather_stolen, m.allgather, m.allgather_stolen_window);
      if (!m.reduce_scatter_stolen.empty())
        l.stolen_reduce_scatter =
            stolen_of(m.reduce_scatter_stolen, m.reduce_scatter, m.reduce_scatter_stolen_window);
      if (l.stolen_allgather || l.stolen_reduce_scatter)
        l.contention_source += " (all-gathers and reduce-scatters by their own)";
    } else {
      l.fitted[m.ranks] = fit_measured(m.points, m.ranks);
      if (m.isolated.size() >= 2) l.fitted_isolated[m.ranks] = fit_measured(m.isolated, m.ranks);
      if (m.allgather_isolated.size() >= 2)
        l.fitted_allgather_isolated[m.ranks] = fit_doubled(m.allgather_isolated, m.ranks);
      if (m.reduce_scatter_isolated.size() >= 2)
        l.fitted_reduce_scatter_isolated[m.ranks] = fit_doubled(m.reduce_scatter_isolated, m.ranks);
      l.isolated_pause_s = std::max(l.isolated_pause_s, m.isolated_pause_s);
      if (m.allgather.size() >= 2) l.fitted_allgather[m.ranks] = fit_doubled(m.allgather, m.ranks);
      if (m.reduce_scatter.size() >= 2) l.fitted_reduce_scatter[m.ranks] = fit_doubled(m.reduce_scatter, m.ranks);
    }
  }
  // A count measured only under load: its idle fit is the loaded one (an upper bound).
  for (const auto& [ranks, f] : l.fitted_under_load)
    if (!l.fitted.count(ranks)) l.fitted[ranks] = f;
  // Beyond the measured rank counts the tiers take the fit at the largest count.
  const FittedAllReduce& top = l.fitted.rbegin()->second;
  l.intra = {top.alpha_s, top.bus_bandwidth};
  if (l.gpus_per_node < l.fitted.rbegin()->first) l.gpus_per_node = l.fitted.rbegin()->first;
  l.name = base.name + " fitted";
  l.source = "fitted from " + (sources.empty() ? loaded_sources : sources) +
             (loaded_sources.empty() || sources.empty() ? "" : "; under load from " + loaded_sources);
  return l;
}

}  // namespace dpb::sim
