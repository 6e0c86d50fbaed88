#pragma once
// dpdoctor's findings as types: one finding (also a dpbench report's findings[]), and
// the diagnosis document dpdoctor --json writes (schema "dpdoctor.findings/1"): a
// verdict, the measurements it rests on, each rank's timeline breakdown, the findings.
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "engine/parallel/modes.h"
#include "engine/trace/breakdown.h"

namespace dpb::reports {

class JsonView;

inline constexpr const char* kFindingsSchema = "dpdoctor.findings/1";
inline constexpr const char* kJobsSchema = "dpdoctor.jobs/1";

enum class Severity { info, warning, error };
const char* severity_name(Severity s);

// What a finding explains: a share of one rank's (or device's) window.
struct Claim {
  std::optional<int> rank;
  std::string device;
  double share = 0;
};

// What a finding's fix is worth: the step with its cause removed, from the measured
// timeline (`method` says how, `inputs` what it read); step_time_s null with `reason`
// where it cannot be said (advice on configuration, a timeline without steps).
struct Prediction {
  std::optional<double> step_time_s;           // the step, the cause removed
  std::optional<double> measured_step_time_s;  // the same step as measured
  std::optional<double> gain_share;            // 1 - predicted / measured
  std::optional<double> scaling_efficiency;    // sweeps: E(N) with the cause removed
  std::string method;
  std::string reason;  // why step_time_s is null
  nlohmann::json inputs = nlohmann::json::object();

  // "step 211.2 ms -> 162.9 ms (-23%), by replay"; empty without a predicted step.
  std::string summary() const;
  nlohmann::json to_json() const;
  static Prediction from_json(const JsonView& j);
};

// A finding's fix run and timed (dpbench --doctor=prove): the run again with the fix's
// flags, alternated with the original run `pairs` times (A B, then B A, ...), so that a
// machine drifting over the runs moves both sides alike. Each run's time per step is its
// median step plus its mean wait for data (median / (1 - data_wait_share)); the measured
// gain is the median over the pairs of 1 - fixed / original, its noise half the spread of
// the pairs' gains. `reason` says why a finding was not run (its fix is no flag of this
// run, or it changes what is learned rather than the step).
struct Proof {
  std::vector<std::string> flags;  // the fix as dpbench flags (empty: no flag fix)
  std::string reason;              // why it was not run; empty when it was
  int pairs = 0;
  std::vector<double> original_s, fixed_s;  // each run's time per step, in run order
  std::optional<double> original_median_s, fixed_median_s;
  std::optional<double> measured_gain_share, noise_share;
  std::optional<double> predicted_gain_share;  // the fix's own prediction
  std::string prediction_method;
  // measured / predicted gain - 1 (null without both)
  std::optional<double> prediction_error;
  // "held" (the gain beyond the noise and within 25 % of the prediction), "held, off
  // the prediction", "did not hold", "not run"
  std::string verdict;

  // "--workers=4: 31.2 ms -> 11.0 ms, measured -65% +- 2% against -64% predicted: held"
  std::string summary() const;
  nlohmann::json to_json() const;
  static Proof from_json(const JsonView& j);
};

struct Finding {
  std::string id;
  Severity severity = Severity::info;
  std::string title;
  nlohmann::json evidence = nlohmann::json::object();  // the measured numbers
  std::string explanation;
  std::string fix;
  std::vector<Claim> explains;  // the time it accounts for (none: advice on configuration)
  std::optional<Prediction> predicted;
  std::optional<Proof> proof;

  nlohmann::json to_json() const;
  static Finding from_json(const JsonView& j);
};

struct DeviceBusy {
  std::string id;
  double busy_fraction = 0;
  int64_t samples = 0;
};

// The numbers a verdict rests on.
struct DiagnosisSummary {
  std::string source = "dpbench report";  // or "PyTorch profiler trace"
  std::string timeline_source = "host";   // where the device times come from
  ParallelMode mode = ParallelMode::single;
  // Profiler traces of ranks: the parallelism the collectives show, and that evidence
  // (empty elsewhere: a dpbench run's mode is what it ran).
  std::string parallelism, parallelism_evidence;
  std::string model;
  int world_size = 1;
  std::optional<int64_t> global_batch;  // unknown for traces (samples are not recorded)
  std::optional<double> throughput_samples_per_s;
  double step_time_s = 0, data_wait_share = 0;
  std::vector<DeviceBusy> devices;
  std::optional<double> overlap_ratio;
  std::optional<double> bubble_measured, bubble_theory;
};

// Where one rank's (or device's) window went: the share it lost (idle, and communication
// compute did not hide), what each finding explains of that, and what none explains.
struct RankBudget {
  std::optional<int> rank;
  std::string device;
  double window_s = 0, idle_share = 0, exposed_comm_share = 0;
  std::string window;  // what the window is: "profiled steps", "kernel span", "measured steps"
  std::vector<std::pair<std::string, double>> explained;  // finding id, share of the window
  double unexplained_share = 0;
  // Profiler traces: idle time by what the device waited for, shares of the window.
  std::vector<std::pair<std::string, double>> idle_causes;
};

// Profiler traces: the files a diagnosis covers, as which rank, and why they go together.
struct TraceFileInfo {
  std::string path;
  std::optional<int> rank;
  std::optional<int64_t> pid;
  std::string host;
};
struct TraceJobInfo {
  bool ranks = false;  // ranks of one job (else one run of one process)
  std::string reason;
  std::vector<TraceFileInfo> files;
};

struct DiagnosisReport {
  bool healthy = true;  // no error or warning
  std::string primary;  // the finding that explains the most (errors first); empty when healthy
  DiagnosisSummary summary;
  std::vector<trace::Breakdown> ranks;
  // Profiler traces whose window is their profiled steps: the breakdown over HTA's window
  // (the kernel span) beside, to compare with HTA (empty otherwise).
  std::vector<trace::Breakdown> ranks_kernel_span;
  std::vector<RankBudget> budget;
  std::vector<Finding> findings;
  std::optional<TraceJobInfo> job;
  std::vector<std::string> notes;  // what lowers confidence in it

  nlohmann::json to_json() const;
  static DiagnosisReport from_json(const nlohmann::json& j, const std::string& document);
};

// Several jobs' diagnoses (dpdoctor.jobs/1): profiler traces that were not one job.
nlohmann::json jobs_json(const std::vector<DiagnosisReport>& jobs);

// A breakdown as the reports write it: {rank, host, device, window_s, idle_share,
// compute_share, comm_share, memory_share, overlap, idle_breakdown{host_wait,
// kernel_wait, other}}.
nlohmann::json breakdown_json(const trace::Breakdown& b);
trace::Breakdown breakdown_from_json(const JsonView& j);

}  // namespace dpb::reports
