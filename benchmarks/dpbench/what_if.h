#pragma once
// The doctor's communication finding with numbers on its fix: dpbench --simulate replayed
// on the run's own measurements (the step without communication split across the
// model's layers, the link fitted on the run's own bucket all-reduces, the contention
// calibrated so the current bucket size gives the measured step), then other bucket
// sizes tried. The best one, and its simulated gain, go into the finding's evidence
// (simulated_fix) and its fix text.
#include <vector>

#include "reports/findings.h"
#include "reports/model.h"

namespace dpb::bench {

void add_simulated_fixes(const reports::RunReport& report, std::vector<reports::Finding>& findings);

}  // namespace dpb::bench
