#pragma once
// The console summary of a run (stdout): a header, the step-time table, and what the
// mode measured (devices, DDP's buckets and overlap, the pipeline's stages), from the
// report the run produced.
#include <iosfwd>
#include <string>

#include "reports/model.h"

namespace dpb::bench {

// What the summary shows that the report does not hold.
struct SummaryExtras {
  std::string device_text;      // "cpu:0", "cpu:0..1", "2 rank(s) on cpu"
  int64_t batch = 0;            // --batch as given
  int64_t test_samples = 0;     // evaluated samples
  double epochs_trained = 0;
};

void print_summary(const reports::RunReport& report, const SummaryExtras& extras, std::ostream& out);

// "316.62 ms", "1.234 s", "12.3 us".
std::string human_time(double seconds);

}  // namespace dpb::bench
