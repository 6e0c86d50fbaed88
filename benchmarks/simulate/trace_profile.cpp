#include "benchmarks/simulate/trace_profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <unordered_map>

#include "diagnostics/dpdoctor/kineto_reader.h"
#include "engine/core/error.h"
#include "engine/core/stats.h"
#include "engine/core/text.h"
#include "engine/trace/intervals.h"
#include "reports/model.h"

namespace dpb::sim {

namespace {

using trace::Span64;
constexpr int64_t kLo = std::numeric_limits<int64_t>::min(), kHi = std::numeric_limits<int64_t>::max();
constexpr int64_t kPiece = int64_t{1} << 20;  // a bucket's gradients cut into pieces of at most 1 MiB

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

bool inside(const std::vector<Span64>& disjoint, int64_t t) {
  auto it = std::upper_bound(disjoint.begin(), disjoint.end(), Span64{t, kHi});
  if (it == disjoint.begin()) return false;
  --it;
  return t >= it->first && t < it->second;
}

// A piece of device work with the host time and thread that launched it.
struct Launched {
  const trace::DeviceWork* work = nullptr;
  int64_t at = 0;       // the launch call's begin (the work's own begin where no call is known)
  int64_t thread = -1;  // the launching thread (-1: unknown)
};

double seconds(int64_t ns) { return static_cast<double>(ns) * 1e-9; }

int main_device(const trace::RankTimeline& t) {
  std::map<int, int64_t> busy;
  for (const auto& w : t.work)
    if (w.work != trace::Work::memory) busy[w.device] += w.end_ns - w.begin_ns;
  int best = t.work.front().device;
  int64_t most = -1;
  for (const auto& [d, ns] : busy)
    if (ns > most) most = ns, best = d;
  return best;
}

// An op of autograd's backward: its evaluate_function wrapper (PyTorch 1.10 on), a
// backward node ("CudnnConvolutionBackward", "AddmmBackward0"), the op it runs
// ("aten::cudnn_convolution_backward_weight") or a gradient's accumulation.
bool backward_op(std::string_view name) {
  return starts_with(name, "autograd::engine::evaluate_function") || name.find("Backward") != std::string_view::npos ||
         name.find("_backward") != std::string_view::npos || name == "torch::autograd::AccumulateGrad";
}

// The spans of the backward on each thread: the ops of autograd's backward.
std::map<int64_t, std::vector<Span64>> backward_spans(const trace::RankTimeline& t) {
  std::map<int64_t, std::vector<Span64>> by_thread;
  for (const auto& o : t.ops)
    if (o.kind == trace::HostOpKind::op && backward_op(t.names.name(o.name)))
      by_thread[o.thread].emplace_back(o.begin_ns, o.end_ns);
  for (auto& [thread, spans] : by_thread) spans = trace::merged(std::move(spans), kLo, kHi);
  return by_thread;
}

// The step whose length is the median of the profiled steps (the lower of two middles).
size_t median_step(const std::vector<Span64>& steps) {
  std::vector<size_t> order(steps.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return steps[a].second - steps[a].first < steps[b].second - steps[b].first;
  });
  return order[(order.size() - 1) / 2];
}

// The device time of `pieces`, as disjoint spans in order.
std::vector<Span64> spans_of(const std::vector<const Launched*>& pieces) {
  std::vector<Span64> s;
  for (const auto* p : pieces) s.emplace_back(p->work->begin_ns, p->work->end_ns);
  return trace::merged(std::move(s), kLo, kHi);
}

int64_t busy(const std::vector<const Launched*>& pieces) { return trace::total_length(spans_of(pieces)); }

int64_t summed(const std::vector<const Launched*>& pieces, int64_t after, int64_t upto) {
  int64_t ns = 0;
  for (const auto* p : pieces)
    if (p->at > after && p->at <= upto) ns += p->work->end_ns - p->work->begin_ns;
  return ns;
}

}  // namespace

