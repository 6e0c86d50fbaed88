#pragma once
// Device: {kind, index}. `cpu:k` is a logical CPU device with its own thread budget,
// so multi-device logic (DP scatter, pipeline stages) runs on machines without a GPU.
#include <ostream>
#include <string>

namespace dpb {

enum class DeviceKind { cpu, cuda };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;

  static Device cpu(int index = 0) { return {DeviceKind::cpu, index}; }
  static Device cuda(int index = 0) { return {DeviceKind::cuda, index}; }
  // Parses "cpu", "cpu:1", "cuda", "cuda:0"; throws dpb::Error naming the valid forms.
  static Device parse(const std::string& text);

  bool is_cpu() const { return kind == DeviceKind::cpu; }
  bool is_cuda() const { return kind == DeviceKind::cuda; }
  std::string str() const { return (kind == DeviceKind::cpu ? "cpu:" : "cuda:") + std::to_string(index); }
  bool operator==(const Device& o) const { return kind == o.kind && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

inline std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

}  // namespace dpb
