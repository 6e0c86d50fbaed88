#include "engine/train/checkpoint.h"

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
    by_name.erase(it);
    return t;
  };
  const auto params = model.named_parameters();
  for (const auto& [name, p] : params) p->data().copy_from(take(name, p->data().shape()));
  for (const auto& [name, b] : model.named_buffers()) b->copy_from(take(name, b->shape()));
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
    optimizer.load_state({p->second, key, it->second});
    it = by_name.erase(it);
  }
  TrainPosition pos;
  pos.epoch = std::stoll(meta("epoch"));
  pos.batch = std::stoll(meta("batch"));
  pos.global_step = std::stoll(meta("global_step"));
  pos.seed = std::stoull(meta("seed"));
  return pos;
}

}  // namespace dpb
