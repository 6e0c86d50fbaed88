#pragma once
// The doctor's communication finding with numbers on its fix: dpbench --simulate replayed
// on the run's own measurements (one rank's step split across the model's layers, the
// link fitted on the run's own bucket all-reduces, the slowest rank's lag and the ranks'
// crowding as the sweep measured them, a contention where one is needed to give the
// measured step), then other bucket sizes tried. The best one, and its simulated gain, go
// into the finding's evidence (simulated_fix) and its fix text; where none gains, the fix
// says which part of the step beyond one rank's limits it.
#include <vector>

#include "reports/findings.h"
#include "reports/model.h"

namespace dpb::bench {

void add_simulated_fixes(const reports::RunReport& report, std::vector<reports::Finding>& findings);

}  // namespace dpb::bench
