#pragma once
// Shape: the sizes of a contiguous (row-major) tensor, outermost first.
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

namespace dpb {

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}

  int ndim() const { return static_cast<int>(dims_.size()); }
  int64_t operator[](int i) const { return dims_[static_cast<size_t>(i < 0 ? i + ndim() : i)]; }
  int64_t& operator[](int i) { return dims_[static_cast<size_t>(i < 0 ? i + ndim() : i)]; }
  int64_t numel() const {
    int64_t n = 1;
    for (auto d : dims_) n *= d;
    return n;
  }
  // Elements in one dim-0 row: numel() / dims[0].
  int64_t row_numel() const {
    int64_t n = 1;
    for (size_t i = 1; i < dims_.size(); ++i) n *= dims_[i];
    return n;
  }
  const std::vector<int64_t>& dims() const { return dims_; }
  bool operator==(const Shape& o) const { return dims_ == o.dims_; }
  bool operator!=(const Shape& o) const { return dims_ != o.dims_; }
  std::string str() const {
    std::string s = "(";
    for (size_t i = 0; i < dims_.size(); ++i) s += (i ? ", " : "") + std::to_string(dims_[i]);
    return s + ")";
  }

 private:
  std::vector<int64_t> dims_;
};

inline std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << s.str(); }

}  // namespace dpb
