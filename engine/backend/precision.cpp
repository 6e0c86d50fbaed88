#include "engine/backend/precision.h"

#include <atomic>

#include "engine/core/error.h"

namespace dpb {

namespace {
std::atomic<Precision> g_precision{Precision::fp32};
std::atomic<bool> g_deterministic{false};
}  // namespace

void set_deterministic(bool on) { g_deterministic.store(on); }
bool deterministic() { return g_deterministic.load(); }

void set_precision(Precision p) { g_precision.store(p); }
Precision precision() { return g_precision.load(); }

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::fp32;
  if (name == "tf32") return Precision::tf32;
  if (name == "bf16") return Precision::bf16;
  DPB_FAIL() << "unknown precision '" << name << "' (valid: fp32, tf32, bf16)";
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::fp32:
      return "fp32";
    case Precision::tf32:
      return "tf32";
    case Precision::bf16:
      return "bf16";
  }
  return "?";
}

DType compute_dtype(const Device& device) {
  return device.is_cuda() && precision() == Precision::bf16 ? DType::bf16 : DType::f32;
}

}  // namespace dpb
