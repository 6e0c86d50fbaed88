#include "engine/train/checkpoint.h"

#include <charconv>
#include <cmath>
#include <map>

#include "dpb/version.h"
#include "engine/train/safetensors.h"

namespace dpb {

void save_checkpoint(const std::string& path, Model& model, const Optimizer& optimizer, const TrainPosition& pos) {
  save_checkpoint(path, model, optimizer.name(), optimizer.state(), pos);
}

void save_checkpoint(const std::string& path, Model& model, const std::string& optimizer_name,
                     const std::vector<OptimizerState>& state, const TrainPosition& pos) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  const auto params = model.named_parameters();
  for (const auto& [name, p] : params) tensors.emplace_back(name, p->data());
  for (const auto& [name, b] : model.named_buffers()) tensors.emplace_back(name, *b);
  for (const auto& s : state) tensors.emplace_back("optimizer." + params.at(s.param).first + "." + s.key, s.value);
  std::map<std::string, std::string> meta{{"format", "pt"},
                                          {"producer", std::string("dpbench ") + kVersion},
                                          {"model", model.spec().name},
                                          {"optimizer", optimizer_name},
                                          {"epoch", std::to_string(pos.epoch)},
                                          {"batch", std::to_string(pos.batch)},
                                          {"global_step", std::to_string(pos.global_step)},
                                          {"seed", std::to_string(pos.seed)}};
  safetensors::save(path, tensors, meta);
}

namespace {

// A tensor of the checkpoint as training can use it: floating point, every value finite.
// A NaN or an infinity (a flipped bit, a run that diverged) would train on as NaN and
// exit 0; it is refused here, naming the file, the tensor and where.
void check_values(const std::string& path, const std::string& name, const Tensor& t) {
  DPB_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::bf16)
      << "checkpoint '" << path << "': tensor '" << name << "' holds " << dtype_name(t.dtype())
      << ", not floating point (F32 or BF16)";
  const std::vector<float> v = t.to_vector();
  for (size_t i = 0; i < v.size(); ++i)
    DPB_CHECK(std::isfinite(v[i])) << "checkpoint '" << path << "': tensor '" << name << "' holds " << v[i]
                                   << " at element " << i << " of " << v.size()
                                   << " (a non-finite value: the file is damaged or the run it saved diverged)";
}

// A metadata field that must be a whole number in [0, max].
int64_t whole(const std::string& path, const std::string& key, const std::string& text, int64_t max) {
  int64_t v = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  DPB_CHECK(ec == std::errc() && end == text.data() + text.size() && v >= 0 && v <= max)
      << "checkpoint '" << path << "': metadata '" << key << "' is '" << text.substr(0, 40)
      << "', not a whole number from 0 to " << max;
  return v;
}

}  // namespace

TrainPosition load_checkpoint(const std::string& path, Model& model, Optimizer& optimizer) {
  safetensors::File f = safetensors::load(path);
  auto meta = [&](const std::string& key) -> const std::string& {
    auto it = f.metadata.find(key);
    DPB_CHECK(it != f.metadata.end()) << "checkpoint '" << path << "' has no '" << key
                                      << "' in its metadata (not written by dpbench?)";
    return it->second;
  };
  DPB_CHECK(meta("model") == model.spec().name) << "checkpoint '" << path << "' is of model '" << meta("model")
                                                << "', this run trains '" << model.spec().name << "'";
  DPB_CHECK(meta("optimizer") == optimizer.name()) << "checkpoint '" << path << "' was trained with "
                                                   << meta("optimizer") << ", this run uses " << optimizer.name();
  std::map<std::string, Tensor> by_name(f.tensors.begin(), f.tensors.end());
  auto take = [&](const std::string& name, const Shape& shape) {
    auto it = by_name.find(name);
    DPB_CHECK(it != by_name.end()) << "checkpoint '" << path << "' has no tensor '" << name << "' " << shape
                                   << " that model '" << model.spec().name << "' needs";
    DPB_CHECK(it->second.shape() == shape) << "checkpoint '" << path << "': tensor '" << name << "' has shape "
                                           << it->second.shape() << ", the model expects " << shape;
    Tensor t = it->second;
    check_values(path, name, t);
    by_name.erase(it);
    return t;
  };
  // Everything is read and checked before anything is changed: a bad checkpoint leaves
  // the model as it was.
  const auto params = model.named_parameters();
  std::vector<std::pair<Tensor*, Tensor>> copies;
  for (const auto& [name, p] : params) copies.emplace_back(&p->data(), take(name, p->data().shape()));
  for (const auto& [name, b] : model.named_buffers()) copies.emplace_back(b, take(name, b->shape()));
  std::vector<OptimizerState> states;
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < params.size(); ++i) index[params[i].first] = i;
  for (auto it = by_name.begin(); it != by_name.end();) {
    const std::string& name = it->first;
    DPB_CHECK(name.rfind("optimizer.", 0) == 0) << "checkpoint '" << path << "' has tensor '" << name
                                                << "', which model '" << model.spec().name << "' does not have";
    const auto dot = name.rfind('.');
    const std::string param = name.substr(10, dot - 10), key = name.substr(dot + 1);
    auto p = index.find(param);
    DPB_CHECK(p != index.end()) << "checkpoint '" << path << "': optimizer state '" << name
                                << "' is for a parameter the model does not have";
    check_values(path, name, it->second);
    if (key == "step") {  // a count of steps: a whole number an int64 holds exactly
      const float step = it->second.numel() == 1 ? it->second.to_vector()[0] : -1.0f;
      DPB_CHECK(step >= 0 && step <= 9007199254740992.0f && std::floor(step) == step)
          << "checkpoint '" << path << "': optimizer state '" << name << "' is " << step
          << ", not a step count (a whole number from 0 to 2^53)";
    }
    states.push_back({p->second, key, it->second});
    it = by_name.erase(it);
  }
  TrainPosition pos;
  constexpr int64_t kMax = int64_t{1} << 53;
  pos.epoch = whole(path, "epoch", meta("epoch"), kMax);
  pos.batch = whole(path, "batch", meta("batch"), kMax);
  pos.global_step = whole(path, "global_step", meta("global_step"), kMax);
  uint64_t seed = 0;
  const std::string& st = meta("seed");
  const auto [end, ec] = std::from_chars(st.data(), st.data() + st.size(), seed);
  DPB_CHECK(ec == std::errc() && end == st.data() + st.size() && !st.empty())
      << "checkpoint '" << path << "': metadata 'seed' is '" << st.substr(0, 40) << "', not a whole number";
  pos.seed = seed;
  for (auto& [to, from] : copies) to->copy_from(from);
  for (const auto& st_ : states) optimizer.load_state(st_);
  return pos;
}

}  // namespace dpb
