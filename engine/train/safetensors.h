#pragma once
// The safetensors format (as read by safetensors.torch.load_file): an 8-byte
// little-endian header length, a JSON header {name: {dtype, shape, data_offsets}, ...,
// "__metadata__": {string: string}}, padded with spaces to 8 bytes, then the raw
// little-endian tensor data. Written atomically (temp file, fsync, rename).
#include <map>
#include <string>
#include <vector>

#include "engine/tensor/tensor.h"

namespace dpb::safetensors {

struct File {
  std::vector<std::pair<std::string, Tensor>> tensors;  // in file order, host tensors
  std::map<std::string, std::string> metadata;
};

void save(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
          const std::map<std::string, std::string>& metadata);
// Throws dpb::Error naming the file and what is wrong with it.
File load(const std::string& path);

}  // namespace dpb::safetensors
