#include "engine/data/cifar10.h"

#include <filesystem>
#include <fstream>

namespace dpb {

namespace {
constexpr float kMean[3] = {0.4914f, 0.4822f, 0.4465f};
constexpr float kStd[3] = {0.2470f, 0.2435f, 0.2616f};
}  // namespace

Cifar10Dataset::Cifar10Dataset(const std::string& dir, bool train) {
  std::vector<std::string> files;
  if (train) {
    for (int i = 1; i <= 5; ++i) files.push_back(dir + "/data_batch_" + std::to_string(i) + ".bin");
  } else {
    files.push_back(dir + "/test_batch.bin");
  }
  for (const auto& path : files) {
    DPB_CHECK(std::filesystem::exists(path)) << "CIFAR-10 file '" << path << "' does not exist (set --data-dir to "
                                             << "the folder of the binary version: data_batch_1..5.bin, test_batch.bin)";
    const auto bytes = std::filesystem::file_size(path);
    DPB_CHECK(bytes > 0 && bytes % kRecordBytes == 0)
        << "CIFAR-10 file '" << path << "' is truncated or corrupt: " << bytes << " bytes is not a whole number of "
        << kRecordBytes << "-byte records";
    std::ifstream in(path, std::ios::binary);
    std::vector<uint8_t> rec(kRecordBytes);
    for (uint64_t r = 0; r < bytes / kRecordBytes; ++r) {
      in.read(reinterpret_cast<char*>(rec.data()), kRecordBytes);
      DPB_CHECK(in.good()) << "reading CIFAR-10 file '" << path << "' failed at record " << r;
      DPB_CHECK(rec[0] < 10) << "CIFAR-10 file '" << path << "' is corrupt: label " << int(rec[0]) << " in record "
                             << r << " (expected 0..9)";
      labels_.push_back(rec[0]);
      pixels_.insert(pixels_.end(), rec.begin() + 1, rec.end());
    }
  }
}

void Cifar10Dataset::get(int64_t index, float* x, int32_t* label, float*) const {
  const uint8_t* p = pixels_.data() + index * (kRecordBytes - 1);
  for (int c = 0; c < 3; ++c) {
    const float scale = 1.0f / (255.0f * kStd[c]), shift = kMean[c] / kStd[c];
    for (int i = 0; i < 1024; ++i) x[c * 1024 + i] = static_cast<float>(p[c * 1024 + i]) * scale - shift;
  }
  *label = labels_[static_cast<size_t>(index)];
}

}  // namespace dpb
