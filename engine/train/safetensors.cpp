#include "engine/train/safetensors.h"

#include <nlohmann/json.hpp>

#include <cstring>

#include "engine/core/file_io.h"

namespace dpb::safetensors {

void save(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
          const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  std::vector<Tensor> host;
  for (const auto& [name, t] : tensors) {
    Tensor h = t.device().is_cpu() ? t.to_plain() : t.to(Device::cpu());
    DPB_CHECK(!header.contains(name)) << "checkpoint: tensor name '" << name << "' appears twice";
    std::vector<int64_t> shape = h.shape().dims();
    header[name] = {{"dtype", std::string(dtype_name(h.dtype()))},
                    {"shape", shape},
                    {"data_offsets", {offset, offset + h.nbytes()}}};
    offset += h.nbytes();
    host.push_back(h);
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out;
  out.reserve(8 + json.size() + offset);
  const uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out += json;
  for (const Tensor& h : host) out.append(reinterpret_cast<const char*>(h.data()), h.nbytes());
  write_file_atomic(path, out);
}

File load(const std::string& path) {
  const std::string bytes = read_file(path);
  DPB_CHECK(bytes.size() >= 8) << "checkpoint '" << path << "' is truncated: " << bytes.size()
                               << " bytes, a safetensors file starts with an 8-byte header length";
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[static_cast<size_t>(i)]);
  DPB_CHECK(n <= bytes.size() - 8) << "checkpoint '" << path << "' is truncated or not a safetensors file: header of "
                                   << n << " bytes in a " << bytes.size() << "-byte file";
  nlohmann::ordered_json header;
  try {
    header = nlohmann::ordered_json::parse(bytes.substr(8, n));
  } catch (const std::exception& e) {
    DPB_FAIL() << "checkpoint '" << path << "' has a corrupt header: " << e.what();
  }
  const size_t base = 8 + n;
  File f;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      for (auto m = it->begin(); m != it->end(); ++m) f.metadata[m.key()] = m->get<std::string>();
      continue;
    }
    const auto& e = *it;
    const std::string dtype = e.at("dtype");
    DPB_CHECK(dtype == "F32" || dtype == "I32") << "checkpoint '" << path << "': tensor '" << it.key() << "' has dtype "
                                                << dtype << " (supported: F32, I32)";
    std::vector<int64_t> shape = e.at("shape").get<std::vector<int64_t>>();
    const auto offs = e.at("data_offsets").get<std::vector<size_t>>();
    Tensor t = Tensor::empty(Shape(shape), Device::cpu(), dtype == "F32" ? DType::f32 : DType::i32);
    DPB_CHECK(offs.size() == 2 && offs[1] >= offs[0] && offs[1] - offs[0] == t.nbytes() && base + offs[1] <= bytes.size())
        << "checkpoint '" << path << "' is truncated or corrupt: tensor '" << it.key() << "' "
        << Shape(shape) << " needs " << t.nbytes() << " bytes at offset " << (offs.empty() ? 0 : offs[0])
        << ", the file has " << bytes.size() - base << " data bytes";
    std::memcpy(t.data(), bytes.data() + base + offs[0], t.nbytes());
    f.tensors.emplace_back(it.key(), t);
  }
  return f;
}

}  // namespace dpb::safetensors
