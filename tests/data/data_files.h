#pragma once
// Writers for small dataset files in the published formats, for tests.
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace dpb::testing {

inline std::filesystem::path fresh_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / ("dpb_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

inline void put_be32(std::vector<uint8_t>& v, uint32_t x) {
  for (int s = 24; s >= 0; s -= 8) v.push_back(static_cast<uint8_t>(x >> s));
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes, bool gzip) {
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
  } else {
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                static_cast<std::streamsize>(bytes.size()));
  }
}

// IDX images: pixel (i, r, c) = (i + r + c) % 256; labels: i % 10.
inline void write_idx(const std::string& dir, const std::string& prefix, int n, int rows, int cols, bool gzip) {
  std::vector<uint8_t> img, lab;
  put_be32(img, 0x00000803);
  put_be32(img, static_cast<uint32_t>(n));
  put_be32(img, static_cast<uint32_t>(rows));
  put_be32(img, static_cast<uint32_t>(cols));
  for (int i = 0; i < n; ++i)
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) img.push_back(static_cast<uint8_t>((i + r + c) % 256));
  put_be32(lab, 0x00000801);
  put_be32(lab, static_cast<uint32_t>(n));
  for (int i = 0; i < n; ++i) lab.push_back(static_cast<uint8_t>(i % 10));
  const std::string ext = gzip ? ".gz" : "";
  write_bytes(dir + "/" + prefix + "-images-idx3-ubyte" + ext, img, gzip);
  write_bytes(dir + "/" + prefix + "-labels-idx1-ubyte" + ext, lab, gzip);
}

// CIFAR-10 batch file: record i has label (i * 3) % 10 and pixels (i + p) % 256.
inline void write_cifar_batch(const std::string& path, int records, int first = 0) {
  std::vector<uint8_t> b;
  for (int i = first; i < first + records; ++i) {
    b.push_back(static_cast<uint8_t>((i * 3) % 10));
    for (int p = 0; p < 3072; ++p) b.push_back(static_cast<uint8_t>((i + p) % 256));
  }
  write_bytes(path, b, false);
}

}  // namespace dpb::testing
