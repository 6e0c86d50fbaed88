#include "engine/train/checkpoint.h"

#include <charconv>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dpb/version.h"
#include "engine/train/safetensors.h"

namespace dpb {

namespace {

std::map<std::string, std::string> metadata(Model& model, const std::string& optimizer_name, const TrainPosition& pos) {
  return {{"format", "pt"},
          {"producer", std::string("dpbench ") + kVersion},
          {"model", model.spec().name},
          {"optimizer", optimizer_name},
          {"epoch", std::to_string(pos.epoch)},
          {"batch", std::to_string(pos.batch)},
          {"global_step", std::to_string(pos.global_step)},
          {"seed", std::to_string(pos.seed)}};
}

}  // namespace

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
  safetensors::save(path, tensors, metadata(model, optimizer_name, pos));
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

// One checkpoint file read and checked, before anything is changed: its metadata names
// this model and optimizer, and each tensor is taken by name, with its shape and finite
// values checked; what is left must be optimizer state of parameters named in `index`.
class CheckpointReader {
 public:
  CheckpointReader(std::string path, Model& model, const Optimizer& optimizer)
      : path_(std::move(path)), file_(safetensors::load(path_)), model_(model) {
    DPB_CHECK(meta("model") == model.spec().name) << "checkpoint '" << path_ << "' is of model '" << meta("model")
                                                  << "', this run trains '" << model.spec().name << "'";
    DPB_CHECK(meta("optimizer") == optimizer.name()) << "checkpoint '" << path_ << "' was trained with "
                                                     << meta("optimizer") << ", this run uses " << optimizer.name();
    by_name_.insert(file_.tensors.begin(), file_.tensors.end());
  }
  const std::string& meta(const std::string& key) const {
    auto it = file_.metadata.find(key);
    DPB_CHECK(it != file_.metadata.end()) << "checkpoint '" << path_ << "' has no '" << key
                                          << "' in its metadata (not written by dpbench?)";
    return it->second;
  }
  Tensor take(const std::string& name, const Shape& shape) {
    auto it = by_name_.find(name);
    DPB_CHECK(it != by_name_.end()) << "checkpoint '" << path_ << "' has no tensor '" << name << "' " << shape
                                    << " that model '" << model_.spec().name << "' needs";
    DPB_CHECK(it->second.shape() == shape) << "checkpoint '" << path_ << "': tensor '" << name << "' has shape "
                                           << it->second.shape() << ", the model expects " << shape;
    Tensor t = it->second;
    check_values(path_, name, t);
    by_name_.erase(it);
    return t;
  }
  // The optimizer state left, each for the parameter `index` gives its name.
  std::vector<OptimizerState> optimizer_state(const std::map<std::string, size_t>& index) {
    std::vector<OptimizerState> states;
    for (auto it = by_name_.begin(); it != by_name_.end();) {
      const std::string& name = it->first;
      DPB_CHECK(name.rfind("optimizer.", 0) == 0) << "checkpoint '" << path_ << "' has tensor '" << name
                                                  << "', which model '" << model_.spec().name << "' does not have";
      const auto dot = name.rfind('.');
      const std::string param = name.substr(10, dot - 10), key = name.substr(dot + 1);
      auto p = index.find(param);
      DPB_CHECK(p != index.end()) << "checkpoint '" << path_ << "': optimizer state '" << name
                                  << "' is for a parameter the model does not have";
      check_values(path_, name, it->second);
      if (key == "step") {  // a count of steps: a whole number an int64 holds exactly
        const float step = it->second.numel() == 1 ? it->second.to_vector()[0] : -1.0f;
        DPB_CHECK(step >= 0 && step <= 9007199254740992.0f && std::floor(step) == step)
            << "checkpoint '" << path_ << "': optimizer state '" << name << "' is " << step
            << ", not a step count (a whole number from 0 to 2^53)";
      }
      states.push_back({p->second, key, it->second});
      it = by_name_.erase(it);
    }
    return states;
  }
  TrainPosition position() const;

 private:
  std::string path_;
  safetensors::File file_;
  Model& model_;
  std::map<std::string, Tensor> by_name_;
};

TrainPosition CheckpointReader::position() const {
  TrainPosition pos;
  constexpr int64_t kMax = int64_t{1} << 53;
  pos.epoch = whole(path_, "epoch", meta("epoch"), kMax);
  pos.batch = whole(path_, "batch", meta("batch"), kMax);
  pos.global_step = whole(path_, "global_step", meta("global_step"), kMax);
  uint64_t seed = 0;
  const std::string& st = meta("seed");
  const auto [end, ec] = std::from_chars(st.data(), st.data() + st.size(), seed);
  DPB_CHECK(ec == std::errc() && end == st.data() + st.size() && !st.empty())
      << "checkpoint '" << path_ << "': metadata 'seed' is '" << st.substr(0, 40) << "', not a whole number";
  pos.seed = seed;
  return pos;
}

}  // namespace

