#include "reports/findings.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

#include "reports/json_view.h"
#include "reports/model_json_util.h"
#include "reports/schemas.h"

namespace dpb::reports {

using json_util::kBig;
using json_util::num;

const char* severity_name(Severity s) {
  switch (s) {
    case Severity::info:
      return "info";
    case Severity::warning:
      return "warning";
    case Severity::error:
      return "error";
  }
  return "info";
}

namespace {

nlohmann::json rank_json(const std::optional<int>& rank) { return rank ? nlohmann::json(*rank) : nlohmann::json(); }

nlohmann::json budget_json(const RankBudget& b) {
  nlohmann::json explained = nlohmann::json::array();
  for (const auto& [id, share] : b.explained) explained.push_back({{"finding", id}, {"share", share}});
  nlohmann::json j = {{"rank", rank_json(b.rank)},
                      {"device", b.device},
                      {"window_s", b.window_s},
                      {"idle_share", b.idle_share},
                      {"exposed_comm_share", b.exposed_comm_share},
                      {"explained", explained},
                      {"unexplained_share", b.unexplained_share}};
  if (!b.window.empty()) j["window"] = b.window;
  if (!b.idle_causes.empty()) {
    j["idle_causes"] = nlohmann::json::object();
    for (const auto& [cause, share] : b.idle_causes) j["idle_causes"][cause] = share;
  }
  return j;
}

RankBudget budget_from_json(const JsonView& j) {
  RankBudget b;
  if (auto r = j.maybe_integer("rank", 0, 1 << 20)) b.rank = static_cast<int>(*r);
  b.device = j.str("device", 256);
  b.window_s = j.number("window_s", 0, kBig);
  b.idle_share = j.number("idle_share", 0, 1);
  b.exposed_comm_share = j.number("exposed_comm_share", 0, 1);
  for (const auto& e : j.items("explained", 64)) b.explained.emplace_back(e.str("finding", 128), e.number("share", 0, 1));
  b.unexplained_share = j.number("unexplained_share", 0, 1);
  b.window = j.maybe_str("window", 64).value_or("");
  if (auto c = j.maybe_member("idle_causes")) {
    c->expect_object();
    for (auto it = c->raw().begin(); it != c->raw().end(); ++it)
      b.idle_causes.emplace_back(it.key().substr(0, 64), c->number(it.key(), 0, 1));
  }
  return b;
}

}  // namespace

std::string Prediction::summary() const {
  if (!step_time_s || !measured_step_time_s) return {};
  std::string scaling;
  if (scaling_efficiency && inputs.contains("scaling_efficiency") && inputs["scaling_efficiency"].is_number())
    scaling = fmt::format(", E(N) {:.2f} -> {:.2f}", inputs["scaling_efficiency"].get<double>(), *scaling_efficiency);
  return fmt::format("step {:.1f} ms -> {:.1f} ms ({:+.0f}%){}, by {}", 1e3 * *measured_step_time_s, 1e3 * *step_time_s,
                     -100 * gain_share.value_or(0), scaling, method.substr(0, method.find(':')));
}

nlohmann::json Prediction::to_json() const {
  auto opt = [](const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  return {{"step_time_s", opt(step_time_s)},
          {"measured_step_time_s", opt(measured_step_time_s)},
          {"gain_share", opt(gain_share)},
          {"scaling_efficiency", opt(scaling_efficiency)},
          {"method", method},
          {"reason", reason.empty() ? nlohmann::json(nullptr) : nlohmann::json(reason)},
          {"inputs", inputs}};
}

Prediction Prediction::from_json(const JsonView& j) {
  Prediction p;
  p.step_time_s = j.maybe_number("step_time_s", 0, 1e9);
  p.measured_step_time_s = j.maybe_number("measured_step_time_s", 0, 1e9);
  p.gain_share = j.maybe_number("gain_share", -1e9, 1);
  p.scaling_efficiency = j.maybe_number("scaling_efficiency", 0, 1e3);
  p.method = j.str("method", 1024);
  if (auto r = j.maybe_str("reason", 4096)) p.reason = *r;
  if (j.has("inputs")) {
    const JsonView inputs = j.member("inputs");
    inputs.expect_object();
    p.inputs = inputs.raw();
  }
  return p;
}

std::string Proof::summary() const {
  const std::string fix = fmt::format("{}", fmt::join(flags, " "));
  if (!measured_gain_share || !original_median_s || !fixed_median_s)
    return fmt::format("{}{}not run: {}", fix, fix.empty() ? "" : ": ", reason);
  std::string predicted = predicted_gain_share
                              ? fmt::format(" against {:+.0f}% predicted", -100 * *predicted_gain_share)
                              : std::string(" (no prediction)");
  return fmt::format("{}: {:.2f} ms -> {:.2f} ms, measured {:+.0f}% +- {:.0f}% over {} pairs{}: {}", fix,
                     1e3 * *original_median_s, 1e3 * *fixed_median_s, -100 * *measured_gain_share,
                     100 * noise_share.value_or(0), pairs, predicted, verdict);
}

nlohmann::json Proof::to_json() const {
  auto opt = [](const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  return {{"flags", flags},
          {"reason", reason.empty() ? nlohmann::json(nullptr) : nlohmann::json(reason)},
          {"pairs", pairs},
          {"original_step_s", original_s},
          {"fixed_step_s", fixed_s},
          {"original_median_s", opt(original_median_s)},
          {"fixed_median_s", opt(fixed_median_s)},
          {"measured_gain_share", opt(measured_gain_share)},
          {"noise_share", opt(noise_share)},
          {"predicted_gain_share", opt(predicted_gain_share)},
          {"prediction_method", prediction_method},
          {"prediction_error", opt(prediction_error)},
          {"verdict", verdict}};
}

Proof Proof::from_json(const JsonView& j) {
  Proof p;
  for (const auto& f : j.items("flags", 64)) p.flags.push_back(f.text(256));
  if (auto r = j.maybe_str("reason", 4096)) p.reason = *r;
  p.pairs = static_cast<int>(j.integer("pairs", 0, 1000));
  for (const auto& v : j.items("original_step_s", 2000)) p.original_s.push_back(v.number(0, 1e9));
  for (const auto& v : j.items("fixed_step_s", 2000)) p.fixed_s.push_back(v.number(0, 1e9));
  p.original_median_s = j.maybe_number("original_median_s", 0, 1e9);
  p.fixed_median_s = j.maybe_number("fixed_median_s", 0, 1e9);
  p.measured_gain_share = j.maybe_number("measured_gain_share", -1e9, 1);
  p.noise_share = j.maybe_number("noise_share", 0, 1e9);
  p.predicted_gain_share = j.maybe_number("predicted_gain_share", -1e9, 1);
  p.prediction_method = j.str("prediction_method", 4096);
  p.prediction_error = j.maybe_number("prediction_error", -1e9, 1e9);
  p.verdict = j.str("verdict", 256);
  return p;
}

nlohmann::json Finding::to_json() const {
  nlohmann::json j = {{"id", id},
                      {"severity", severity_name(severity)},
                      {"title", title},
                      {"evidence", evidence},
                      {"explanation", explanation},
                      {"fix", fix}};
  if (!explains.empty()) {
    j["explains"] = nlohmann::json::array();
    for (const auto& c : explains) j["explains"].push_back({{"rank", rank_json(c.rank)}, {"device", c.device}, {"share", c.share}});
  }
  if (predicted) j["predicted"] = predicted->to_json();
  if (proof) j["proof"] = proof->to_json();
  return j;
}

Finding Finding::from_json(const JsonView& j) {
  Finding f;
  f.id = j.str("id", 128);
  f.severity = j.choice<Severity>("severity",
                                  {{"info", Severity::info}, {"warning", Severity::warning}, {"error", Severity::error}});
  f.title = j.str("title");
  const JsonView evidence = j.member("evidence");
  evidence.expect_object();
  f.evidence = evidence.raw();
  f.explanation = j.str("explanation");
  f.fix = j.str("fix");
  for (const auto& c : j.maybe_items("explains", 1 << 20)) {
    Claim claim;
    if (auto r = c.maybe_integer("rank", 0, 1 << 20)) claim.rank = static_cast<int>(*r);
    claim.device = c.str("device", 256);
    claim.share = c.number("share", 0, 1);
    f.explains.push_back(claim);
  }
  if (j.has("predicted")) f.predicted = Prediction::from_json(j.member("predicted"));
  if (j.has("proof")) f.proof = Proof::from_json(j.member("proof"));
  return f;
}

nlohmann::json breakdown_json(const trace::Breakdown& b) {
  return {{"rank", b.rank ? nlohmann::json(*b.rank) : nlohmann::json(nullptr)},
          {"host", b.host},
          {"device", b.device},
          {"window_s", num(b.window_s)},
          {"idle_share", num(b.idle_share)},
          {"compute_share", num(b.compute_share)},
          {"comm_share", num(b.comm_share)},
          {"memory_share", num(b.memory_share)},
          {"overlap", num(b.overlap)},
          {"idle_breakdown",
           {{"host_wait", num(b.idle_breakdown.host_wait)},
            {"kernel_wait", num(b.idle_breakdown.kernel_wait)},
            {"other", num(b.idle_breakdown.other)}}}};
}

trace::Breakdown breakdown_from_json(const JsonView& j) {
  trace::Breakdown b;
  if (auto r = j.maybe_integer("rank", 0, 1 << 20)) b.rank = static_cast<int>(*r);
  b.host = j.str("host", 256);
  b.device = j.str("device", 256);
  b.window_s = j.number("window_s", 0, kBig);
  b.idle_share = j.maybe_number("idle_share", 0, 1);
  b.compute_share = j.maybe_number("compute_share", 0, 1);
  b.comm_share = j.maybe_number("comm_share", 0, 1);
  b.memory_share = j.maybe_number("memory_share", 0, 1);
  b.overlap = j.maybe_number("overlap", 0, 1);
  if (auto ib = j.maybe_member("idle_breakdown")) {
    b.idle_breakdown.host_wait = ib->maybe_number("host_wait", 0, 1);
    b.idle_breakdown.kernel_wait = ib->maybe_number("kernel_wait", 0, 1);
    b.idle_breakdown.other = ib->maybe_number("other", 0, 1);
  }
  return b;
}

nlohmann::json DiagnosisReport::to_json() const {
  const auto& s = summary;
  nlohmann::json devices = nlohmann::json::array();
  for (const auto& d : s.devices)
    devices.push_back({{"id", d.id}, {"busy_fraction", d.busy_fraction}, {"samples", d.samples}});
  nlohmann::json sj = {{"source", s.source},
                       {"timeline_source", s.timeline_source},
                       {"mode", parallel_mode_name(s.mode)},
                       {"model", s.model},
                       {"world_size", s.world_size},
                       {"global_batch", s.global_batch ? nlohmann::json(*s.global_batch) : nlohmann::json()},
                       {"throughput_samples_per_s", num(s.throughput_samples_per_s)},
                       {"step_time_s", s.step_time_s},
                       {"data_wait_share", s.data_wait_share},
                       {"devices", devices}};
  if (s.overlap_ratio) sj["overlap_ratio"] = *s.overlap_ratio;
  if (!s.parallelism.empty()) sj["parallelism"] = {{"kind", s.parallelism}, {"evidence", s.parallelism_evidence}};
  if (s.bubble_measured) sj["pipeline_bubble"] = {{"measured", *s.bubble_measured}, {"theory", num(s.bubble_theory)}};
  nlohmann::json rj = nlohmann::json::array();
  for (const auto& b : ranks) rj.push_back(breakdown_json(b));
  nlohmann::json kj = nlohmann::json::array();
  for (const auto& b : ranks_kernel_span) kj.push_back(breakdown_json(b));
  nlohmann::json fj = nlohmann::json::array();
  for (const auto& f : findings) fj.push_back(f.to_json());
  nlohmann::json bj = nlohmann::json::array();
  for (const auto& b : budget) bj.push_back(budget_json(b));
  nlohmann::json j = {{"schema", kFindingsSchema},
                      {"verdict", healthy ? "healthy" : "problems"},
                      {"primary", primary.empty() ? nlohmann::json() : nlohmann::json(primary)},
                      {"summary", sj},
                      {"ranks", rj},
                      {"budget", bj},
                      {"findings", fj},
                      {"notes", notes}};
  if (!kj.empty()) j["ranks_kernel_span"] = kj;
  if (job) {
    nlohmann::json files = nlohmann::json::array();
    for (const auto& f : job->files)
      files.push_back({{"path", f.path}, {"rank", rank_json(f.rank)}, {"pid", f.pid ? nlohmann::json(*f.pid) : nlohmann::json()},
                       {"host", f.host}});
    j["job"] = {{"kind", job->ranks ? "ranks of one job" : "one run"}, {"reason", job->reason}, {"files", files}};
  }
  return j;
}

nlohmann::json jobs_json(const std::vector<DiagnosisReport>& jobs) {
  nlohmann::json all = nlohmann::json::array();
  for (const auto& d : jobs) all.push_back(d.to_json());
  return {{"schema", kJobsSchema}, {"jobs", all}};
}

DiagnosisReport DiagnosisReport::from_json(const nlohmann::json& j, const std::string& document) {
  check_schema(findings_schema(), j, document);
  const JsonView root(j, document);
  DiagnosisReport d;
  d.healthy = root.str("verdict", 16) == "healthy";
  const JsonView s = root.member("summary");
  auto& m = d.summary;
  m.source = s.str("source", 64);
  m.timeline_source = s.maybe_str("timeline_source", 32).value_or("host");
  m.mode = s.choice("mode", parallel_mode_choices());
  m.model = s.str("model", 256);
  m.world_size = static_cast<int>(s.integer("world_size", 1, 1 << 20));
  m.global_batch = s.maybe_integer("global_batch", 1, int64_t{1} << 40);
  m.throughput_samples_per_s = s.maybe_number("throughput_samples_per_s", 0, kBig);
  m.step_time_s = s.number("step_time_s", 0, kBig);
  m.data_wait_share = s.number("data_wait_share", 0, 1);
  for (const auto& dv : s.items("devices", 1 << 20))
    m.devices.push_back({dv.str("id", 256), dv.number("busy_fraction", 0, 1), dv.integer("samples", 0, int64_t{1} << 50)});
  m.overlap_ratio = s.maybe_number("overlap_ratio", 0, 1);
  if (auto p = s.maybe_member("parallelism")) {
    m.parallelism = p->str("kind", 128);
    m.parallelism_evidence = p->str("evidence", 1024);
  }
  if (auto b = s.maybe_member("pipeline_bubble")) {
    m.bubble_measured = b->maybe_number("measured", 0, 1);
    m.bubble_theory = b->maybe_number("theory", 0, 1);
  }
  for (const auto& r : root.maybe_items("ranks", 1 << 20)) d.ranks.push_back(breakdown_from_json(r));
  for (const auto& r : root.maybe_items("ranks_kernel_span", 1 << 20)) d.ranks_kernel_span.push_back(breakdown_from_json(r));
  for (const auto& f : root.items("findings", 1 << 16)) d.findings.push_back(Finding::from_json(f));
  d.primary = root.maybe_str("primary", 128).value_or("");
  for (const auto& b : root.maybe_items("budget", 1 << 20)) d.budget.push_back(budget_from_json(b));
  for (const auto& n : root.maybe_items("notes", 1 << 10)) d.notes.push_back(n.text());
  if (auto job = root.maybe_member("job")) {
    TraceJobInfo info;
    info.ranks = job->str("kind", 32) == "ranks of one job";
    info.reason = job->str("reason");
    for (const auto& f : job->items("files", 1 << 20)) {
      TraceFileInfo file;
      file.path = f.str("path", 4096);
      if (auto r = f.maybe_integer("rank", 0, 1 << 20)) file.rank = static_cast<int>(*r);
      file.pid = f.maybe_integer("pid", INT64_MIN, INT64_MAX);
      file.host = f.maybe_str("host", 256).value_or("");
      info.files.push_back(file);
    }
    d.job = info;
  }
  return d;
}

}  // namespace dpb::reports
