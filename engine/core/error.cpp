#include "engine/core/error.h"

#include <cstdio>
#include <cstring>

namespace dpb {

namespace {
std::string compose(const std::string& message, const std::string& where, const std::string& hint) {
  std::string s = message;
  if (!hint.empty()) s += " (" + hint + ")";
  if (!where.empty()) s += " [" + where + "]";
  return s;
}
}  // namespace

Error::Error(std::string message, std::string where, std::string hint)
    : std::runtime_error(compose(message, where, hint)),
      message_(std::move(message)),
      where_(std::move(where)),
      hint_(std::move(hint)) {}

namespace detail {

ErrorStream::ErrorStream(const char* file, int line, std::string prefix) : file_(file), line_(line) {
  stream_ << prefix;
}

std::string ErrorStream::where() const {
  const char* base = std::strstr(file_, "engine/");
  for (const char* root : {"benchmarks/", "diagnostics/", "reports/", "tests/"}) {
    if (base) break;
    base = std::strstr(file_, root);
  }
  return std::string(base ? base : file_) + ":" + std::to_string(line_);
}

void Raise::operator&(ErrorStream& s) const { throw Error(s.message(), s.where(), s.hint_text()); }

void Report::operator&(ErrorStream& s) const {
  std::fprintf(stderr, "dpbench: error (ignored in cleanup): %s [%s]\n", s.message().c_str(), s.where().c_str());
}

}  // namespace detail
}  // namespace dpb