TraceProfile profile_from_trace(const std::string& path, int64_t unit_bytes) {
  const std::vector<std::string> files = doctor::trace_files({path});
  std::vector<doctor::KinetoTrace> traces = doctor::read_kineto_traces(files);
  size_t pick = 0;
  for (size_t i = 0; i < traces.size(); ++i)
    if (traces[i].timeline.rank == 0) {
      pick = i;
      break;
    }
  const doctor::KinetoTrace& k = traces[pick];
  const trace::RankTimeline& t = k.timeline;
  const std::string doc = "--from-trace: trace '" + escape_untrusted(k.path) + "'";
  DPB_CHECK(!t.work.empty()) << doc
                             << " has no device events (kernels, copies, sets): the simulator needs the GPU's own "
                                "times; record it with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]";
  DPB_CHECK(!t.steps.empty()) << doc
                              << " has no step markers (ProfilerStep#N): record it with torch.profiler.profile(schedule="
                                 "...) and call prof.step() once per training iteration";

  TraceProfile out;
  out.file = k.path;
  out.gpu = t.gpu_name;
  out.world = std::max(1, t.world);
  out.rank = t.rank.value_or(0);
  out.steps = static_cast<int>(t.steps.size());
  const int device = main_device(t);

  std::unordered_map<int64_t, const trace::HostCall*> by_correlation;
  for (const auto& c : t.calls)
    if (c.correlation >= 0) by_correlation.emplace(c.correlation, &c);
  const auto backward = backward_spans(t);
  const std::vector<Span64> optimizer = trace::merged(t.optimizer_steps, kLo, kHi);
  const auto in_backward = [&](int64_t thread, int64_t at) {
    const auto it = backward.find(thread);
    return it != backward.end() && inside(it->second, at);
  };
  // A thread that ran the backward, from the step's first backward op on, issues the
  // gradients' collectives (DDP's hooks, and its last bucket from the callback at the
  // backward's end).
  const auto backward_thread_after = [&](int64_t thread, int64_t at) {
    const auto it = backward.find(thread);
    return it != backward.end() && !it->second.empty() && it->second.front().first <= at && !inside(optimizer, at);
  };

  const size_t step_index = median_step(t.steps);
  const Span64 step = t.steps[step_index];
  out.measured_step_s = seconds(step.second - step.first);

  std::vector<Launched> launched;
  for (const auto& w : t.work) {
    if (w.device != device) continue;
    Launched l{&w, w.begin_ns, -1};
    if (const auto it = by_correlation.find(w.correlation); it != by_correlation.end()) {
      l.at = it->second->begin_ns;
      l.thread = it->second->thread;
    }
    if (l.at >= step.first && l.at < step.second) launched.push_back(l);
  }
  std::sort(launched.begin(), launched.end(), [](const Launched& a, const Launched& b) { return a.at < b.at; });

  std::vector<const Launched*> fwd, bwd, opt, compute, gradient_ar, other_comm;
  for (const auto& l : launched) {
    if (l.work->work == trace::Work::communication) {
      const bool gradients = trace::collective_kind(t.names.name(l.work->name)) == trace::CollectiveKind::all_reduce &&
                             backward_thread_after(l.thread, l.at);
      (gradients ? gradient_ar : other_comm).push_back(&l);
      continue;
    }
    compute.push_back(&l);
    if (inside(optimizer, l.at))
      opt.push_back(&l);
    else if (in_backward(l.thread, l.at))
      bwd.push_back(&l);
    else
      fwd.push_back(&l);
  }
  DPB_CHECK(!compute.empty()) << doc << ": its median step (" << out.measured_step_s * 1e3
                              << " ms) launched no compute on GPU " << device;
  DPB_CHECK(!bwd.empty()) << doc << ": its median step ran no backward (no op of autograd's backward launched device "
                          << "work): a trace of inference or of the forward alone cannot predict training";

  const std::vector<Span64> cu = spans_of(compute), ar = spans_of(gradient_ar), oc = spans_of(other_comm);
  const int64_t compute_ns = trace::total_length(cu);
  const int64_t ar_exposed = trace::total_length(trace::difference(ar, cu));
  const int64_t oc_exposed = trace::total_length(trace::difference(oc, trace::unite(cu, ar)));
  out.allreduce_s = seconds(trace::total_length(ar));
  out.allreduce_exposed_s = seconds(ar_exposed);
  out.other_comm_s = seconds(oc_exposed);

  // Phases as measured, scaled to the device's busy time (phases that overlap on two
  // streams count once).
  const double f_ns = static_cast<double>(busy(fwd)), b_ns = static_cast<double>(busy(bwd)),
               o_ns = static_cast<double>(busy(opt));
  const double scale = f_ns + b_ns + o_ns > 0 ? static_cast<double>(compute_ns) / (f_ns + b_ns + o_ns) : 0;
  const double forward_s = f_ns * 1e-9 * scale, backward_s = b_ns * 1e-9 * scale;

  StepProfile& p = out.profile;
  // The job's name: the folder given (a job's traces), else the file's.
  std::filesystem::path given = std::filesystem::path(path).lexically_normal();
  if (given.filename().empty()) given = given.parent_path();
  p.model = (std::filesystem::is_directory(given) ? given : std::filesystem::path(k.path)).filename().string();
  p.source = "trace";
  p.optimizer_s = o_ns * 1e-9 * scale;
  p.other_s = std::max(0.0, out.measured_step_s - seconds(compute_ns) - seconds(ar_exposed) - seconds(oc_exposed));

  // When each group of gradients is ready, and how many bytes: the backward's
  // all-reduces, else AccumulateGrad's shapes.
  struct Ready {
    int64_t at = 0;
    int64_t bytes = 0;
  };
  std::vector<Ready> ready;
  int64_t unsized = 0;
  std::vector<const trace::HostCollective*> grad_calls;
  for (const auto& c : t.collectives)
    if (c.kind == trace::CollectiveKind::all_reduce && c.begin_ns >= step.first && c.begin_ns < step.second &&
        backward_thread_after(c.thread, c.begin_ns)) {
      grad_calls.push_back(&c);
      if (c.bytes > 0)
        ready.push_back({c.begin_ns, c.bytes});
      else
        ++unsized;
    }
  if (!grad_calls.empty()) {
    DPB_CHECK(unsized == 0) << doc << ": " << unsized << " of the backward's " << grad_calls.size()
                            << " all-reduces carry no size; record the trace with record_shapes=True";
    out.gradients_from = "the backward's all-reduces";
    // Each timed all-reduce kernel with the size of the host call that launched it.
    for (const auto* c : grad_calls)
      for (const auto* l : gradient_ar)
        if (l->thread == c->thread && l->at >= c->begin_ns && l->at <= c->end_ns) {
          out.allreduce_samples.emplace_back(static_cast<double>(c->bytes),
                                             seconds(l->work->end_ns - l->work->begin_ns));
          break;
        }
  } else {
    for (const auto& g : t.gradients)
      if (g.begin_ns >= step.first && g.begin_ns < step.second) ready.push_back({g.begin_ns, g.bytes});
    DPB_CHECK(!ready.empty()) << doc
                              << " shows no gradient sizes: its backward issued no all-reduce with a size and recorded "
                                 "no AccumulateGrad shapes; record it with record_shapes=True";
    out.gradients_from = "AccumulateGrad's shapes";
  }
  std::sort(ready.begin(), ready.end(), [](const Ready& a, const Ready& b) { return a.at < b.at; });

  // The backward's compute between one group's readiness and the next, scaled to the
  // backward's busy time; cut into layers in backward order, then reversed.
  std::vector<double> segment;
  int64_t prev = kLo, total = 0;
  for (const auto& r : ready) {
    segment.push_back(static_cast<double>(summed(bwd, prev, r.at)));
    total += static_cast<int64_t>(segment.back());
    prev = r.at;
  }
  const double tail = static_cast<double>(summed(bwd, prev, kHi));
  const double sum = static_cast<double>(total) + tail;
  const double to_s = sum > 0 ? backward_s / sum : 0;
  std::vector<LayerCost> layers;  // backward order
  if (unit_bytes <= 0) {
    // DDP: each group cut into pieces of at most 1 MiB, its backward shared evenly.
    for (size_t i = 0; i < ready.size(); ++i) {
      const int64_t pieces = (ready[i].bytes + kPiece - 1) / kPiece;
      for (int64_t j = 0; j < pieces; ++j) {
        LayerCost c;
        c.name = fmt::format("gradients {}.{}", i, j);
        c.backward_s = segment[i] * to_s / static_cast<double>(pieces);
        c.params.push_back({c.name, std::min(kPiece, ready[i].bytes - j * kPiece), ""});
        layers.push_back(std::move(c));
      }
    }
  } else {
    // FSDP: consecutive groups joined into units of up to unit_bytes (a size-based wrap
    // policy); a larger group is a unit of its own.
    for (size_t i = 0; i < ready.size(); ++i) {
      if (layers.empty() || layers.back().params.front().bytes + ready[i].bytes > unit_bytes) {
        LayerCost c;
        c.name = fmt::format("unit {}", layers.size());
        c.params.push_back({c.name, 0, ""});
        layers.push_back(std::move(c));
      }
      layers.back().backward_s += segment[i] * to_s;
      layers.back().params.front().bytes += ready[i].bytes;
    }
  }
  LayerCost rest;
  rest.name = "backward after the last gradient";
  rest.backward_s = sum > 0 ? tail * to_s : backward_s;
  layers.push_back(std::move(rest));
  std::reverse(layers.begin(), layers.end());
  // The forward in proportion to each layer's backward (or evenly where none was timed).
  double bw_total = 0;
  for (const auto& c : layers) bw_total += c.backward_s;
  for (auto& c : layers)
    c.forward_s = bw_total > 0 ? forward_s * c.backward_s / bw_total : forward_s / static_cast<double>(layers.size());
  p.layers = std::move(layers);

  std::vector<double> steps;
  for (const auto& s : t.steps) steps.push_back(seconds(s.second - s.first));
  p.step_cv = summarize(steps).cv;
  p.rank_lag = reports::rank_lags(steps);

  int64_t oc_bytes = 0;
  bool sized = true, any = false;
  for (const auto& c : t.collectives)
    if (c.begin_ns >= step.first && c.begin_ns < step.second &&
        std::find(grad_calls.begin(), grad_calls.end(), &c) == grad_calls.end()) {
      any = true;
      if (c.bytes < 0) sized = false;
      else oc_bytes += c.bytes;
    }
  out.other_comm_bytes = any && sized ? oc_bytes : -1;

  p.evidence = fmt::format(
      "{} step {} of {} ({:.2f} ms; rank {} of {}{}), GPU {}: forward {:.2f} ms, backward {:.2f} ms, optimizer {:.2f} "
      "ms, host and gaps {:.2f} ms; {:.1f} MiB of gradients from {}",
      escape_untrusted(std::filesystem::path(k.path).filename().string()), step_index + 1, t.steps.size(),
      out.measured_step_s * 1e3, out.rank, out.world, out.gpu.empty() ? "" : ", " + escape_untrusted(out.gpu), device, forward_s * 1e3, backward_s * 1e3,
      p.optimizer_s * 1e3, p.other_s * 1e3, static_cast<double>(p.gradient_bytes()) / (1 << 20), out.gradients_from);
  return out;
}

