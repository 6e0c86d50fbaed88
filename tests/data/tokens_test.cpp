// Token-sequence datasets: byte-level text (read from a real text file every Debian
// system has) and the synthetic sequences, and their batches of i32 tokens.
#include "engine/data/tokens.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "engine/data/registry.h"

namespace dpb {
namespace {

const char* kText = "/usr/share/common-licenses/GPL-3";

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(TextTokens, BytesInWindowsWithNextTokenTargets) {
  if (!std::filesystem::exists(kText)) GTEST_SKIP() << kText << " is not on this system";
  const std::string text = read_all(kText);
  const int64_t T = 32;
  TextTokens train(kText, true, T, 512), val(kText, false, T, 512);
  const int64_t cut = static_cast<int64_t>(text.size() * 9 / 10);
  EXPECT_EQ(train.bytes(), cut);
  EXPECT_EQ(val.bytes(), static_cast<int64_t>(text.size()) - cut);
  EXPECT_EQ(train.size(), (cut - 1) / T);
  EXPECT_EQ(train.sample_shape(), (Shape{T}));
  EXPECT_EQ(train.input_dtype(), DType::i32);
  std::vector<int32_t> x(T), y(T);
  train.get_tokens(3, x.data(), y.data());
  for (int64_t t = 0; t < T; ++t) {
    EXPECT_EQ(x[static_cast<size_t>(t)], static_cast<unsigned char>(text[static_cast<size_t>(3 * T + t)]));
    EXPECT_EQ(y[static_cast<size_t>(t)], static_cast<unsigned char>(text[static_cast<size_t>(3 * T + t + 1)]));
  }
  val.get_tokens(val.size() - 1, x.data(), y.data());  // the last window stays inside the file
  EXPECT_EQ(y.back(), static_cast<unsigned char>(text[static_cast<size_t>(cut + val.size() * T)]));
}

TEST(TextTokens, BadFilesAndVocabulariesAreClearErrors) {
  EXPECT_THROW(TextTokens("/nonexistent/file.txt", true, 8, 512), Error);
  const auto tiny = std::filesystem::temp_directory_path() / "dpb_tokens_tiny.txt";
  std::ofstream(tiny) << "short";
  EXPECT_THROW(TextTokens(tiny.string(), false, 8, 512), Error);  // no validation window of 8
  std::filesystem::remove(tiny);
  if (std::filesystem::exists(kText)) {
    EXPECT_THROW(TextTokens(kText, true, 8, 100), Error);  // bytes need a vocabulary of 256
  }
  std::ofstream(tiny) << "";
  EXPECT_THROW(TextTokens(tiny.string(), true, 8, 512), Error);  // empty
  std::filesystem::remove(tiny);
  // A binary file: this very test program.
  const auto self = std::filesystem::read_symlink("/proc/self/exe");
  try {
    TextTokens t(self.string(), true, 8, 512);
    ADD_FAILURE() << "a binary file was read as text";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("binary file"), std::string::npos) << e.what();
  }
}

// Paths that are not one text file: a directory is named as such, and a device that never
// ends is refused at its first bytes, not read until memory runs out.
TEST(TextTokens, DirectoriesAndEndlessDevicesAreRefusedByName) {
  const auto dir = std::filesystem::temp_directory_path();
  try {
    TextTokens t(dir.string(), true, 8, 512);
    ADD_FAILURE() << "a directory was read as text";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'" + dir.string() + "' is a directory"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--data=text:PATH"), std::string::npos) << e.what();
  }
  try {
    TextTokens t("/dev/zero", true, 8, 512);
    ADD_FAILURE() << "/dev/zero was read as text";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("NUL bytes"), std::string::npos) << e.what();
  }
}

// The size limit and the binary-file checks pass every real text file at hand (the
// system's licence texts, GPL-3 among them).
TEST(TextTokens, EveryRealTextFilePassesTheChecks) {
  const std::filesystem::path dir = "/usr/share/common-licenses";
  if (!std::filesystem::is_directory(dir)) GTEST_SKIP() << dir << " is not on this system";
  int read = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (!e.is_regular_file() || e.file_size() < 200) continue;
    EXPECT_NO_THROW(TextTokens(e.path().string(), true, 8, 512)) << e.path();
    ++read;
  }
  EXPECT_GT(read, 5);
}

TEST(SyntheticTokens, LearnableDeterministicSequences) {
  SyntheticTokens a(16, 512, 100, 7), b(16, 512, 100, 7), other(16, 512, 100, 8);
  std::vector<int32_t> x(16), y(16), x2(16), y2(16);
  bool differs = false;
  for (int64_t i = 0; i < 20; ++i) {
    a.get_tokens(i, x.data(), y.data());
    b.get_tokens(i, x2.data(), y2.data());
    EXPECT_EQ(x, x2);
    EXPECT_EQ(y, y2);
    for (size_t t = 0; t + 1 < 16; ++t) EXPECT_EQ(y[t], x[t + 1]) << "targets are the next tokens";
    // An arithmetic sequence modulo 64: each token follows from the two before it.
    for (size_t t = 2; t < 16; ++t) EXPECT_EQ(x[t], ((2 * x[t - 1] - x[t - 2]) % 64 + 64) % 64);
    other.get_tokens(i, x2.data(), y2.data());
    differs |= x != x2;
  }
  EXPECT_TRUE(differs) << "another seed gives other sequences";
}

TEST(SyntheticTokens, BatchesAreI32TokensAndTargets) {
  DatasetRequest r;
  r.sample_shape = Shape{8};
  r.input_dtype = DType::i32;
  r.width = 512;
  const DatasetSplits s = load_dataset(r);
  Batch b = make_batch(*s.train, {0, 5, 9});
  EXPECT_EQ(b.x.shape(), (Shape{3, 8}));
  EXPECT_EQ(b.x.dtype(), DType::i32);
  EXPECT_EQ(b.target.shape(), (Shape{3, 8}));
  EXPECT_EQ(b.target.dtype(), DType::i32);
  std::vector<int32_t> x(8), y(8);
  s.train->get_tokens(5, x.data(), y.data());
  EXPECT_EQ(b.x.to_labels()[8 + 3], x[3]);
  EXPECT_EQ(b.target.to_labels()[8 + 7], y[7]);
  float f;
  int32_t label;
  EXPECT_THROW(s.train->get(0, &f, &label, nullptr), Error);
}

TEST(TextTokens, RegistryNeedsAFileAndALanguageModel) {
  DatasetRequest r;
  r.name = "text";
  r.sample_shape = Shape{8};
  r.input_dtype = DType::i32;
  r.width = 512;
  EXPECT_THROW(load_dataset(r), Error);  // no file
  r.dir = kText;
  r.input_dtype = DType::f32;
  EXPECT_THROW(load_dataset(r), Error);  // an image model
}

}  // namespace
}  // namespace dpb
