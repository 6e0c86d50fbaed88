#pragma once
// dpbench --doctor=prove: the doctor's prescriptions tried. The run is diagnosed (its own
// process, as --doctor would); then each finding whose fix is a flag of this run is run
// with that flag, alternated with the original run (A B, then B A, ... --prove-pairs
// times, so that a machine drifting over the runs moves both sides alike), and the
// finding gets a proof (reports::Proof): the fix's predicted gain against the measured
// one, and whether it held. A finding whose fix is not a flag, or changes what is
// learned rather than the step, says so and is not run.
#include <optional>
#include <string>
#include <vector>

#include "benchmarks/dpbench/options.h"
#include "reports/findings.h"
#include "reports/model.h"

namespace dpb::bench {

// A finding's fix as flags of the run that found it, with the gain that fix is predicted
// to give (the finding's own prediction, or the simulation that chose the flag); or why
// it is not a fix to time.
struct Remedy {
  std::vector<std::string> flags;  // --name=value each
  std::optional<double> predicted_gain;
  std::string method;
  std::string not_run;  // non-empty: not timed, and why
};
Remedy remedy_for(const reports::Finding& f, const reports::RunReport& report);

// args (the program's name dropped) with each of `set` (--name=value or --name) in place
// of any value the same option had.
std::vector<std::string> with_options(std::vector<std::string> args, const std::vector<std::string>& set);

// A proof's figures from its runs' times per step, in run order (original and fixed, one
// of each per pair): medians, the median gain over the pairs, its noise, and the verdict
// against the predicted gain (held: at least 2 % and beyond the noise; as predicted:
// within 25 % of the prediction).
void judge(reports::Proof& p);

// Runs the whole of --doctor=prove (the process that the user started, before any rank).
int run_prove(const BenchOptions& o, const std::vector<std::string>& args);

}  // namespace dpb::bench