LinkModel calibrate_link(const LinkModel& link, const TraceProfile& t, double* factor) {
  *factor = 1;
  if (t.world <= 1 || t.allreduce_samples.empty()) return link;
  double measured = 0, modelled = 0;
  for (const auto& [bytes, s] : t.allreduce_samples) {
    measured += s;
    modelled += link.allreduce_s(bytes, t.world);
  }
  if (!(measured > 0 && modelled > 0)) return link;
  const double k = measured / modelled;
  LinkModel l = link;
  for (Tier* tier : {&l.intra, &l.inter}) {
    tier->alpha_s *= k;
    tier->bus_bandwidth /= k;
  }
  for (auto* fits : {&l.fitted, &l.fitted_under_load, &l.fitted_isolated, &l.fitted_allgather,
                     &l.fitted_reduce_scatter, &l.fitted_allgather_under_load, &l.fitted_reduce_scatter_under_load,
                     &l.fitted_allgather_isolated, &l.fitted_reduce_scatter_isolated})
    for (auto& [n, f] : *fits) f.scale_time(k);
  l.source += fmt::format("; scaled x{:.2f} so that the trace's {} all-reduce(s) at {} ranks take what they measured "
                          "({:.3f} ms, waits for late ranks included)",
                          k, t.allreduce_samples.size(), t.world, measured * 1e3);
  *factor = k;
  return l;
}

