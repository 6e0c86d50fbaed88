#include "benchmarks/dpbench/prove.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>

#include "diagnostics/dpdoctor/doctor.h"
#include "engine/core/error.h"
#include "engine/core/log.h"
#include "engine/core/process.h"
#include "engine/core/stats.h"
#include "reports/report.h"

namespace dpb::bench {

namespace {

// A proof's gain must land within this share of the prediction to hold as predicted, and
// be at least kFloor (a smaller one is within what a shared machine drifts between runs).
constexpr double kWithin = 0.25;
constexpr double kFloor = 0.02;

std::optional<double> evidence_number(const reports::Finding& f, const char* key) {
  if (!f.evidence.contains(key) || !f.evidence[key].is_number()) return std::nullopt;
  return f.evidence[key].get<double>();
}

// The finding's own predicted gain, and how it was made.
Remedy predicted_by_finding(const reports::Finding& f, std::vector<std::string> flags) {
  Remedy r;
  r.flags = std::move(flags);
  if (f.predicted && f.predicted->gain_share) {
    r.predicted_gain = f.predicted->gain_share;
    r.method = f.predicted->method;
  } else {
    r.method = f.predicted && !f.predicted->reason.empty() ? "not predicted: " + f.predicted->reason : "not predicted";
  }
  return r;
}

Remedy not_timed(std::vector<std::string> flags, std::string why) {
  Remedy r;
  r.flags = std::move(flags);
  r.not_run = std::move(why);
  return r;
}

// A run's time per step: its median step plus its mean wait for data, as one iteration
// of the training loop takes.
double time_per_step(const reports::RunMetrics& run) {
  DPB_CHECK(run.step_time_s.median) << "the run's report has no median step time";
  const double wait = run.data_wait_share.value_or(0);
  DPB_CHECK(wait < 1) << "the run's report says it only waited for data";
  return *run.step_time_s.median / (1 - wait);
}

// Runs this program with `args` and a report into `json`; stdout shown or discarded.
reports::RunReport run_child(const std::string& exe, std::vector<std::string> args, const std::string& json,
                             bool shown) {
  args.push_back("--progress=none");
  args.push_back("--json=" + json);
  proc::Spec spec;
  spec.argv = {exe};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.out = shown ? proc::Output::inherit : proc::Output::discard;
  std::cout.flush();
  std::cerr.flush();
  const int status = proc::Child(spec).wait();
  DPB_CHECK(proc::exit_code(status) == 0) << "dpbench " << fmt::format("{}", fmt::join(args, " ")) << " "
                                          << proc::describe_exit(status);
  return reports::RunReport::read(json);
}

}  // namespace

Remedy remedy_for(const reports::Finding& f, const reports::RunReport& report) {
  const auto& cfg = report.config;
  const std::string& id = f.id;
  if (id == "input-bound") {
    int workers = std::max(1, cfg.workers * 2);
    if (f.predicted && f.predicted->inputs.contains("workers_needed"))
      workers = f.predicted->inputs["workers_needed"].get<int>();
    return predicted_by_finding(f, {fmt::format("--workers={}", workers)});
  }
  if (id == "exposed-allgather") {
    if (evidence_number(f, "prefetch").value_or(1) == 0) return predicted_by_finding(f, {"--fsdp-prefetch=1"});
    return not_timed({}, "prefetch is on already: the fix (coarser units, a larger batch, a faster link) is no flag "
                         "of this run");
  }
  if (id == "exposed-communication") {
    if (f.evidence.contains("simulated_fix") && f.evidence["simulated_fix"].is_object()) {
      const auto& s = f.evidence["simulated_fix"];
      const double gain = s.value("gain", 0.0);
      if (s.value("reproduces_measured_step", false) && gain > 0.02 && s.contains("best_bucket_mb")) {
        Remedy r;
        r.flags = {fmt::format("--bucket-mb={:g}", s["best_bucket_mb"].get<double>())};
        r.predicted_gain = gain;
        r.method = "simulation: dpbench --simulate on this run's own layer times and link, at that bucket size";
        return r;
      }
      return not_timed({}, "the simulation on this run finds no bucket size that gains more than 2% (its evidence "
                           "says what limits the step); the other fixes (a faster link, more work per exchange) "
                           "change the machine or the batch per update");
    }
    return not_timed({}, "no bucket size was simulated for this run (a run with one rank's profile and its "
                         "bucket all-reduces is needed): the fix is not priced as a flag");
  }
  if (id == "naive-model-parallel")
    return predicted_by_finding(f, {"--schedule=1f1b", "--micro-batches=4"});
  if (id == "pipeline-bubble")
    return predicted_by_finding(f, {fmt::format("--micro-batches={}", 2 * std::max(1, cfg.micro_batches.value_or(4)))});
  if (id == "forward-bypasses-scatter") return predicted_by_finding(f, {"--dp-forward=scatter"});
  if (id == "non-tensor-input-replicated") return predicted_by_finding(f, {"--dp-input=tensor"});
  if (id == "ranks-share-device") return predicted_by_finding(f, {"--device-map=spread"});
  if (id == "missing-distributed-sampler")
    return not_timed({"--sampler=distributed"}, "its fix changes which samples each rank learns from, not the step");
  if (id == "lr-not-scaled")
    return not_timed({"--lr-scale=linear"}, "its fix changes what is learned, not the step");
  if (id == "small-batch-batchnorm")
    return not_timed({"--sync-bn"}, "its fix changes what is learned (the batch statistics), not the step");
  if (id == "fsdp-unit-too-large") return not_timed({}, "its fix saves memory, not step time");
  if (id == "straggler-rank")
    return not_timed({}, "the fix is on the late rank's machine or host work, not a flag of this run");
  return not_timed({}, "its fix is no flag of this run (the fix says what to change)");
}

std::vector<std::string> with_options(std::vector<std::string> args, const std::vector<std::string>& set) {
  std::vector<std::string> names;
  for (const auto& s : set) names.push_back(s.substr(0, s.find('=')));
  args.insert(args.begin(), "");  // without_options() skips the program's name
  std::vector<std::string> valued, flags;
  for (const auto& n : names) {
    // --name=v and --name v both go; a bare --name (a flag) too.
    bool bare_flag = false;
    for (size_t i = 1; i < args.size(); ++i)
      if (args[i] == n && (i + 1 == args.size() || args[i + 1].rfind("--", 0) == 0)) bare_flag = true;
    (bare_flag ? flags : valued).push_back(n);
  }
  std::vector<std::string> out = without_options(args, valued, flags);
  out.insert(out.end(), set.begin(), set.end());
  return out;
}

void judge(reports::Proof& p) {
  const size_t n = std::min(p.original_s.size(), p.fixed_s.size());
  p.pairs = static_cast<int>(n);
  if (n == 0) {
    p.verdict = "not run";
    return;
  }
  std::vector<double> gains;
  for (size_t i = 0; i < n; ++i) gains.push_back(p.original_s[i] > 0 ? 1 - p.fixed_s[i] / p.original_s[i] : 0.0);
  p.original_median_s = percentile(p.original_s, 0.5);
  p.fixed_median_s = percentile(p.fixed_s, 0.5);
  p.measured_gain_share = percentile(gains, 0.5);
  const auto [lo, hi] = std::minmax_element(gains.begin(), gains.end());
  p.noise_share = (*hi - *lo) / 2;
  const double gain = *p.measured_gain_share;
  const bool gained = gain >= kFloor && gain > *p.noise_share;
  if (p.predicted_gain_share && *p.predicted_gain_share != 0)
    p.prediction_error = gain / *p.predicted_gain_share - 1;
  if (!gained) p.verdict = "did not hold";
  else if (p.prediction_error && std::abs(*p.prediction_error) > kWithin) p.verdict = "held, off the prediction";
  else p.verdict = "held";
}

int run_prove(const BenchOptions& o, const std::vector<std::string>& args) {
  const std::string exe = proc::self_exe(args.front());
  const auto base = without_options(args, {"--json", "--trace", "--prove-pairs", "--progress"}, {"--doctor"});
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("dpbench-prove-{}", ::getpid());
  std::filesystem::create_directories(dir);
  struct Cleanup {
    std::filesystem::path dir;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } cleanup{dir};

  // The run as asked, diagnosed; its output is the user's.
  std::vector<std::string> first = base;
  first.push_back("--doctor");
  if (!o.out.trace_path.empty()) first.push_back("--trace=" + o.out.trace_path);
  reports::RunReport report = run_child(exe, first, (dir / "run.json").string(), true);
  DPB_CHECK(report.diagnosis && !report.runs.empty()) << "the diagnosed run's report holds no diagnosis";
  auto& d = *report.diagnosis;

  int proved = 0;
  for (auto& f : d.findings) {
    const Remedy r = remedy_for(f, report);
    reports::Proof p;
    p.flags = r.flags;
    p.predicted_gain_share = r.predicted_gain;
    p.prediction_method = r.method;
    if (!r.not_run.empty()) {
      p.reason = r.not_run;
      p.verdict = "not run";
      f.proof = std::move(p);
      continue;
    }
    const auto fixed = with_options(base, r.flags);
    try {
      for (int i = 0; i < o.out.prove_pairs; ++i) {
        for (int k = 0; k < 2; ++k) {
          const bool fix = (k == 0) == (i % 2 == 1);  // A B, then B A, ...
          log::info("prove {}: pair {} of {}, {}", f.id, i + 1, o.out.prove_pairs,
                    fix ? fmt::format("with {}", fmt::join(r.flags, " ")) : std::string("as asked"));
          const auto rep = run_child(exe, fix ? fixed : base, (dir / "pair.json").string(), false);
          DPB_CHECK(!rep.runs.empty()) << "a proving run's report holds no run";
          (fix ? p.fixed_s : p.original_s).push_back(time_per_step(rep.runs.back()));
        }
      }
      judge(p);
      ++proved;
    } catch (const std::exception& e) {
      p.original_s.clear();
      p.fixed_s.clear();
      p.reason = fmt::format("a run failed: {}", e.what());
      p.verdict = "not run";
    }
    f.proof = std::move(p);
  }
  report.findings = d.findings;
  std::cout << fmt::format("\ndpdoctor, each flag fix run against the run as asked ({} finding{} timed, {} pair{} "
                           "each; time per step = median step + mean wait for data):\n",
                           proved, proved == 1 ? "" : "s", o.out.prove_pairs, o.out.prove_pairs == 1 ? "" : "s");
  doctor::print_diagnosis(d, std::cout);
  if (!o.out.json_path.empty()) {
    reports::write_report(o.out.json_path, report.to_json());
    log::info("report written to {}", o.out.json_path);
  }
  return 0;
}

}  // namespace dpb::bench
