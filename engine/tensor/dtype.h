#pragma once
// Element types: f32 for values, i32 for class labels.
#include <cstddef>
#include <string_view>

namespace dpb {

enum class DType { f32, i32 };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
    case DType::i32:
      return 4;
  }
  return 0;
}

inline std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "F32";
    case DType::i32:
      return "I32";
  }
  return "?";
}

}  // namespace dpb
