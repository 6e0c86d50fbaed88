// FullyShardedDataParallel's state as checkpoints see it: the full parameters and
// optimizer state gathered from every rank's shards (a full state dict) and scattered back,
// and each rank's own shards by parameter name (a sharded checkpoint).
#include <algorithm>
#include <cstring>
#include <map>
#include <type_traits>

#include "engine/core/error.h"
#include "engine/parallel/distributed_data_parallel.h"
#include "engine/parallel/fully_sharded.h"

namespace dpb {

// Each deferred parameter's recipe (the distribution and the generator's state, its
// bytes carried in f32 words) as rank 0 built it; every rank must have built the same
// parameters deferred.
void FullyShardedDataParallel::broadcast_deferred_from_rank0() {
  static_assert(std::is_trivially_copyable_v<Generator>);
  constexpr size_t kGen = (sizeof(Generator) + sizeof(float) - 1) / sizeof(float);
  constexpr size_t kWords = 3 + kGen;  // deferred?, kind, scale, generator
  const auto named = module_.named_parameters();
  std::vector<float> words(named.size() * kWords, 0.0f);
  for (size_t i = 0; i < named.size(); ++i) {
    const DeferredValues* v = named[i].second->data().deferred_values();
    if (!v) continue;
    float* w = words.data() + i * kWords;
    w[0] = 1;
    w[1] = v->kind == DeferredValues::Kind::uniform ? 0.0f : 1.0f;
    w[2] = v->scale;
    std::memcpy(w + 3, &v->start, sizeof(Generator));
  }
  Tensor t = Tensor::from_vector({static_cast<int64_t>(words.size())}, words, device_);
  std::vector<Tensor*> one{&t};
  broadcast_from_rank0(group_, one);
  const auto got = t.to_vector();
  for (size_t i = 0; i < named.size(); ++i) {
    Parameter& p = *named[i].second;
    const float* w = got.data() + i * kWords;
    DPB_CHECK((w[0] != 0) == (p.data().deferred_values() != nullptr))
        << "FSDP: parameter '" << named[i].first << "' is " << (w[0] != 0 ? "" : "not ")
        << "deferred on rank 0 but " << (w[0] != 0 ? "not " : "") << "on rank " << group_.rank()
        << " (every rank must build the model the same way)";
    if (w[0] == 0) continue;
    auto v = std::make_shared<DeferredValues>();
    v->kind = w[1] == 0 ? DeferredValues::Kind::uniform : DeferredValues::Kind::normal;
    v->scale = w[2];
    std::memcpy(static_cast<void*>(&v->start), w + 3, sizeof(Generator));  // trivially copyable
    p.data() = Tensor::deferred(p.data().shape(), p.data().device(), std::move(v));
  }
}

std::vector<FullyShardedDataParallel::LocalShard> FullyShardedDataParallel::local_shards() {
  const auto named = module_.named_parameters();
  std::vector<LocalShard> out;
  for (size_t i = 0; i < members_.size(); ++i) {
    const Member& m = members_[i];
    out.push_back({named[i].first, shard_shape(m), m.shard.get()});
  }
  return out;
}

void FullyShardedDataParallel::gather_full_parameters() {
  // A full state dict holds every parameter by definition: not counted in the peak,
  // which is what training held.
  const int64_t peak = memory_.peak_gathered_bytes;
  for (size_t u = 0; u < units_.size(); ++u) ensure_full(u, /*full_state=*/true);
  memory_.peak_gathered_bytes = peak;
}

void FullyShardedDataParallel::shard_from_model() {
  for (size_t u = 0; u < units_.size(); ++u) {
    Unit& unit = units_[u];
    DPB_CHECK(unit.full) << "FSDP: unit '" << unit.name << "' is not gathered; nothing to shard from";
    for (size_t i : unit.members) {
      Member& m = members_[i];
      if (!m.shard) continue;
      const int64_t first = group_.rank() * m.chunk_rows;
      const Tensor whole = m.param->data().to_plain().view({m.numel});
      m.shard->data().copy_from(whole.slice(first * m.row, (first + m.rows_of(group_.rank())) * m.row));
    }
  }
}

// Per unit and state key, every rank's rows laid out as its chunks and all-gathered, then
// copied out into each member's whole shape. Which keys exist, and the step counts,
// are agreed over the group first (a rank may hold no part of a unit).
std::vector<OptimizerState> FullyShardedDataParallel::full_optimizer_state(const Optimizer& sharded) {
  const std::vector<std::string> keys{"momentum_buffer", "exp_avg", "exp_avg_sq"};
  // By member: its part's state, per key, and its step.
  std::map<std::pair<size_t, std::string>, Tensor> mine;
  std::vector<float> steps(units_.size(), 0.0f);
  std::vector<float> present(units_.size() * keys.size(), 0.0f);
  for (const OptimizerState& s : sharded.state()) {
    const size_t i = shard_members_.at(s.param);
    const size_t u = members_[i].unit;
    if (s.key == "step") {
      steps[u] = std::max(steps[u], s.value.item());
      continue;
    }
    const auto k = static_cast<size_t>(std::find(keys.begin(), keys.end(), s.key) - keys.begin());
    DPB_CHECK(k < keys.size()) << "FSDP: optimizer state '" << s.key << "' cannot be gathered";
    present[u * keys.size() + k] = 1.0f;
    mine[{i, s.key}] = s.value;
  }
  Tensor agreed = Tensor::from_vector({static_cast<int64_t>(present.size())}, present, device_);
  group_.allreduce(agreed, comm::ReduceOp::max)->wait();
  Tensor step_max = Tensor::from_vector({static_cast<int64_t>(steps.size())}, steps, device_);
  group_.allreduce(step_max, comm::ReduceOp::max)->wait();
  const auto has = agreed.to_vector(), step = step_max.to_vector();
  std::vector<OptimizerState> out;
  const int64_t world = group_.size();
  for (size_t u = 0; u < units_.size(); ++u) {
    const Unit& unit = units_[u];
    for (size_t k = 0; k < keys.size(); ++k) {
      if (has[u * keys.size() + k] == 0.0f) continue;
      Tensor flat = Tensor::zeros({unit.chunk}, device_);
      for (size_t i : unit.members) {
        auto it = mine.find({i, keys[k]});
        if (it == mine.end()) continue;
        const Member& m = members_[i];
        const int64_t n = m.rows_of(group_.rank()) * m.row;
        flat.slice(m.slot, m.slot + n).copy_from(it->second.to_plain().view({n}));
      }
      Tensor all = Tensor::empty({unit.chunk * world}, device_);
      group_.allgather(all, flat)->wait();
      for (size_t i : unit.members) {
        const Member& m = members_[i];
        Tensor whole = Tensor::zeros({m.numel}, device_);
        for (int64_t r = 0; r < world; ++r)
          if (const int64_t n = m.rows_of(r) * m.row; n > 0) {
            const int64_t at = r * m.chunk_rows * m.row, from = r * unit.chunk + m.slot;
            whole.slice(at, at + n).copy_from(all.slice(from, from + n));
          }
        out.push_back({i, keys[k], whole.view(m.shape)});
      }
    }
    if (step[u] > 0)
      for (size_t i : unit.members) out.push_back({i, "step", Tensor::full({}, step[u], device_)});
  }
  return out;
}

void FullyShardedDataParallel::load_full_optimizer_state(Optimizer& sharded, const std::vector<OptimizerState>& full) {
  std::vector<int> index(members_.size(), -1);  // member -> its shard's place in shard_parameters()
  for (size_t k = 0; k < shard_members_.size(); ++k) index[shard_members_[k]] = static_cast<int>(k);
  for (const OptimizerState& s : full) {
    const Member& m = members_.at(s.param);
    if (index[s.param] < 0) continue;  // no part of it on this rank
    const auto at = static_cast<size_t>(index[s.param]);
    if (s.key == "step") {
      sharded.load_state({at, s.key, s.value});
      continue;
    }
    const int64_t first = group_.rank() * m.chunk_rows;
    const Tensor whole = s.value.to(device_).to_plain().view({m.numel});
    sharded.load_state(
        {at, s.key, whole.slice(first * m.row, (first + m.rows_of(group_.rank())) * m.row).view(shard_shape(m)).clone()});
  }
}

}  // namespace dpb