double other_comm_at(const TraceProfile& t, const LinkModel& link, int ranks) {
  if (ranks <= 1 || t.world <= 1 || t.other_comm_s <= 0) return 0;
  if (ranks == t.world) return t.other_comm_s;
  // An exchange of every rank with every other (all-to-all, send/recv: NCCL runs the pairs
  // side by side): a latency of the slowest tier it spans, and (N-1)/N of its bytes at
  // that tier's bandwidth. Without the bytes, the traffic's (N-1)/N alone.
  const auto share = [](int n) { return static_cast<double>(n - 1) / n; };
  const auto cost = [&](int n) {
    const Tier& tier = n > link.gpus_per_node ? link.inter : link.intra;
    const double bw = tier.bus_bandwidth > 0 ? tier.bus_bandwidth : 1;
    return tier.alpha_s + share(n) * static_cast<double>(t.other_comm_bytes) / bw;
  };
  if (t.other_comm_bytes > 0 && cost(t.world) > 0) return t.other_comm_s * cost(ranks) / cost(t.world);
  return t.other_comm_s * share(ranks) / share(t.world);
}

std::string preset_for_gpu(const std::string& gpu) {
  const std::string g = ascii_lower(gpu);
  if (g.find("v100") != std::string::npos) return "dgx1-v100";
  if (g.find("h100") != std::string::npos || g.find("h200") != std::string::npos ||
      g.find("h800") != std::string::npos)
    return "dgx-h100";
  if (g.find("a100") != std::string::npos) return "pcie-a100-25gbe";
  return "";
}

bool is_dpbench_report(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  char first = 0;
  while (in.get(first) && std::isspace(static_cast<unsigned char>(first))) {
  }
  if (first != '{') return false;  // gzip, an event array, or no JSON at all
  // A profiler trace names its events or its schema version near the top: not a report,
  // and not worth parsing whole here.
  std::string head(64 << 10, '\0');
  in.seekg(0);
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(in.gcount()));
  if (head.find("\"traceEvents\"") != std::string::npos || head.find("\"schemaVersion\"") != std::string::npos)
    return false;
  in.clear();
  in.seekg(0);
  try {
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/true);
    return j.is_object() && j.contains("schema") && j["schema"] == reports::kReportSchema;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

}  // namespace dpb::sim
