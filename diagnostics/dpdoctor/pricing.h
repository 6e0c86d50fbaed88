#pragma once
// What each finding's fix is worth (reports::Prediction): the step with its cause removed.
// A rule that can replay its fix on the measured timeline says so itself (input-bound:
// trace/replay.h); every other finding that explains measured time is priced here from the
// budget, as the share of its rank's window it explains taken off that rank's step: an
// upper bound, since nothing that waited on that time is moved up and nothing else fills
// it. A finding that explains no time (advice on configuration) gets a null step and says
// why. In a sweep's largest run, each finding whose cause only several ranks pay
// (communication, a straggler, ranks sharing a device) also gets E(N) with it removed.
#include "diagnostics/dpdoctor/evidence.h"
#include "reports/findings.h"

namespace dpb::doctor {

void price_findings(const Evidence& e, reports::DiagnosisReport& d);

}  // namespace dpb::doctor
