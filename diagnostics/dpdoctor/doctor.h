#pragma once
// dpdoctor: why the devices are not all busy, from what a dpbench run measured.
//
// Evidence is read from a dpbench report (dpbench.report/1): per-device samples and busy
// fractions, DataParallel's scatter counts and chunks, the primary's own time, each
// rank's device, compute and communication, whether the ranks' batches were the same
// samples, the data-wait share, DDP's overlap, the pipeline's stages and events. Each
// rule (rules/, one file each) looks at that evidence and, when it sees its problem,
// returns a finding with the numbers it rests on, why they mean what they mean, and a
// concrete fix. Rules fire on what ran, never on flags alone.
#include <nlohmann/json.hpp>

#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace dpb::doctor {

inline constexpr const char* kFindingsSchema = "dpdoctor.findings/1";

enum class Severity { info, warning, error };
const char* severity_name(Severity s);

struct Finding {
  std::string id;
  Severity severity = Severity::info;
  std::string title;
  nlohmann::json evidence = nlohmann::json::object();  // the measured numbers
  std::string explanation;
  std::string fix;
};

// What the rules read, from a report's config and its last (largest) run.
struct DeviceEvidence {
  std::string id;
  double busy = 0;
  int64_t samples = 0;
};
struct RankEvidence {
  int rank = 0;
  std::string host, device;
  std::vector<std::string> hardware;  // what it computed on: "core 2", "gpu 0000:1b:00.0"
  double compute_s = 0, comm_s = 0, step_s = 0, busy = 0;
};
struct Evidence {
  std::string source = "dpbench report";  // or "PyTorch profiler trace"
  // What a profiler trace does not record: samples per device (and DataParallel's
  // chunks), and the host each rank ran on. Rules that need them stand aside.
  bool samples_known = true, hosts_known = true;
  std::string mode, model, devices;
  int world = 1;              // devices (ranks under ddp) the run used
  int requested = 1;          // --gpus as asked
  int visible = 0;            // devices that exist
  int64_t batch_per_device = 0, global_batch = 0, base_batch = 256;
  int64_t steps = 0;          // steps run (warm-up included)
  bool batchnorm = false, sync_bn = false;
  std::string lr_scale = "none";
  double lr = 0, lr_effective = 0;
  double step_s = 0, throughput = 0, data_wait_share = 0;
  std::vector<DeviceEvidence> device;
  // dp
  bool has_dp = false;
  std::string dp_forward, dp_input;
  int64_t scatter_calls = 0;
  std::vector<int64_t> chunks;
  double primary_only_s = -1, primary_replica_s = -1;
  // ddp
  std::vector<RankEvidence> ranks;
  double overlap = -1, exposed_share = -1, exposed_share_ab = -1;
  int64_t buckets = 0, bucket_bytes_max = 0;
  double bucket_mb = 0;
  int64_t data_compared = 0, data_identical = 0;
  // mp
  bool has_pipeline = false;
  std::string schedule, split_by;
  int micro_batches = 0;
  std::vector<int64_t> micro_sizes;
  std::vector<double> stage_busy;  // per stage: 1 - idle share
  std::vector<std::vector<std::string>> stage_units;
  std::vector<double> unit_costs;  // measured per unit (automatic split), else empty
  std::vector<std::string> unit_names;
  double bubble = -1, bubble_theory = -1;
  double concurrency = -1;  // share of the last step with two or more stages busy
};

// Throws dpb::Error when the document is not a dpbench report.
Evidence read_evidence(const nlohmann::json& report);

// Share of [lo, hi) in which at least two of the lanes (pipeline stages, GPUs) are busy;
// each lane's own overlapping intervals count once.
double concurrency_share(const std::vector<std::vector<std::pair<double, double>>>& lanes, double lo, double hi);

using Rule = std::function<std::optional<Finding>(const Evidence&)>;
struct RuleInfo {
  std::string id;
  Rule rule;
};
// Every rule, in the order findings are reported.
const std::vector<RuleInfo>& rules();

struct Diagnosis {
  std::vector<Finding> findings;
  bool healthy = true;                      // no error or warning
  nlohmann::json summary;                   // the numbers a healthy verdict rests on
};
Diagnosis diagnose(const nlohmann::json& report);
Diagnosis diagnose(const Evidence& e);

// {"schema":"dpdoctor.findings/1","verdict":...,"summary":...,"findings":[...]}
nlohmann::json diagnosis_json(const Diagnosis& d);
nlohmann::json finding_json(const Finding& f);
// Compiler-diagnostic style text: severity[id]: title, then the evidence (a line per
// item, floats to 4 significant digits), why, and the fix; then the verdict.
void print_diagnosis(const Diagnosis& d, std::ostream& out);
// One evidence value as text ("cpu:0 (cores 0)", "0.04", "[2, 2, 1]", "rank 0, busy 0.9").
std::string evidence_text(const nlohmann::json& v);

}  // namespace dpb::doctor
