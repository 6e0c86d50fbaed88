#pragma once
// Element types: f32 for values, bf16 for activations under --precision=bf16 (CUDA),
// i32 for class labels.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace dpb {

enum class DType { f32, bf16, i32 };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
    case DType::i32:
      return 4;
    case DType::bf16:
      return 2;
  }
  return 0;
}

// The names safetensors uses.
inline std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "F32";
    case DType::bf16:
      return "BF16";
    case DType::i32:
      return "I32";
  }
  return "?";
}

// bfloat16 <-> float on the host: the upper 16 bits of the float, rounded to nearest
// even (NaN stays NaN), as the GPU's conversion instructions do.
inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float bf16_to_float(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace dpb
