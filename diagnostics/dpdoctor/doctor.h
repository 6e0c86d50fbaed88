#pragma once
// dpdoctor: why the devices are not all busy, from what a run measured.
//
// Each rule (rules/, one file each) looks at the evidence (evidence.h) and, when it
// sees its problem, returns a finding with the numbers it rests on, why they mean what
// they mean, and a concrete fix. The diagnosis is the typed dpdoctor.findings/1
// document (reports/findings.h): a verdict, the numbers it rests on, each rank's
// timeline breakdown, and the findings, errors first.
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "diagnostics/dpdoctor/evidence.h"
#include "reports/findings.h"
#include "reports/model.h"

namespace dpb::doctor {

using reports::Finding;
using reports::Severity;
using Diagnosis = reports::DiagnosisReport;

using Rule = std::function<std::optional<Finding>(const Evidence&)>;
struct RuleInfo {
  std::string id;
  Rule rule;
};
// Every rule, in the order findings are reported.
const std::vector<RuleInfo>& rules();

Diagnosis diagnose(const Evidence& e);
Diagnosis diagnose(const reports::RunReport& report);

// Compiler-diagnostic style text a person reads: per finding its headline
// (severity[id]: title, with the figure that matters) and one line of fix; then where
// each rank's window went (the budget) and the verdict. `verbose` adds each finding's
// evidence (a line per item, floats to 4 significant digits) and why, and the temporal
// breakdown per rank; the JSON and the HTML report hold all of it.
void print_diagnosis(const Diagnosis& d, std::ostream& out, bool verbose = false);
// One evidence value as text ("cpu:0 (cores 0)", "0.04", "[2, 2, 1]", "rank 0, busy 0.9").
std::string evidence_text(const nlohmann::json& v);

}  // namespace dpb::doctor
