// dpdoctor: why are the devices not all busy?
//   dpdoctor REPORT.json [--json[=PATH]]     diagnose a dpbench report
//   dpdoctor [--json[=PATH]] -- FLAGS...      run a short dpbench probe with FLAGS, diagnose it
//   dpdoctor --prove -- FLAGS...              ... and run each flag fix against it (A/B pairs)
//   dpdoctor --torch-trace=PATH...            diagnose PyTorch profiler traces: files or folders,
//                                             grouped into jobs (--grouping=auto|job|runs), one
//                                             diagnosis per job
// --json alone prints the findings as JSON instead of the text; --json=PATH writes them
// to PATH as well as printing the text.
// Exit code: 0 when no finding is an error (healthy, or warnings only), 1 when one is,
// 2 for bad input.
#include <CLI/CLI.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>

#include "diagnostics/dpdoctor/doctor.h"
#include "diagnostics/dpdoctor/torch_trace.h"
#include "engine/core/error.h"
#include "engine/core/file_io.h"
#include "engine/core/process.h"

namespace {

// dpbench: $DPBENCH, else beside this executable (as installed: both in one bin/), else
// on PATH.
std::string dpbench_path() {
  const std::string exe = dpb::proc::find_program("dpbench", std::getenv("DPBENCH"));
  DPB_CHECK(!exe.empty()) << "dpbench is neither beside dpdoctor (" << dpb::proc::self_exe() << ") nor on PATH; set "
                          << "DPBENCH to its path";
  return exe;
}

// The value of --name=V or --name V among the flags, if given.
std::optional<std::string> flag_value(const std::vector<std::string>& flags, const std::string& name) {
  for (size_t i = 0; i < flags.size(); ++i) {
    if (flags[i].rfind(name + "=", 0) == 0) return flags[i].substr(name.size() + 1);
    if (flags[i] == name && i + 1 < flags.size()) return flags[i + 1];
  }
  return std::nullopt;
}

bool has_flag(const std::vector<std::string>& flags, const std::string& name) {
  for (const auto& f : flags)
    if (f == name || f.rfind(name + "=", 0) == 0) return true;
  return false;
}

// Runs dpbench with the flags (its output on our stderr, so that stdout holds only the
// diagnosis) and returns its report: the one the flags asked for with --json, else a
// temporary one, removed afterwards.
dpb::reports::RunReport probe(std::vector<std::string> flags) {
  std::string report_path;
  bool temporary = false;
  if (auto given = flag_value(flags, "--json")) {
    report_path = *given;
  } else {
    report_path = (std::filesystem::temp_directory_path() / ("dpdoctor-" + std::to_string(::getpid()) + ".json")).string();
    flags.push_back("--json=" + report_path);
    temporary = true;
  }
  if (!has_flag(flags, "--steps") && !has_flag(flags, "--epochs")) flags.push_back("--steps=10");
  if (!has_flag(flags, "--progress")) flags.push_back("--progress=none");
  const std::string exe = dpbench_path();
  dpb::proc::Spec spec;
  spec.argv = {exe};
  spec.argv.insert(spec.argv.end(), flags.begin(), flags.end());
  spec.out = dpb::proc::Output::to_stderr;  // stdout holds only the diagnosis
  std::string shown = exe;
  for (const auto& f : flags) shown += " " + f;
  std::cerr << "dpdoctor: probing: " << shown << "\n";
  std::cerr.flush();
  const int status = dpb::proc::Child(spec).wait();
  const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  std::optional<dpb::reports::RunReport> report;
  if (ok) report = dpb::reports::RunReport::read(report_path);
  if (temporary) std::filesystem::remove(report_path);
  DPB_CHECK(ok) << "the dpbench probe failed (" << dpb::proc::describe_exit(status) << "); its output is above";
  return std::move(*report);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> mine{argv[0]}, flags;
  bool after = false;
  for (int i = 1; i < argc; ++i) {
    if (!after && std::string(argv[i]) == "--") {
      after = true;
      continue;
    }
    // A bare --json is JSON on standard output: it never takes the next word (the report)
    // as its file; a file is --json=PATH.
    (after ? flags : mine).push_back(!after && std::string(argv[i]) == "--json" ? "--json=-" : argv[i]);
  }
  CLI::App app{"dpdoctor: why the devices of a training run are not all busy, from what the run measured.\n"
               "  dpdoctor REPORT.json         diagnose a dpbench report (dpbench --json=...)\n"
               "  dpdoctor -- <dpbench flags>  run a short dpbench probe with those flags and diagnose it\n"
               "  dpdoctor --torch-trace=PATH  diagnose PyTorch profiler traces (a file per rank, or their folder)\n"
               "Exit code 0 without errors (healthy or warnings), 1 with an error finding, 2 for bad input.",
               "dpdoctor"};
  std::string report_path, json_path;
  bool json_stdout = false;
  app.add_option("REPORT", report_path, "dpbench report to diagnose");
  std::vector<std::string> torch_traces;
  app.add_option("--torch-trace", torch_traces,
                 "PyTorch profiler (Kineto) trace to diagnose instead, .json or .json.gz: one per rank of a job "
                 "(repeat the flag, or give the folder tensorboard_trace_handler wrote)")
      ->take_all();
  std::string grouping = "auto";
  app.add_option("--grouping", grouping,
                 "How --torch-trace files become jobs: auto (by distributedInfo, process and time: files recorded at "
                 "the same time by different ranks or processes are one job, any other file a run of its own), job "
                 "(every file a rank of one job), runs (every file on its own)")
      ->check(CLI::IsMember({"auto", "job", "runs"}));
  bool prove = false;
  app.add_flag("--prove", prove,
               "With -- and dpbench flags: also run each finding whose fix is a flag with that fix, alternated with "
               "the original run, and report predicted against measured gain (dpbench --doctor=prove)");
  int pairs = 3;
  app.add_option("--prove-pairs", pairs, "--prove: original and fixed runs alternated this many times per finding")
      ->check(CLI::Range(1, 20));
  bool verbose = false;
  app.add_flag("--verbose,-v", verbose,
               "Each finding's evidence and explanation, and the temporal breakdown per rank (the text is otherwise a "
               "headline and a fix per finding, then where each window went)");
  auto* json_opt = app.add_option("--json", json_path,
                                  "--json: the findings as JSON (dpdoctor.findings/1) on standard output instead of the "
                                  "text; --json=PATH: also to that file (written atomically)");
  std::vector<std::string> rev(mine.rbegin(), mine.rend() - 1);
  try {
    app.parse(rev);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  json_stdout = json_opt->count() > 0 && json_path == "-";
  try {
    const int sources = !report_path.empty() + after + !torch_traces.empty();
    DPB_CHECK(sources == 1) << (sources == 0 ? "nothing to diagnose: give a report, -- and dpbench flags, or "
                                               "--torch-trace=PATH"
                                             : "give one of: a report, -- and dpbench flags, --torch-trace=PATH");
    if (!json_path.empty() && json_path != "-") dpb::check_writable(json_path);  // before any work
    std::vector<dpb::doctor::Diagnosis> diagnoses;
    if (!torch_traces.empty()) {
      for (const auto& e : dpb::doctor::read_torch_traces(torch_traces, dpb::doctor::parse_grouping(grouping)))
        diagnoses.push_back(dpb::doctor::diagnose(e));
    } else {
      DPB_CHECK(!prove || after) << "--prove runs dpbench: give -- and its flags (a report cannot be run again)";
      if (prove) {
        // dpbench proves its own findings; its report holds the diagnosis with each proof.
        flags.push_back("--doctor=prove");
        flags.push_back("--prove-pairs=" + std::to_string(pairs));
        auto report = probe(flags);
        DPB_CHECK(report.diagnosis) << "dpbench --doctor=prove wrote no diagnosis";
        diagnoses.push_back(std::move(*report.diagnosis));
      } else {
        diagnoses.push_back(after ? dpb::doctor::diagnose(probe(flags))
                                  : dpb::doctor::diagnose(dpb::reports::RunReport::read(report_path)));
      }
    }
    // One diagnosis: dpdoctor.findings/1; several jobs: dpdoctor.jobs/1, one for each.
    const auto j = diagnoses.size() == 1 ? diagnoses.front().to_json() : dpb::reports::jobs_json(diagnoses);
    if (json_stdout) {
      std::cout << j.dump(2) << "\n";
    } else {
      for (size_t i = 0; i < diagnoses.size(); ++i) {
        if (diagnoses.size() > 1) std::cout << (i ? "\n" : "") << "== job " << i + 1 << " of " << diagnoses.size() << "\n";
        dpb::doctor::print_diagnosis(diagnoses[i], std::cout, verbose);
      }
    }
    if (!json_stdout && !json_path.empty()) dpb::write_file_atomic(json_path, j.dump(2) + "\n");
    for (const auto& d : diagnoses)
      for (const auto& f : d.findings)
        if (f.severity == dpb::doctor::Severity::error) return 1;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "dpdoctor: error: " << e.what() << "\n";
    return 2;
  }
}
