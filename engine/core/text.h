#pragma once
// Text from outside the process (report values, trace names, file contents, wire
// messages) as it may be shown in a message: printable ASCII kept, every other byte as
// \xNN, quotes and backslashes escaped, long text cut with the number of bytes left out.
// So an error about a bad input never writes raw binary or terminal escapes.
#include <cstddef>
#include <string>
#include <string_view>

namespace dpb {

std::string escape_untrusted(std::string_view text, size_t max_chars = 120);

// ASCII letters lower-cased, every other byte as it is (names matched case-insensitively).
std::string ascii_lower(std::string_view text);

}  // namespace dpb
