#include "engine/parallel/fully_sharded.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "engine/backend/ops.h"
#include "engine/core/clock.h"
#include "engine/core/error.h"
#include "engine/nn/init.h"
#include "engine/nn/tied_linear.h"
#include "engine/parallel/distributed_data_parallel.h"
#include "engine/parallel/pipeline.h"
#include "engine/tensor/allocator.h"
#include "engine/trace/nvtx.h"

namespace dpb {

namespace {
constexpr int64_t kF32 = 4;
// A unit's reduce-scatter input is copied in and sent in pieces of at most this many
// bytes (over all ranks): the copy of a large unit (GPT-2's root, the token embedding)
// never doubles its gradients' memory.
constexpr int64_t kScatterPieceBytes = int64_t{32} << 20;

// Which layers use each parameter (its own layer, and a tied head the weight it computes
// with), and each parameter's owner: the layer whose unit holds it, or layers.size() for
// the root (shared by several layers, or in a layer the wrap policy does not wrap).
struct UnitAssignment {
  std::vector<PipelineUnit> layers;
  std::map<const Parameter*, std::vector<size_t>> users;
  std::vector<size_t> owner;  // per named parameter
};

UnitAssignment assign_units(Model& model, const std::vector<std::pair<std::string, Parameter*>>& named) {
  UnitAssignment a;
  a.layers = pipeline_units(model);
  for (size_t l = 0; l < a.layers.size(); ++l) {
    for (Parameter* p : a.layers[l].module->parameters()) a.users[p].push_back(l);
    if (auto* tied = dynamic_cast<TiedLinear*>(a.layers[l].module); tied && tied->weight())
      a.users[tied->weight()].push_back(l);
  }
  const auto& policy = model.spec().fsdp_units;
  auto wrapped = [&](const std::string& layer) {
    if (policy.empty()) return true;
    for (const auto& prefix : policy)
      if (layer.rfind(prefix, 0) == 0) return true;
    return false;
  };
  a.owner.resize(named.size());
  for (size_t i = 0; i < named.size(); ++i) {
    const auto it = a.users.find(named[i].second);
    const bool own = it != a.users.end() && it->second.size() == 1 && wrapped(a.layers[it->second.front()].name);
    a.owner[i] = own ? it->second.front() : a.layers.size();
  }
  return a;
}
}

std::map<const Parameter*, std::string> fsdp_unit_of_parameters(Model& model) {
  const auto named = model.named_parameters();
  const UnitAssignment a = assign_units(model, named);
  std::map<const Parameter*, std::string> unit;
  for (size_t i = 0; i < named.size(); ++i)
    unit[named[i].second] = a.owner[i] == a.layers.size() ? kFsdpRootUnit : a.layers[a.owner[i]].name;
  return unit;
}

FullyShardedDataParallel::FullyShardedDataParallel(Model& module, comm::ProcessGroup& group, FsdpOptions options)
    : module_(module), group_(group), options_(options), device_(Device::cpu()) {
  DPB_CHECK(options_.prefetch >= 0) << "FSDP: prefetch must be >= 0 units, got " << options_.prefetch;
  DPB_CHECK(options_.param_dtype == DType::f32 || options_.param_dtype == DType::bf16)
      << "FSDP: parameters are all-gathered in F32 or BF16, not " << dtype_name(options_.param_dtype);
  const auto named = module_.named_parameters();
  DPB_CHECK(!named.empty()) << "FSDP: model '" << module_.spec().name << "' has no parameters to shard";
  device_ = named.front().second->data().device();
  for (const auto& [name, p] : named)
    DPB_CHECK(p->data().dtype() == DType::f32)
        << "FSDP: parameter '" << name << "' is " << dtype_name(p->data().dtype()) << "; sharding needs f32 parameters";
  check_same_parameter_shapes(module_, group_, "FSDP");
  {
    // Every rank starts from rank 0's values: those it holds, and the recipes of those
    // not drawn yet (a model built under init::DeferredInit), each rank drawing its rows.
    std::vector<Tensor*> state;
    for (auto* p : module_.parameters()) {
      if (p->data().deferred_values()) continue;
      if (p->data().layout() != Layout::plain) p->data() = p->data().to_plain();
      state.push_back(&p->data());
    }
    for (auto& [name, b] : module_.named_buffers()) state.push_back(b);
    broadcast_from_rank0(group_, state);
    broadcast_deferred_from_rank0();
  }

  const UnitAssignment assigned = assign_units(module_, named);
  const auto& layers = assigned.layers;
  const auto& users = assigned.users;
  const auto& owner = assigned.owner;
  std::vector<int> unit_of_layer(layers.size(), -1);
  bool any_root = false;
  for (size_t o : owner) {
    if (o == layers.size())
      any_root = true;
    else
      unit_of_layer[o] = 0;
  }
  for (size_t l = 0; l < layers.size(); ++l) {
    if (unit_of_layer[l] < 0) continue;
    unit_of_layer[l] = static_cast<int>(units_.size());
    Unit u;
    u.name = layers[l].name;
    units_.push_back(std::move(u));
    unit_at_[{layers[l].owner, layers[l].index}] = unit_of_layer[l];
  }
  if (any_root) {
    root_ = static_cast<int>(units_.size());
    Unit u;
    u.name = kFsdpRootUnit;
    units_.push_back(std::move(u));
  }
  const int world = group_.size(), rank = group_.rank();
  members_.resize(named.size());
  for (size_t i = 0; i < named.size(); ++i) {
    Member& m = members_[i];
    m.param = named[i].second;
    m.shape = m.param->data().shape();
    m.numel = m.shape.numel();
    m.rows = m.shape.ndim() == 0 ? 1 : m.shape[0];
    m.row = m.rows > 0 ? m.numel / m.rows : 0;
    m.chunk_rows = (m.rows + world - 1) / world;
    m.unit = owner[i] == layers.size() ? static_cast<size_t>(root_) : static_cast<size_t>(unit_of_layer[owner[i]]);
    Unit& unit = units_[m.unit];
    unit.members.push_back(i);
    m.offset = unit.total;
    unit.total += m.numel;
    m.slot = unit.chunk;
    unit.chunk += m.chunk_rows * m.row;
  }
  for (Unit& unit : units_) {
    unit.flat = Tensor::zeros({unit.chunk}, device_);
    for (size_t i : unit.members) {
      Member& m = members_[i];
      if (const int64_t mine = m.rows_of(rank); mine > 0) {
        const int64_t first = rank * m.chunk_rows;
        Tensor part = unit.flat.slice(m.slot, m.slot + mine * m.row).view(shard_shape(m));
        if (const DeferredValues* v = m.param->data().deferred_values())
          init::draw(*v, first * m.row, mine * m.row, part);  // only this rank's rows are ever drawn
        else
          part.copy_from(m.param->data().view({m.numel}).slice(first * m.row, (first + mine) * m.row));
        m.shard = std::make_unique<Parameter>(part);
        shard_members_.push_back(i);
        memory_.shard_gradient_bytes += mine * m.row * kF32;
      }
      m.param->data() = Tensor();
      m.param->grad() = Tensor();
      m.param->zero_grad();
    }
    memory_.full_parameter_bytes += unit.total * kF32;
    memory_.shard_parameter_bytes += unit.chunk * kF32;
    memory_.largest_unit_bytes = std::max(memory_.largest_unit_bytes, unit.total * kF32);
  }
  std::sort(shard_members_.begin(), shard_members_.end());
  if (!layers.empty()) last_layer_ = {layers.back().owner, layers.back().index};
  // The root stays gathered through backward only as far as a layer that uses it reads
  // it there: GPT-2's tied head does (its input gradient), the token embedding does not
  // (it only scatters its gradient), so the root is freed after the head's backward.
  for (size_t l = 0; l < layers.size(); ++l) {
    layer_pos_[{layers[l].owner, layers[l].index}] = l;
    if (root_ < 0) continue;
    bool uses_root = false;
    for (size_t i : units_[static_cast<size_t>(root_)].members)
      if (const auto it = users.find(members_[i].param); it != users.end())
        uses_root = uses_root || std::count(it->second.begin(), it->second.end(), l) > 0;
    if (uses_root && layers[l].module->backward_reads_parameters())
      root_read_until_ = std::min(root_read_until_, static_cast<int64_t>(l));
  }
  for (const auto& l : layers)
    if (std::find(hooked_.begin(), hooked_.end(), l.owner) == hooked_.end()) hooked_.push_back(l.owner);
  for (Sequential* s : hooked_) s->set_layer_hooks(this);
  // The whole model's parameters, just dropped, sit in the allocator's cache in sizes
  // training never asks for again: they go back to the system.
  empty_cache(device_);
}

FullyShardedDataParallel::~FullyShardedDataParallel() {
  for (Sequential* s : hooked_) s->set_layer_hooks(nullptr);
}

Shape FullyShardedDataParallel::shard_shape(const Member& m) const {
  if (m.shape.ndim() == 0) return m.rows_of(group_.rank()) > 0 ? Shape{} : Shape{0};
  Shape s = m.shape;
  s[0] = m.rows_of(group_.rank());
  return s;
}

int64_t FullyShardedDataParallel::shard_first_row(size_t shard) const {
  return group_.rank() * members_[shard_members_.at(shard)].chunk_rows;
}

std::vector<Parameter*> FullyShardedDataParallel::shard_parameters() {
  std::vector<Parameter*> out;
  for (size_t i : shard_members_) out.push_back(members_[i].shard.get());
  return out;
}

std::vector<bool> FullyShardedDataParallel::shard_decay_mask(const std::vector<bool>& model_mask) const {
  DPB_CHECK(model_mask.empty() || model_mask.size() == members_.size())
      << "FSDP: a weight-decay mask of " << model_mask.size() << " flags for " << members_.size() << " parameters";
  std::vector<bool> out;
  for (size_t i : shard_members_) out.push_back(model_mask.empty() || model_mask[i]);
  return out;
}

int FullyShardedDataParallel::unit_of(Sequential& seq, size_t layer) const {
  auto it = unit_at_.find({&seq, layer});
  return it == unit_at_.end() ? -1 : it->second;
}

int64_t FullyShardedDataParallel::unit_bytes(size_t u) const { return units_[u].total * kF32; }

void FullyShardedDataParallel::note_gathered(int64_t delta) {
  gathered_now_ += delta;
  memory_.peak_gathered_bytes = std::max(memory_.peak_gathered_bytes, gathered_now_);
}

void FullyShardedDataParallel::note_grads(int64_t delta) {
  grads_now_ += delta;
  memory_.peak_full_gradient_bytes = std::max(memory_.peak_full_gradient_bytes, grads_now_);
}

DType FullyShardedDataParallel::gather_dtype(bool full_state) const {
  return full_state || group_.size() == 1 ? DType::f32 : options_.param_dtype;
}

// The all-gather's own buffers: its output, and its input where that is a converted copy
// of the shards.
int64_t FullyShardedDataParallel::gather_buffer_bytes(const Unit& unit) {
  const size_t sent = unit.sent.shares_storage_with(unit.flat) ? 0 : unit.sent.nbytes();
  return static_cast<int64_t>(unit.gathered.nbytes() + sent);
}

void FullyShardedDataParallel::drop_gather(Unit& unit) {
  note_gathered(-gather_buffer_bytes(unit));
  unit.gathered = unit.sent = Tensor();
  unit.gather_work.reset();
  unit.gather_record = -1;
}

void FullyShardedDataParallel::start_gather(size_t u, DType dtype) {
  Unit& unit = units_[u];
  if (group_.size() == 1) return;  // one rank: its chunks are the whole parameters
  const auto size = static_cast<int64_t>(dtype_size(dtype));
  unit.sent = dtype == DType::f32 ? unit.flat : unit.flat.to_dtype(dtype);
  unit.gathered = Tensor::empty({unit.chunk * group_.size()}, device_, dtype);
  note_gathered(gather_buffer_bytes(unit));
  CollectiveRecord c{"all-gather", unit.name, unit.chunk * size, now_ns(), 0, 0, 0, 0};
  unit.gather_work = group_.allgather(unit.gathered, unit.sent);
  unit.gather_record = static_cast<int>(collectives_.size());
  collectives_.push_back(c);
}

void FullyShardedDataParallel::ensure_full(size_t u, bool full_state) {
  Unit& unit = units_[u];
  const DType dtype = gather_dtype(full_state);
  if (unit.full && unit.full_dtype == dtype) return;
  if (unit.full) free_full(u);  // gathered in another type (a full state dict after bf16 training, or back)
  if (unit.gather_work && unit.gathered.dtype() != dtype) {
    // A prefetch in the other type: finished and dropped.
    unit.gather_work->wait();
    drop_gather(unit);
  }
  unit.full_dtype = dtype;
  if (group_.size() == 1) {
    // Nothing to gather (nor allocated): the members are views into the shards themselves
    // (one rank's chunks are the whole parameters, unpadded, one after another).
    unit.whole = unit.flat;
    for (size_t i : unit.members) {
      Member& m = members_[i];
      m.param->data() = unit.whole.slice(m.offset, m.offset + m.numel).view(m.shape);
    }
    unit.full = true;
    return;
  }
  if (!unit.gather_work) start_gather(u, dtype);
  CollectiveRecord& c = collectives_[static_cast<size_t>(unit.gather_record)];
  std::optional<trace::NvtxRange> range;  // Nsight: the training thread waiting for it
  if (trace::nvtx_enabled()) range.emplace("fsdp: wait for the all-gather of " + unit.name);
  c.wait_begin_ns = now_ns();
  unit.gather_work->wait();
  c.wait_end_ns = now_ns();
  c.started_ns = unit.gather_work->started_ns();
  c.finished_ns = unit.gather_work->finished_ns();
  // The unit keeps one storage for its whole parameters for good: freed (released) after
  // its forward, refilled here. A layer's backward computes with the views it saved in
  // forward, which see the values again once the copy below has filled the storage.
  if (!unit.whole.defined()) unit.whole = Tensor::empty({unit.total}, device_);
  else unit.whole.refill_storage();
  note_gathered(unit.total * kF32);
  // Each rank's rows of each member, out of that rank's chunks (FSDP2's copy-out),
  // widened to f32 where they were gathered narrower.
  const int world = group_.size();
  for (size_t i : unit.members) {
    const Member& m = members_[i];
    for (int r = 0; r < world; ++r)
      if (const int64_t n = m.rows_of(r); n > 0) {
        const int64_t at = m.offset + r * m.chunk_rows * m.row, from = r * unit.chunk + m.slot;
        const Tensor part = unit.gathered.slice(from, from + n * m.row);
        unit.whole.slice(at, at + n * m.row).copy_from(dtype == DType::f32 ? part : part.to_dtype(DType::f32));
      }
    members_[i].param->data() = unit.whole.slice(m.offset, m.offset + m.numel).view(m.shape);
  }
  drop_gather(unit);
  unit.full = true;
}

// The unit's memory freed while its parameters keep their views (their shapes and
// devices, which the layers' remaining backward still asks for; nothing reads them).
void FullyShardedDataParallel::release_early(size_t u) {
  Unit& unit = units_[u];
  if (!unit.full || unit.released || group_.size() == 1) return;
  unit.whole.release_storage();
  note_gathered(-unit_bytes(u));
  unit.released = true;
}

void FullyShardedDataParallel::free_full(size_t u) {
  Unit& unit = units_[u];
  if (!unit.full) return;
  for (size_t i : unit.members) members_[i].param->data() = Tensor();
  if (unit.released) {
    unit.released = false;
  } else if (group_.size() > 1) {
    // Frees the memory itself, not only this class's references: a layer's saved views
    // (Linear keeps its weight for backward) would otherwise hold the whole unit until its
    // backward, as FSDP2 frees by resizing the unsharded parameters' storage to zero.
    unit.whole.release_storage();
    note_gathered(-unit_bytes(u));
  } else {
    unit.whole = Tensor();
  }
  unit.full = false;
}

void FullyShardedDataParallel::prefetch_after(size_t u, int direction) {
  if (options_.prefetch <= 0) return;
  // Layer units are numbered in forward order (the root, after them, is never prefetched).
  const auto pos = static_cast<std::ptrdiff_t>(u);
  for (int k = 1; k <= options_.prefetch; ++k) {
    const auto next = pos + direction * k;
    if (next < 0 || next >= static_cast<std::ptrdiff_t>(layer_units())) return;
    const auto v = static_cast<size_t>(next);
    if (!units_[v].full && !units_[v].gather_work) start_gather(v, gather_dtype(false));
  }
}

void FullyShardedDataParallel::before_forward(Sequential& seq, size_t layer) {
  // The root's parameters (shared by several layers) are gathered before the first layer.
  if (root_ >= 0) ensure_full(static_cast<size_t>(root_));
  const int u = unit_of(seq, layer);
  if (u < 0) return;
  ensure_full(static_cast<size_t>(u));
  prefetch_after(static_cast<size_t>(u), +1);
}

void FullyShardedDataParallel::after_forward(Sequential& seq, size_t layer) {
  const bool training = module_.is_training();
  if (!training && std::pair<const Sequential*, size_t>(&seq, layer) == last_layer_) {
    // Evaluation: nothing waits for a backward; everything goes back to its shards.
    for (size_t u = 0; u < units_.size(); ++u) free_full(u);
    return;
  }
  const int u = unit_of(seq, layer);
  if (u < 0) return;
  // The last unit's backward comes next: it stays gathered (as FSDP keeps the root's).
  if (!training || (options_.reshard_after_forward && u + 1 != static_cast<int>(layer_units()))) free_full(static_cast<size_t>(u));
}

void FullyShardedDataParallel::before_backward(Sequential& seq, size_t layer) {
  const int u = unit_of(seq, layer);
  if (u < 0) return;
  ensure_full(static_cast<size_t>(u));
  attach_gradients(static_cast<size_t>(u));
  prefetch_after(static_cast<size_t>(u), -1);
}

// The unit's backward writes its gradients into one buffer, each a view into it;
// reduce_scatter zeroes what the backward did not write, so the buffer is not cleared
// beforehand.
void FullyShardedDataParallel::attach_gradients(size_t u) {
  Unit& unit = units_[u];
  if (unit.grads.defined()) return;
  unit.grads = Tensor::empty({unit.total}, device_);
  note_grads(unit.grads.numel() * kF32);
  for (size_t i : unit.members) {
    Member& m = members_[i];
    m.param->set_grad(unit.grads.slice(m.offset, m.offset + m.numel).view(m.shape));
  }
}

void FullyShardedDataParallel::after_backward(Sequential& seq, size_t layer) {
  if (root_ >= 0) {
    auto it = layer_pos_.find({&seq, layer});
    if (it != layer_pos_.end() && static_cast<int64_t>(it->second) == root_read_until_) release_early(static_cast<size_t>(root_));
  }
  const int u = unit_of(seq, layer);
  if (u < 0) return;
  reduce_scatter(static_cast<size_t>(u));
  free_full(static_cast<size_t>(u));
}

void FullyShardedDataParallel::reduce_scatter(size_t u) {
  Unit& unit = units_[u];
  attach_gradients(u);  // a unit whose gradients were never attached reduces zeros
  PendingScatter p;
  p.unit = u;
  for (size_t i : unit.members) {
    Member& m = members_[i];
    Tensor slot = unit.grads.slice(m.offset, m.offset + m.numel);
    if (m.param->grad_is_zero() || !m.param->grad().defined())
      slot.zero();  // this backward did not reach it
    else if (!m.param->grad().shares_storage_with(unit.grads))
      slot.copy_from(m.param->grad().to_plain().view({m.numel}));  // a layer replaced its gradient's storage
    m.param->grad() = Tensor();
    m.param->zero_grad();
  }
  const int world = group_.size();
  if (world == 1) {  // one rank: the gradients are laid out as its chunks
    p.in = std::move(unit.grads);
    unit.grads = Tensor();
    p.out = p.piece_out = p.in;
    finish_scatter(p);
    return;
  }
  const Tensor out = Tensor::empty({unit.chunk}, device_);
  note_grads(out.numel() * kF32);
  // Elements [a, b) of every rank's chunks at a time (one piece, unless the unit is
  // large): each rank's rows of each member copied in, padding zeroed (FSDP2's
  // copy-in), reduce-scattered into [a, b) of this rank's chunk. A piece waits for the
  // one before it; the last stays in flight.
  const int64_t piece = std::max<int64_t>(1, kScatterPieceBytes / kF32 / world);
  for (int64_t a = 0; a < unit.chunk; a += piece) {
    const int64_t b = std::min(unit.chunk, a + piece), width = b - a;
    PendingScatter q;
    q.unit = u;
    q.out = out;
    q.piece_out = out.slice(a, b);
    q.last = b == unit.chunk;
    q.in = Tensor::empty({width * world}, device_);
    note_grads(q.in.numel() * kF32);
    for (size_t i : unit.members) {
      const Member& m = members_[i];
      const int64_t lo = std::max(a, m.slot), hi = std::min(b, m.slot + m.chunk_rows * m.row);
      if (lo >= hi) continue;
      for (int r = 0; r < world; ++r) {
        const int64_t end = std::min(hi, m.slot + m.rows_of(r) * m.row);  // past it: padding
        const int64_t to = r * width - a, from = m.offset + r * m.chunk_rows * m.row - m.slot;
        if (end > lo) q.in.slice(to + lo, to + end).copy_from(unit.grads.slice(from + lo, from + end));
        if (end < hi) q.in.slice(to + std::max(lo, end), to + hi).zero();
      }
    }
    q.record = static_cast<int>(collectives_.size());
    collectives_.push_back({"reduce-scatter", unit.name, q.in.numel() * kF32, now_ns(), 0, 0, 0, 0});
    q.work = group_.reduce_scatter(q.piece_out, q.in, comm::ReduceOp::avg);
    scatters_.push_back(std::move(q));
    if (b < unit.chunk) drain_scatters(0);
  }
  note_grads(-unit.grads.numel() * kF32);
  unit.grads = Tensor();
  // At most two in flight: the one just issued runs while the next unit's backward computes.
  drain_scatters(1);
}

void FullyShardedDataParallel::finish_scatter(PendingScatter& p) {
  if (p.work) {
    CollectiveRecord& c = collectives_[static_cast<size_t>(p.record)];
    std::optional<trace::NvtxRange> range;
    if (trace::nvtx_enabled()) range.emplace("fsdp: wait for the reduce-scatter of " + units_[p.unit].name);
    c.wait_begin_ns = now_ns();
    p.work->wait();
    c.wait_end_ns = now_ns();
    c.started_ns = p.work->started_ns();
    c.finished_ns = p.work->finished_ns();
  }
  note_grads(-(p.piece_out.shares_storage_with(p.in) ? 0 : p.in.numel()) * kF32);
  if (!p.last) return;
  for (size_t i : units_[p.unit].members) {
    Member& m = members_[i];
    if (!m.shard) continue;
    Parameter& s = *m.shard;
    const Tensor part = p.out.slice(m.slot, m.slot + m.rows_of(group_.rank()) * m.row).view(shard_shape(m));
    if (!s.grad_is_zero() && s.grad().defined()) {
      ops::axpy(1.0f, part, s.grad());  // accumulating (micro-batches)
    } else {
      // The reduced buffer becomes the shard's gradient: no copy (it is dropped for the
      // next step's, or added to while accumulating).
      s.set_grad(part);
      s.note_grad_written();
    }
  }
  note_grads(-p.out.numel() * kF32);
}

void FullyShardedDataParallel::drain_scatters(size_t keep) {
  while (scatters_.size() > keep) {
    finish_scatter(scatters_.front());
    scatters_.erase(scatters_.begin());
  }
}

Tensor FullyShardedDataParallel::forward(const Tensor& x) {
  collectives_.clear();
  // The shards' gradients of the last step are dropped once the optimizer has used them
  // and zeroed them (as PyTorch's zero_grad sets them to None): each backward reduces into
  // fresh buffers. While a step accumulates several batches they stay and are added to.
  for (size_t i : shard_members_)
    if (members_[i].shard->grad_is_zero()) members_[i].shard->grad() = Tensor();
  std::vector<Tensor*> buffers;
  for (auto& [name, b] : module_.named_buffers()) buffers.push_back(b);
  broadcast_from_rank0(group_, buffers);  // as DDP's broadcast_buffers
  const int64_t before = memory_stats(device_).current_bytes - gathered_now_;
  Tensor out = module_.forward(x);
  if (module_.is_training())
    memory_.activation_bytes =
        std::max(memory_.activation_bytes, memory_stats(device_).current_bytes - gathered_now_ - before);
  return out;
}

void FullyShardedDataParallel::backward(Tensor grad_out) {
  backward_begin_ns_ = now_ns();
  // The root's parameters collect gradients from several layers over the whole backward.
  if (root_ >= 0) attach_gradients(static_cast<size_t>(root_));
  module_.backward_consuming(std::move(grad_out));
  backward_end_ns_ = now_ns();
  if (root_ >= 0) {
    reduce_scatter(static_cast<size_t>(root_));
    free_full(static_cast<size_t>(root_));
  }
  // Units the backward did not reach (nothing before them needed a gradient) are freed too.
  for (size_t u = 0; u < units_.size(); ++u) free_full(u);
  drain_scatters(0);
  last_step_ = collectives_;
}

double FullyShardedDataParallel::clip_grad_norm(double max_norm) {
  DPB_CHECK(max_norm > 0) << "gradient clipping needs a positive norm, got " << max_norm;
  double sq = 0;
  for (size_t i : shard_members_)
    if (!members_[i].shard->grad_is_zero()) sq += ops::sum_squares(members_[i].shard->grad());
  Tensor total = Tensor::full({1}, static_cast<float>(sq), device_);
  group_.allreduce(total, comm::ReduceOp::sum)->wait();
  const double norm = std::sqrt(static_cast<double>(total.item()));
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0)
    for (size_t i : shard_members_)
      if (!members_[i].shard->grad_is_zero()) ops::scale(members_[i].shard->grad(), static_cast<float>(coef));
  return norm;
}

}  // namespace dpb
