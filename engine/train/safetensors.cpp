#include "engine/train/safetensors.h"

#include <nlohmann/json.hpp>

#include <cstring>

#include "engine/core/error.h"
#include "engine/core/file_io.h"
#include "engine/core/text.h"

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
  DPB_CHECK(bytes.size() >= 8) << "checkpoint '" << escape_untrusted(path) << "' is truncated: " << bytes.size()
                               << " bytes, a safetensors file starts with an 8-byte header length";
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[static_cast<size_t>(i)]);
  DPB_CHECK(n <= bytes.size() - 8) << "checkpoint '" << escape_untrusted(path) << "' is truncated or not a safetensors file: header of "
                                   << n << " bytes in a " << bytes.size() << "-byte file";
  nlohmann::ordered_json header;
  try {
    header = nlohmann::ordered_json::parse(bytes.substr(8, n));
  } catch (const std::exception& e) {
    DPB_FAIL() << "checkpoint '" << escape_untrusted(path) << "' has a corrupt header: " << e.what();
  }
  const size_t base = 8 + n;
  const size_t data_bytes = bytes.size() - base;
  const std::string file = "checkpoint '" + escape_untrusted(path) + "'";
  DPB_CHECK(header.is_object()) << file << ": its header is not a JSON object";
  File f;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string name = escape_untrusted(it.key());
    if (it.key() == "__metadata__") {
      DPB_CHECK(it->is_object()) << file << ": __metadata__ is not an object";
      for (auto m = it->begin(); m != it->end(); ++m) {
        DPB_CHECK(m->is_string()) << file << ": __metadata__." << escape_untrusted(m.key()) << " is not a string";
        f.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    const auto& e = *it;
    DPB_CHECK(e.is_object() && e.contains("dtype") && e.contains("shape") && e.contains("data_offsets"))
        << file << ": tensor '" << name << "' needs dtype, shape and data_offsets";
    DPB_CHECK(e["dtype"].is_string() && (e["dtype"] == "F32" || e["dtype"] == "I32"))
        << file << ": tensor '" << name << "' has dtype " << escape_untrusted(e["dtype"].dump()) << " (supported: F32, I32)";
    const bool f32 = e["dtype"] == "F32";
    // The shape's elements, counted without overflow and bounded by the data present,
    // before anything is allocated.
    DPB_CHECK(e["shape"].is_array() && e["shape"].size() <= 8)
        << file << ": tensor '" << name << "' has a shape that is not a list of at most 8 sizes";
    std::vector<int64_t> shape;
    uint64_t elements = 1;
    for (const auto& d : e["shape"]) {
      DPB_CHECK(d.is_number_unsigned()) << file << ": tensor '" << name << "' has a size that is not a count: "
                                        << escape_untrusted(d.dump());
      const uint64_t v = d.get<uint64_t>();
      DPB_CHECK(v <= data_bytes && !__builtin_mul_overflow(elements, v, &elements) && elements <= data_bytes)
          << file << ": tensor '" << name << "' is larger than the file's " << data_bytes << " data bytes";
      shape.push_back(static_cast<int64_t>(v));
    }
    const auto& o = e["data_offsets"];
    DPB_CHECK(o.is_array() && o.size() == 2 && o[0].is_number_unsigned() && o[1].is_number_unsigned())
        << file << ": tensor '" << name << "' has data_offsets that are not two counts";
    const uint64_t begin = o[0].get<uint64_t>(), end = o[1].get<uint64_t>();
    const uint64_t need = elements * 4;
    DPB_CHECK(begin <= end && end <= data_bytes && end - begin == need)
        << file << " is truncated or corrupt: tensor '" << name << "' " << Shape(shape) << " needs " << need
        << " bytes at offset " << begin << ", the file has " << data_bytes << " data bytes";
    Tensor t = Tensor::empty(Shape(shape), Device::cpu(), f32 ? DType::f32 : DType::i32);
    std::memcpy(t.data(), bytes.data() + base + begin, need);
    f.tensors.emplace_back(it.key(), t);
  }
  return f;
}

}  // namespace dpb::safetensors
