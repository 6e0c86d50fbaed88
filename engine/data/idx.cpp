#include "engine/data/idx.h"

#include "engine/core/file_io.h"

#include <filesystem>
#include <memory>

namespace dpb {

namespace {

uint32_t be32(const std::vector<uint8_t>& d, size_t off) {
  return (uint32_t{d[off]} << 24) | (uint32_t{d[off + 1]} << 16) | (uint32_t{d[off + 2]} << 8) | d[off + 3];
}

std::string hex(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof(b), "0x%08x", v);
  return b;
}

}  // namespace

IdxDataset::IdxDataset(std::string name, const std::string& images_path, const std::string& labels_path, float mean,
                       float std)
    : name_(std::move(name)), mean_(mean), inv_std_(1.0f / std) {
  std::vector<uint8_t> img = read_maybe_gzip(images_path, "dataset file");
  DPB_CHECK(img.size() >= 16) << "'" << images_path << "' is truncated: " << img.size()
                              << " bytes, an IDX image file has a 16-byte header";
  DPB_CHECK(be32(img, 0) == 0x00000803) << "'" << images_path << "' is not an IDX image file: magic "
                                        << hex(be32(img, 0)) << ", expected 0x00000803";
  count_ = be32(img, 4);
  rows_ = be32(img, 8);
  cols_ = be32(img, 12);
  DPB_CHECK(rows_ > 0 && cols_ > 0) << "'" << images_path << "' is corrupt: its header says images of " << rows_ << "x"
                                    << cols_;
  // Three 32-bit fields: their product can exceed 64 bits, so compare without it.
  const auto fits = [&](int64_t a, int64_t b) { return b == 0 || a <= static_cast<int64_t>(img.size()) / b; };
  const bool small = fits(count_, rows_) && fits(count_ * rows_, cols_);
  const size_t expected = small ? 16 + static_cast<size_t>(count_ * rows_ * cols_) : 0;
  DPB_CHECK(small && img.size() == expected) << "'" << images_path << "' is truncated: header says " << count_ << " images of "
                                    << rows_ << "x" << cols_ << " (" << (small ? std::to_string(expected) : "too many")
                                    << " bytes), found " << img.size()
                                    << " bytes";
  pixels_.assign(img.begin() + 16, img.end());

  std::vector<uint8_t> lab = read_maybe_gzip(labels_path, "dataset file");
  DPB_CHECK(lab.size() >= 8) << "'" << labels_path << "' is truncated: " << lab.size()
                             << " bytes, an IDX label file has an 8-byte header";
  DPB_CHECK(be32(lab, 0) == 0x00000801) << "'" << labels_path << "' is not an IDX label file: magic "
                                        << hex(be32(lab, 0)) << ", expected 0x00000801";
  const int64_t n = be32(lab, 4);
  DPB_CHECK(n == count_) << "'" << labels_path << "' has " << n << " labels but '" << images_path << "' has "
                         << count_ << " images";
  DPB_CHECK(lab.size() == 8 + static_cast<size_t>(n)) << "'" << labels_path << "' is truncated: expected "
                                                      << 8 + n << " bytes, found " << lab.size();
  labels_.assign(lab.begin() + 8, lab.end());
  for (size_t i = 0; i < labels_.size(); ++i)
    DPB_CHECK(labels_[i] < 10) << "'" << labels_path << "' is corrupt: label " << int(labels_[i]) << " at index " << i
                               << " (expected 0..9)";
}

void IdxDataset::get(int64_t index, float* x, int32_t* label, float*) const {
  const int64_t n = rows_ * cols_;
  const uint8_t* p = pixels_.data() + index * n;
  for (int64_t i = 0; i < n; ++i) x[i] = (static_cast<float>(p[i]) * (1.0f / 255.0f) - mean_) * inv_std_;
  *label = labels_[static_cast<size_t>(index)];
}

std::unique_ptr<IdxDataset> load_mnist_like(const std::string& name, const std::string& dir, bool train) {
  DPB_CHECK(name == "fashion-mnist" || name == "mnist") << "unknown IDX dataset '" << name
                                                        << "' (valid: fashion-mnist, mnist)";
  const std::string prefix = train ? "train" : "t10k";
  auto find = [&](const std::string& stem) {
    for (const char* ext : {".gz", ""}) {
      const std::string p = dir + "/" + prefix + stem + ext;
      if (std::filesystem::exists(p)) return p;
    }
    DPB_FAIL() << "dataset '" << name << "': neither " << dir << "/" << prefix << stem << ".gz nor " << dir << "/"
               << prefix << stem << " exists (set --data-dir"
               << (name == "fashion-mnist" ? ", or install Debian's dataset-fashion-mnist" : "") << ")";
  };
  // Per-pixel mean and standard deviation of each training set.
  const float mean = name == "mnist" ? 0.1307f : 0.2860f;
  const float std = name == "mnist" ? 0.3081f : 0.3530f;
  return std::make_unique<IdxDataset>(name, find("-images-idx3-ubyte"), find("-labels-idx1-ubyte"), mean, std);
}

}  // namespace dpb
