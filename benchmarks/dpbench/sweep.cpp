#include "benchmarks/dpbench/sweep.h"

#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "engine/core/error.h"
#include "engine/core/log.h"
#include "diagnostics/dpdoctor/doctor.h"
#include "reports/report.h"

namespace dpb::bench {

namespace {

// The command line without the options the sweep sets per child (both --opt=v and --opt v).
std::vector<std::string> without(const std::vector<std::string>& args, const std::vector<std::string>& opts) {
  std::vector<std::string> out;
  for (size_t i = 1; i < args.size(); ++i) {
    bool drop = false;
    for (const auto& o : opts) {
      if (args[i] == o) {
        drop = true;
        ++i;  // its value
        break;
      }
      if (args[i].rfind(o + "=", 0) == 0) {
        drop = true;
        break;
      }
    }
    if (!drop) out.push_back(args[i]);
  }
  return out;
}

std::string self_exe(const std::string& argv0) {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n > 0) return std::string(buf, static_cast<size_t>(n));
  return argv0;
}

// Runs the child with stdout and stderr inherited; returns its exit code.
int run_child(const std::string& exe, const std::vector<std::string>& args) {
  std::vector<char*> cargs;
  cargs.push_back(const_cast<char*>(exe.c_str()));
  for (const auto& a : args) cargs.push_back(const_cast<char*>(a.c_str()));
  cargs.push_back(nullptr);
  std::cout.flush();
  std::cerr.flush();
  const pid_t pid = ::fork();
  DPB_CHECK(pid >= 0) << "fork failed: " << std::strerror(errno);
  if (pid == 0) {
    ::execv(exe.c_str(), cargs.data());
    std::fprintf(stderr, "dpbench: cannot run %s: %s\n", exe.c_str(), std::strerror(errno));
    std::_Exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

std::string with_suffix(const std::string& path, const std::string& suffix) {
  const std::filesystem::path p(path);
  return (p.parent_path() / (p.stem().string() + suffix + p.extension().string())).string();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

std::vector<int> parse_gpus(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    DPB_CHECK(!item.empty() && std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; }))
        << "--gpus='" << text << "': expected a device count or a list such as 1,2,4";
    const int n = std::stoi(item);
    DPB_CHECK(n >= 1 && n <= 64) << "--gpus='" << text << "': " << n << " devices (each count must be 1..64)";
    DPB_CHECK(out.empty() || n > out.back()) << "--gpus='" << text << "': list the counts in increasing order";
    out.push_back(n);
  }
  DPB_CHECK(!out.empty()) << "--gpus='" << text << "': expected a device count or a list such as 1,2,4";
  return out;
}

int run_sweep(const BenchOptions& o, const std::vector<int>& gpus, const std::vector<std::string>& args) {
  const std::string exe = self_exe(args.front());
  const auto base = without(args, {"--gpus", "--json", "--trace", "--repeat", "--batch", "--mode", "--doctor"});
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("dpbench-sweep-{}", ::getpid());
  std::filesystem::create_directories(dir);
  const bool weak = o.mode == "dp" || o.mode == "mp";
  struct Point {
    int gpus = 0;
    int64_t batch = 0;
    std::string mode;
    std::vector<double> throughput;
  };
  std::vector<Point> points;
  nlohmann::json merged, runs = nlohmann::json::array();
  for (int n : gpus) {
    Point pt;
    pt.gpus = n;
    pt.batch = weak ? o.batch * n : o.batch;
    // mp needs two stages: its one-device point is single-device training.
    pt.mode = (o.mode == "mp" && n == 1) ? "single" : o.mode;
    for (int rep = 0; rep < o.repeat; ++rep) {
      const std::string json = (dir / fmt::format("gpus{}-r{}.json", n, rep)).string();
      std::vector<std::string> child = base;
      child.push_back("--mode=" + pt.mode);
      child.push_back(fmt::format("--gpus={}", n));
      child.push_back(fmt::format("--batch={}", pt.batch));
      child.push_back("--json=" + json);
      if (!o.trace_path.empty())
        child.push_back("--trace=" + with_suffix(o.trace_path, fmt::format("-gpus{}{}", n,
                                                                            o.repeat > 1 ? fmt::format("-r{}", rep) : "")));
      log::info("sweep: --gpus={} ({}), repetition {} of {}", n, pt.mode, rep + 1, o.repeat);
      const int code = run_child(exe, child);
      if (code != 0) {
        std::cerr << fmt::format("dpbench: error: the run with --gpus={} exited with code {}\n", n, code);
        std::filesystem::remove_all(dir);
        return code;
      }
      std::ifstream in(json);
      const auto rep_json = nlohmann::json::parse(in);
      if (merged.is_null()) merged = rep_json;
      for (auto run : rep_json["runs"]) {
        run["repeat"] = rep;
        run["mode"] = pt.mode;
        const auto& t = run["throughput_samples_per_s"];
        if (t.is_number()) pt.throughput.push_back(t.get<double>());
        runs.push_back(run);
      }
    }
    points.push_back(std::move(pt));
  }
  std::filesystem::remove_all(dir);

  // E(N) against the smallest count (1 in a proper sweep), from median throughputs.
  const Point& first = points.front();
  const double base_thr = first.throughput.empty() ? 0 : median(first.throughput) / first.gpus;
  nlohmann::json sweep = nlohmann::json::array();
  std::cout << fmt::format("\nscaling: {} mode{}, {} repetition(s) per point (median throughput), E(N) = {}\n",
                           o.mode, weak ? ", weak scaling (batch x N)" : ", batch per rank", o.repeat,
                           first.gpus == 1 ? "throughput(N) / (N x throughput(1))"
                                           : fmt::format("throughput(N) x {} / (N x throughput({}))", first.gpus,
                                                         first.gpus));
  std::cout << fmt::format("{:>6} {:>8} {:>8} {:>14} {:>14} {:>10}\n", "gpus", "mode", "global", "samples/s",
                           "min..max", "E(N)");
  std::map<int, double> efficiency;
  for (const auto& pt : points) {
    const double thr = pt.throughput.empty() ? 0 : median(pt.throughput);
    const double e = base_thr > 0 ? thr / (pt.gpus * base_thr) : 0;
    efficiency[pt.gpus] = e;
    const auto [lo, hi] = pt.throughput.empty() ? std::pair<double, double>{0, 0}
                                                : std::pair<double, double>{*std::min_element(pt.throughput.begin(), pt.throughput.end()),
                                                                            *std::max_element(pt.throughput.begin(), pt.throughput.end())};
    const int64_t global = o.mode == "ddp" ? pt.batch * pt.gpus * o.accum_steps : pt.batch;
    std::cout << fmt::format("{:>6} {:>8} {:>8} {:>14.1f} {:>14} {:>10.3f}\n", pt.gpus, pt.mode, global, thr,
                             fmt::format("{:.0f}..{:.0f}", lo, hi), e);
    sweep.push_back({{"world_size", pt.gpus},
                     {"mode", pt.mode},
                     {"global_batch", global},
                     {"batch_per_device", o.mode == "ddp" ? pt.batch : pt.batch / std::max(1, o.mode == "dp" ? pt.gpus : 1)},
                     {"throughput_samples_per_s", reports::number(thr)},
                     {"throughput_min", reports::number(lo)},
                     {"throughput_max", reports::number(hi)},
                     {"repeats", pt.throughput.size()},
                     {"scaling_efficiency", reports::number(e)}});
  }
  for (auto& run : runs) {
    const int n = run["world_size"].get<int>();
    const auto& t = run["throughput_samples_per_s"];
    run["scaling_efficiency"] =
        t.is_number() && base_thr > 0 ? reports::number(t.get<double>() / (n * base_thr)) : nlohmann::json(nullptr);
  }
  merged["command"] = args;
  merged["config"]["gpus"] = gpus;
  merged["config"]["repeat"] = o.repeat;
  merged["config"]["mode"] = o.mode;
  merged["config"]["sweep_batch"] = weak ? "batch x N (weak scaling)" : "per rank";
  merged["runs"] = runs;
  merged["sweep"] = sweep;
  merged["findings"] = nlohmann::json::array();
  if (o.doctor) {
    const auto d = doctor::diagnose(merged);  // the largest run
    for (const auto& f : d.findings) merged["findings"].push_back(doctor::finding_json(f));
    std::cout << "\ndpdoctor (the largest run):\n";
    doctor::print_diagnosis(d, std::cout);
  }
  if (!o.json_path.empty()) {
    reports::write_report(o.json_path, merged);
    log::info("report written to {}", o.json_path);
  }
  return 0;
}

}  // namespace dpb::bench