TrainPosition load_checkpoint(const std::string& path, Model& model, Optimizer& optimizer) {
  CheckpointReader f(path, model, optimizer);
  // Everything is read and checked before anything is changed: a bad checkpoint leaves
  // the model as it was.
  const auto params = model.named_parameters();
  std::vector<std::pair<Tensor*, Tensor>> copies;
  for (const auto& [name, p] : params) copies.emplace_back(&p->data(), f.take(name, p->data().shape()));
  for (const auto& [name, b] : model.named_buffers()) copies.emplace_back(b, f.take(name, b->shape()));
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < params.size(); ++i) index[params[i].first] = i;
  const std::vector<OptimizerState> states = f.optimizer_state(index);
  const TrainPosition pos = f.position();
  for (auto& [to, from] : copies) to->copy_from(from);
  for (const auto& st : states) optimizer.load_state(st);
  return pos;
}

std::string sharded_checkpoint_file(const std::string& dir, int rank, int world) {
  return (std::filesystem::path(dir) / fmt::format("rank-{:05d}-of-{:05d}.safetensors", rank, world)).string();
}

void save_sharded_checkpoint(const std::string& dir, Model& model, FullyShardedDataParallel& fsdp,
                             const Optimizer& optimizer, const TrainPosition& pos) {
  const int rank = fsdp.group().rank(), world = fsdp.group().size();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  DPB_CHECK(std::filesystem::is_directory(dir)) << "sharded checkpoint: cannot make the directory '" << dir
                                                << "'" << (ec ? ": " + ec.message() : std::string());
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::vector<std::string> shard_names;  // by place in the optimizer's parameters
  for (const auto& s : fsdp.local_shards()) {
    tensors.emplace_back(s.name, s.shard ? s.shard->data() : Tensor::empty(s.shape, Device::cpu()));
    if (s.shard) shard_names.push_back(s.name);
  }
  for (const auto& [name, b] : model.named_buffers()) tensors.emplace_back(name, *b);
  for (const auto& st : optimizer.state())
    tensors.emplace_back("optimizer." + shard_names.at(st.param) + "." + st.key, st.value);
  auto meta = metadata(model, optimizer.name(), pos);
  meta["world_size"] = std::to_string(world);
  meta["rank"] = std::to_string(rank);
  meta["sharding"] = "dim0";
  safetensors::save(sharded_checkpoint_file(dir, rank, world), tensors, meta);
}

TrainPosition load_sharded_checkpoint(const std::string& dir, Model& model, FullyShardedDataParallel& fsdp,
                                      Optimizer& optimizer) {
  const int rank = fsdp.group().rank(), world = fsdp.group().size();
  const std::string path = sharded_checkpoint_file(dir, rank, world);
  if (!std::filesystem::exists(path)) {
    // What the directory holds instead: another world size's files, or none.
    std::set<int> worlds;
    std::error_code ec;
    auto digits = [](std::string_view s) { return s.find_first_not_of("0123456789") == std::string_view::npos; };
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      // rank-RRRRR-of-WWWWW.safetensors
      const std::string f = e.path().filename().string();
      if (f.size() == 31 && f.rfind("rank-", 0) == 0 && f.compare(10, 4, "-of-") == 0 &&
          f.compare(19, 12, ".safetensors") == 0 && digits(std::string_view(f).substr(5, 5)) &&
          digits(std::string_view(f).substr(14, 5)))
        worlds.insert(std::stoi(f.substr(14, 5)));
    }
    const std::string why =
        worlds.empty() ? std::string(" (no rank-RRRRR-of-WWWWW.safetensors files at all)")
                       : fmt::format(" (it was written by {} rank(s): resume with that many, or save a full checkpoint "
                                     "with --save-format=full to change the world size)",
                                     fmt::join(worlds, ", "));
    DPB_CHECK(false) << "sharded checkpoint '" << dir << "' has no file for rank " << rank << " of " << world << why;
  }
  CheckpointReader f(path, model, optimizer);
  DPB_CHECK(f.meta("world_size") == std::to_string(world) && f.meta("rank") == std::to_string(rank))
      << "sharded checkpoint '" << path << "' says it is rank " << f.meta("rank") << " of " << f.meta("world_size")
      << ", not " << rank << " of " << world;
  std::vector<std::pair<Tensor*, Tensor>> copies;
  std::map<std::string, size_t> index;  // shard name -> its place among the optimizer's parameters
  for (const auto& s : fsdp.local_shards()) {
    Tensor t = f.take(s.name, s.shape);
    if (!s.shard) continue;
    const size_t place = index.size();
    index[s.name] = place;
    copies.emplace_back(&s.shard->data(), t);
  }
  for (const auto& [name, b] : model.named_buffers()) copies.emplace_back(b, f.take(name, b->shape()));
  const std::vector<OptimizerState> states = f.optimizer_state(index);
  const TrainPosition pos = f.position();
  // Every rank's file of the same save: a rank whose write failed left the previous one.
  const auto step = static_cast<float>(pos.global_step);
  Tensor range = Tensor::from_vector({2}, {step, -step}, fsdp.shard_parameters().empty()
                                                             ? Device::cpu()
                                                             : fsdp.shard_parameters().front()->data().device());
  fsdp.group().allreduce(range, comm::ReduceOp::max)->wait();
  const auto r = range.to_vector();
  DPB_CHECK(r[0] == -r[1]) << "sharded checkpoint '" << dir << "': its ranks' files are of different steps ("
                           << -r[1] << " to " << r[0] << "): a save did not complete on every rank";
  for (auto& [to, from] : copies) to->copy_from(from);
  for (const auto& st : states) optimizer.load_state(st);
  return pos;
}

}  // namespace dpb
