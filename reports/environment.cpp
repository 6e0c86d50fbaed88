#include <oneapi/dnnl/dnnl.hpp>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

#include "engine/backend/cpu/simd.h"
#include "engine/backend/device_info.h"
#include "reports/model.h"

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

std::string onednn_isa() {
  switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41:
      return "sse41";
    case dnnl_cpu_isa_avx:
      return "avx";
    case dnnl_cpu_isa_avx2:
      return "avx2";
    case dnnl_cpu_isa_avx2_vnni:
      return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core:
      return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "other";
  }
}

std::optional<std::string> known(const std::string& s) {
  return s.empty() ? std::nullopt : std::optional<std::string>(s);
}
}  // namespace

Environment collect_environment() {
  const dnnl_version_t* v = dnnl_version();
  Environment env;
  env.host = host_name();
  env.cpu_model = cpu_model();
  env.cpu_threads = static_cast<int>(std::thread::hardware_concurrency());
  env.kernels_isa = cpu::simd_isa_name(cpu::simd_isa());
  env.onednn_isa = onednn_isa();
  env.onednn = std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
  const CudaInfo cuda = cuda_info();
  env.cuda_built = cuda.built;
  env.cuda = known(cuda.runtime_version);
  env.driver = known(cuda.driver_version);
  env.cudnn = known(cuda.cudnn_version);
  env.nccl = known(cuda.nccl_version);
  for (const auto& g : cuda.gpus) env.gpus.push_back({g.index, g.name, g.memory_bytes, g.compute_capability, g.pci_bus_id});
  return env;
}

}  // namespace dpb::reports
