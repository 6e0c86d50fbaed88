#include "engine/tensor/device.h"

#include "engine/core/error.h"

namespace dpb {

Device Device::parse(const std::string& text) {
  auto colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  int index = 0;
  if (colon != std::string::npos) {
    const std::string idx = text.substr(colon + 1);
    DPB_CHECK(!idx.empty() && idx.find_first_not_of("0123456789") == std::string::npos)
        << "bad device '" << text << "': the index must be a non-negative integer (e.g. cpu:1, cuda:0)";
    index = std::stoi(idx);
  }
  if (kind == "cpu") return cpu(index);
  if (kind == "cuda") return cuda(index);
  DPB_FAIL() << "unknown device '" << text << "' (valid: cpu, cpu:N, cuda, cuda:N)";
}

}  // namespace dpb
