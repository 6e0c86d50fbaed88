#include "reports/environment.h"

#include <oneapi/dnnl/dnnl.hpp>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

#include "engine/backend/device_info.h"

namespace dpb::reports {

namespace {
std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown";
}

std::string host_name() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}
}  // namespace

nlohmann::json collect_environment() {
  const dnnl_version_t* v = dnnl_version();
  nlohmann::json env;
  env["host"] = host_name();
  env["cpu"] = {{"model", cpu_model()}, {"threads", std::thread::hardware_concurrency()}};
  env["onednn"] = std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
  const CudaInfo cuda = cuda_info();
  env["cuda_built"] = cuda.built;
  env["cuda"] = cuda.runtime_version.empty() ? nlohmann::json(nullptr) : nlohmann::json(cuda.runtime_version);
  env["driver"] = cuda.driver_version.empty() ? nlohmann::json(nullptr) : nlohmann::json(cuda.driver_version);
  env["cudnn"] = cuda.cudnn_version.empty() ? nlohmann::json(nullptr) : nlohmann::json(cuda.cudnn_version);
  env["nccl"] = cuda.nccl_version.empty() ? nlohmann::json(nullptr) : nlohmann::json(cuda.nccl_version);
  env["gpus"] = nlohmann::json::array();
  for (const auto& g : cuda.gpus)
    env["gpus"].push_back({{"index", g.index}, {"name", g.name}, {"memory_bytes", g.memory_bytes},
                           {"compute_capability", g.compute_capability},
                           {"pci_bus_id", g.pci_bus_id}});
  return env;
}

}  // namespace dpb::reports
