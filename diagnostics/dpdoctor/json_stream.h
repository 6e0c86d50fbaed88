#pragma once
// A JSON document read a value at a time from a file, plain or gzipped, without holding
// the whole of it: the bytes are decompressed in chunks into a buffer that always keeps
// simdjson's padding after the data, so one value (a trace event) can be handed to
// simdjson in place. Used for PyTorch profiler traces, whose event lists run to
// gigabytes.
//
// Every failure (unreadable or corrupt file, a value larger than its bound, nesting
// deeper than kMaxDepth, a value cut off by the end of the file) is one dpb::Error that
// names the file and the byte offset.
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dpb::doctor {

class JsonStream {
 public:
  static constexpr int kMaxDepth = 256;

  // `hint` ends every error message: what the user should give instead.
  JsonStream(const std::string& path, std::string hint);
  ~JsonStream();
  JsonStream(const JsonStream&) = delete;
  JsonStream& operator=(const JsonStream&) = delete;

  // Makes at least `n` bytes available from pos(); false at the end of the file.
  bool have(size_t n);
  int peek() { return have(1) ? static_cast<unsigned char>(buf_[pos_]) : -1; }
  int get() {
    const int c = peek();
    if (c >= 0) ++pos_;
    return c;
  }
  void skip_ws();
  // Skips whitespace and consumes `c`, or fails naming `what` was expected.
  void expect(char c, const char* what);
  // The length of the JSON value at pos() (at most `limit` bytes), without consuming it.
  size_t extent(size_t limit);
  // A key (a short string), returned raw: the keys looked for have no escapes.
  std::string key();

  const char* data() const { return buf_.data() + pos_; }
  size_t capacity_from_pos() const { return buf_.size() - pos_; }  // data and padding
  void advance(size_t n) { pos_ += n; }
  std::string at() const { return std::to_string(offset_ + pos_); }  // the byte offset, as text
  [[noreturn]] void fail(const std::string& what) const;

 private:
  std::string path_, hint_;
  gzFile file_ = nullptr;
  std::vector<char> buf_;
  size_t pos_ = 0, end_ = 0;
  uint64_t offset_ = 0;
  bool eof_ = false;
};

}  // namespace dpb::doctor
