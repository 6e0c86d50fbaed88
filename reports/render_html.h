#pragma once
// One self-contained HTML page for a dpbench report (inline SVG, no scripts fetched):
// the scaling curve against ideal, per-device busy bars, the step-time distribution, a
// timeline excerpt of the last measured step, and the findings.
#include <string>

#include "reports/model.h"

namespace dpb::reports {

// `prediction`: a dpbench --simulate report whose points go on the scaling chart beside
// the measured ones.
std::string render_html(const RunReport& report, const RunReport* prediction = nullptr);

}  // namespace dpb::reports
