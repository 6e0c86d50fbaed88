#include "reports/report.h"

#include "engine/core/file_io.h"

namespace dpb::reports {

void write_report(const std::string& path, const nlohmann::json& report) {
  write_file_atomic(path, report.dump(2) + "\n");
}

}  // namespace dpb::reports
