#include "benchmarks/dpbench/sweep.h"

#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "benchmarks/dpbench/what_if.h"
#include "diagnostics/dpdoctor/doctor.h"
#include "engine/core/error.h"
#include "engine/core/log.h"
#include "engine/core/process.h"
#include "reports/model.h"
#include "reports/report.h"

namespace dpb::bench {

namespace {

// Runs this program again with the sweep's own command line, as the run `r` of the
// sweep (kSweepRunVariable); stdout and stderr inherited; returns its exit code.
int run_child(const std::vector<std::string>& args, const SweepRun& r) {
  proc::Spec spec;
  spec.argv = args;
  spec.exe = proc::self_exe(args.front());
  spec.env = {{kSweepRunVariable, sweep_run_value(r)}};
  std::cout.flush();
  std::cerr.flush();
  return proc::exit_code(proc::Child(spec).wait());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int run_sweep(const BenchOptions& o, const std::vector<std::string>& args) {
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("dpbench-sweep-{}", ::getpid());
  std::filesystem::create_directories(dir);
  const bool weak = multi_device_process(o.mode);
  const int threads = threads_per_device(o, o.sweep.back());
  struct Point {
    BenchOptions options;
    std::vector<double> throughput;
  };
  std::vector<Point> points;
  std::optional<reports::RunReport> merged;
  std::vector<reports::RunMetrics> runs;
  for (int n : o.sweep) {
    Point pt{sweep_point(o, n), {}};
    for (int rep = 0; rep < o.repeat; ++rep) {
      const SweepRun r{n, rep, dir.string()};
      const std::string json = sweep_run(o, r).out.json_path;
      log::info("sweep: --gpus={} ({}), repetition {} of {}, {} thread(s) per device", n,
                parallel_mode_name(pt.options.mode), rep + 1, o.repeat, threads);
      const int code = run_child(args, r);
      if (code != 0) {
        std::cerr << fmt::format("dpbench: error: the run with --gpus={} exited with code {}\n", n, code);
        std::filesystem::remove_all(dir);
        return code;
      }
      reports::RunReport child_report = reports::RunReport::read(json);
      if (!merged) merged = child_report;
      for (auto& run : child_report.runs) {
        run.repeat = rep;
        run.mode = pt.options.mode;
        if (run.throughput_samples_per_s) pt.throughput.push_back(*run.throughput_samples_per_s);
        runs.push_back(std::move(run));
      }
    }
    points.push_back(std::move(pt));
  }
  std::filesystem::remove_all(dir);

  // E(N) against the smallest count (1 in a proper sweep), from median throughputs.
  const Point& first = points.front();
  const int first_n = first.options.device.count;
  const double base_thr = first.throughput.empty() ? 0 : median(first.throughput) / first_n;
  std::cout << fmt::format("\nscaling: {} mode{}, {} repetition(s) per point (median throughput), {} thread(s) per "
                           "device, E(N) = {}\n",
                           parallel_mode_name(o.mode),
                           weak                          ? ", weak scaling (batch x N)"
                           : mode_info(o.mode).splits_layers ? ", the same batch on every rank (strong scaling)"
                                                        : ", batch per rank",
                           o.repeat, threads,
                           first_n == 1 ? "throughput(N) / (N x throughput(1))"
                                        : fmt::format("throughput(N) x {} / (N x throughput({}))", first_n, first_n));
  std::cout << fmt::format("{:>6} {:>8} {:>8} {:>14} {:>14} {:>10}\n", "gpus", "mode", "global", "samples/s",
                           "min..max", "E(N)");
  std::vector<reports::SweepPoint> sweep;
  for (const auto& pt : points) {
    const int n = pt.options.device.count;
    const double thr = pt.throughput.empty() ? 0 : median(pt.throughput);
    const double e = base_thr > 0 ? thr / (n * base_thr) : 0;
    const auto [lo, hi] = pt.throughput.empty()
                              ? std::pair<double, double>{0, 0}
                              : std::pair<double, double>{*std::min_element(pt.throughput.begin(), pt.throughput.end()),
                                                          *std::max_element(pt.throughput.begin(), pt.throughput.end())};
    const bool ddp = splits_batch(o.mode);
    const int64_t batch = pt.options.train.batch;
    // 2D (--tp): each tensor-parallel group is one data-parallel rank.
    const int64_t global = ddp ? batch * (n / std::max(1, o.ddp.tp)) * o.train.accum_steps : batch;
    std::cout << fmt::format("{:>6} {:>8} {:>8} {:>14.1f} {:>14} {:>10.3f}\n", n,
                             parallel_mode_name(pt.options.mode), global, thr, fmt::format("{:.0f}..{:.0f}", lo, hi), e);
    reports::SweepPoint sp;
    sp.world_size = n;
    sp.mode = pt.options.mode;
    sp.global_batch = global;
    sp.batch_per_device = ddp ? batch : batch / std::max(1, o.mode == ParallelMode::dp ? n : 1);
    sp.throughput_samples_per_s = thr;
    sp.throughput_min = lo;
    sp.throughput_max = hi;
    sp.repeats = static_cast<int>(pt.throughput.size());
    sp.scaling_efficiency = e;
    sweep.push_back(sp);
  }
  for (auto& run : runs)
    run.scaling_efficiency =
        run.throughput_samples_per_s && base_thr > 0
            ? reports::Num(*run.throughput_samples_per_s / (run.world_size * base_thr))
            : reports::Num();
  reports::RunReport& report = *merged;
  report.command = args;
  report.config.gpus = o.sweep;
  report.config.repeat = o.repeat;
  report.config.mode = o.mode;
  report.config.sweep_batch = weak ? "batch x N (weak scaling)" : "per rank";
  report.runs = std::move(runs);
  report.sweep = std::move(sweep);
  report.findings.clear();
  if (o.out.doctor) {
    auto d = doctor::diagnose(report);  // the largest run
    add_simulated_fixes(report, d.findings);
    report.findings = d.findings;
    report.diagnosis = d;
    std::cout << "\ndpdoctor (the largest run):\n";
    doctor::print_diagnosis(d, std::cout);
    if (!o.out.json_path.empty())
      std::cout << "the evidence and why: dpdoctor --verbose " << o.out.json_path << "\n";
  }
  if (!o.out.json_path.empty()) {
    reports::write_report(o.out.json_path, report.to_json());
    log::info("report written to {}", o.out.json_path);
  }
  return 0;
}

}  // namespace dpb::bench
