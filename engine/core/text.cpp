#include "engine/core/text.h"

#include <fmt/format.h>

namespace dpb {

std::string escape_untrusted(std::string_view text, size_t max_chars) {
  std::string out;
  size_t used = 0;
  for (; used < text.size() && out.size() < max_chars; ++used) {
    const auto c = static_cast<unsigned char>(text[used]);
    if (c == '\\' || c == '"') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  if (used < text.size()) out += fmt::format("... ({} more bytes)", text.size() - used);
  return out;
}

std::string ascii_lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return out;
}

}  // namespace dpb
