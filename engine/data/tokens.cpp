#include "engine/data/tokens.h"

#include <filesystem>
#include <fstream>
#include <iterator>

#include "engine/core/rng.h"

namespace dpb {

namespace {
// The most a text corpus may hold: it is read whole into memory.
constexpr size_t kMaxTextBytes = size_t{1} << 30;
}  // namespace

void TokenSequences::get(int64_t, float*, int32_t*, float*) const {
  DPB_FAIL() << "dataset '" << name() << "' holds token sequences: read them with get_tokens";
}

SyntheticTokens::SyntheticTokens(int64_t seq, int64_t vocab, int64_t size, uint64_t seed, int64_t first)
    : TokenSequences(seq, vocab, size), seed_(seed), first_(first) {
  DPB_CHECK(seq >= 1 && vocab >= 2 && size >= 1) << "synthetic tokens: " << size << " sequences of " << seq
                                                 << " tokens over a vocabulary of " << vocab;
}

void SyntheticTokens::get_tokens(int64_t index, int32_t* tokens, int32_t* next) const {
  Generator g(seed_ * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(first_ + index));
  const int64_t m = std::min<int64_t>(vocab_, 64);
  static constexpr int64_t kStrides[] = {1, 2, 3, 5};
  const int64_t start = static_cast<int64_t>(g.below(static_cast<uint64_t>(m)));
  const int64_t stride = kStrides[g.below(4)];
  for (int64_t t = 0; t < seq_; ++t) {
    tokens[t] = static_cast<int32_t>((start + stride * t) % m);
    next[t] = static_cast<int32_t>((start + stride * (t + 1)) % m);
  }
}

TextTokens::TextTokens(const std::string& path, bool train, int64_t seq, int64_t vocab)
    : TokenSequences(seq, vocab, 0) {
  DPB_CHECK(vocab >= 256) << "text: byte-level tokens need a vocabulary of at least 256, the model has " << vocab;
  DPB_CHECK(seq >= 1) << "text: sequences of " << seq << " tokens";
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  DPB_CHECK(!std::filesystem::is_directory(status))
      << "text: '" << path << "' is a directory; --data=text:PATH names one text file";
  if (std::filesystem::is_regular_file(status)) {
    const auto size = std::filesystem::file_size(path, ec);
    DPB_CHECK(ec || size <= kMaxTextBytes) << "text: '" << path << "' has " << size << " bytes; the text dataset "
                                           << "holds its corpus in memory, at most " << kMaxTextBytes << " bytes (1 GiB)";
  }
  std::ifstream in(path, std::ios::binary);
  DPB_CHECK(in) << "text: cannot open '" << path << "' (--data=text:PATH names a text file)";
  // Read in pieces, checking as it goes: a device or pipe that never ends (/dev/zero)
  // is refused at its first NUL byte or at the size limit, not read until memory runs out.
  // Text has no NUL bytes and few control characters (tab, newlines, form feed and
  // carriage return aside); UTF-8's multi-byte sequences are bytes >= 0x80 and pass.
  std::vector<unsigned char> all;
  size_t control = 0;
  std::vector<char> piece(size_t{1} << 20);
  while (in) {
    in.read(piece.data(), static_cast<std::streamsize>(piece.size()));
    const auto got = static_cast<size_t>(in.gcount());
    for (size_t i = 0; i < got; ++i) {
      const auto c = static_cast<unsigned char>(piece[i]);
      DPB_CHECK(c != 0) << "text: '" << path << "' holds NUL bytes: a binary file, not text";
      if (c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\f' && c != '\v') ++control;
    }
    all.insert(all.end(), piece.begin(), piece.begin() + static_cast<std::ptrdiff_t>(got));
    DPB_CHECK(all.size() <= kMaxTextBytes) << "text: '" << path << "' has more than " << kMaxTextBytes
                                           << " bytes; the text dataset holds its corpus in memory, at most 1 GiB";
  }
  DPB_CHECK(!in.bad()) << "text: error reading '" << path << "'";
  DPB_CHECK(!all.empty()) << "text: '" << path << "' is empty";
  DPB_CHECK(control * 100 <= all.size()) << "text: '" << path << "' is " << control * 100 / all.size()
                                         << "% control characters: a binary file, not text";
  const size_t cut = all.size() * 9 / 10;
  if (train) bytes_.assign(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(cut));
  else bytes_.assign(all.begin() + static_cast<std::ptrdiff_t>(cut), all.end());
  size_ = bytes() > seq ? (bytes() - 1) / seq : 0;
  DPB_CHECK(size_ >= 1) << "text: '" << path << "' has " << all.size() << " bytes, too few for one "
                        << (train ? "training" : "validation") << " sequence of " << seq
                        << " tokens (the validation split is the last 10 %)";
}

void TextTokens::get_tokens(int64_t index, int32_t* tokens, int32_t* next) const {
  const unsigned char* p = bytes_.data() + index * seq_;
  for (int64_t t = 0; t < seq_; ++t) {
    tokens[t] = p[t];
    next[t] = p[t + 1];
  }
}

}  // namespace dpb
