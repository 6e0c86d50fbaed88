#include "diagnostics/dpdoctor/json_stream.h"

#include <simdjson.h>

#include <algorithm>
#include <cstring>

#include "engine/core/error.h"
#include "engine/core/text.h"

namespace dpb::doctor {

namespace {
constexpr size_t kChunk = size_t{1} << 19;  // bytes read at a time: small beside any trace, large for zlib
}

JsonStream::JsonStream(const std::string& path, std::string hint) : path_(path), hint_(std::move(hint)) {
  file_ = gzopen(path.c_str(), "rb");
  DPB_CHECK(file_ != nullptr) << "cannot open trace '" << escape_untrusted(path) << "'";
  gzbuffer(file_, 1 << 17);
}

JsonStream::~JsonStream() {
  if (file_) gzclose(file_);
}

bool JsonStream::have(size_t n) {
  while (end_ - pos_ < n) {
    if (eof_) return false;
    if (pos_ > 0) {  // keep only what is not consumed yet
      std::memmove(buf_.data(), buf_.data() + pos_, end_ - pos_);
      offset_ += pos_;
      end_ -= pos_;
      pos_ = 0;
    }
    const size_t want = std::max(kChunk, n - (end_ - pos_));
    if (buf_.size() < end_ + want + simdjson::SIMDJSON_PADDING) buf_.resize(end_ + want + simdjson::SIMDJSON_PADDING);
    const int got = gzread(file_, buf_.data() + end_, static_cast<unsigned>(want));
    if (got < 0) {
      int code = 0;
      const char* msg = gzerror(file_, &code);
      fail(std::string("is corrupt (") + (msg ? msg : "unreadable") + ")");
    }
    if (got == 0) eof_ = true;
    end_ += static_cast<size_t>(got);
  }
  return true;
}

void JsonStream::skip_ws() {
  for (int c = peek(); c == ' ' || c == '\n' || c == '\r' || c == '\t'; c = peek()) ++pos_;
}

void JsonStream::expect(char c, const char* what) {
  skip_ws();
  const int got = get();
  if (got != c) fail(std::string("expected ") + what + " at byte " + std::to_string(offset_ + pos_ - (got >= 0)));
}

// Strings are skipped with memchr to their closing quote (one not escaped by an odd run
// of backslashes); the rest byte by byte over what is buffered.
size_t JsonStream::extent(size_t limit) {
  size_t i = 0;
  int depth = 0;
  bool in_string = false;
  for (;;) {
    if (i >= limit) fail("has a value larger than " + std::to_string(limit) + " bytes at byte " + at());
    if (i >= end_ - pos_ && !have(i + 1)) {
      if (depth == 0 && !in_string && i > 0) return i;  // a scalar at the very end
      fail("ends in the middle of a value (truncated?) at byte " + at());
    }
    const char* p = buf_.data() + pos_;
    const size_t avail = std::min(end_ - pos_, limit);
    while (i < avail) {
      if (in_string) {
        const void* q = std::memchr(p + i, '"', avail - i);
        if (q == nullptr) {
          i = avail;
          break;
        }
        const size_t at_quote = static_cast<size_t>(static_cast<const char*>(q) - p);
        size_t slashes = 0;
        while (slashes < at_quote && p[at_quote - 1 - slashes] == '\\') ++slashes;
        i = at_quote + 1;
        if (slashes % 2 == 1) continue;  // an escaped quote
        in_string = false;
        if (depth == 0) return i;
        continue;
      }
      const char c = p[i];
      if (c == '"') {
        in_string = true;
      } else if (c == '{' || c == '[') {
        if (++depth > kMaxDepth) fail("nests deeper than " + std::to_string(kMaxDepth) + " levels at byte " + at());
      } else if (c == '}' || c == ']') {
        if (depth == 0) return i;  // the end of an enclosing container: a scalar ended
        if (--depth == 0) return i + 1;
      } else if (depth == 0 && (c == ',' || c == ' ' || c == '\n' || c == '\r' || c == '\t')) {
        return i;
      }
      ++i;
    }
  }
}

std::string JsonStream::key() {
  skip_ws();
  if (peek() != '"') fail("expected a key at byte " + at());
  const size_t n = extent(4096);
  std::string k(buf_.data() + pos_ + 1, n >= 2 ? n - 2 : 0);
  pos_ += n;
  return k;
}

void JsonStream::fail(const std::string& what) const {
  DPB_FAIL() << "trace '" << escape_untrusted(path_) << "' " << what << " (" << hint_ << ")";
}

}  // namespace dpb::doctor
