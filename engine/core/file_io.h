#pragma once
// Atomic file writes: write an unnamed temporary file in the same directory (O_TMPFILE,
// else a named one), fsync it, name it and rename it over the target, fsync the
// directory. Readers see the old file or the new one, never a half-written one; a
// failure leaves the previous file intact, and a process killed while writing leaves no
// temporary file.
#include <string>
#include <string_view>
#include <vector>
#include <cstdint>

namespace dpb {

void write_file_atomic(const std::string& path, std::string_view contents);
// Throws dpb::Error (naming the path and the reason) if `path` could not be written
// atomically: its directory is missing or not writable, or it names a directory.
void check_writable(const std::string& path);
std::string read_file(const std::string& path);
// A whole file, gunzipped when it is gzip (plain files pass through). Errors name the
// path as `what` ("dataset file", "trace"); more than `limit` bytes uncompressed is an
// error (a corrupt file or a decompression bomb), never an unbounded allocation.
std::vector<uint8_t> read_maybe_gzip(const std::string& path, const std::string& what,
                                     size_t limit = size_t{1} << 30);

}  // namespace dpb
