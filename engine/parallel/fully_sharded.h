#pragma once
// FullyShardedDataParallel: one process per rank, as DDP, with every parameter, its
// gradient and its optimizer state sharded across the ranks (PyTorch FSDP2's
// fully_shard, ZeRO-3):
//   - a unit is one of the model's layers (pipeline_units), as the model's wrap policy
//     says (ModelSpec::fsdp_units: GPT-2's blocks; by default every layer with
//     parameters of its own); every other parameter, and one that several layers use
//     (GPT-2's tied token embedding and head), belongs to the root unit, gathered for
//     the whole step;
//   - each parameter is sharded on its own along dim 0 (FSDP2's Shard(0)): cut into W
//     chunks of ceil(rows / W) rows, rank r keeps chunk r as a parameter of shape
//     (its rows, ...) (the last ranks' chunks shorter, or empty); a rank's chunks of a
//     unit's parameters, each padded to the full chunk, lie one after another in one
//     buffer, the input of the unit's all-gather;
//   - before a unit's forward its parameters are all-gathered and copied out of the
//     ranks' chunks into one buffer where each model parameter is a view; after the
//     forward that buffer's memory is freed (reshard after forward; `reshard_after_forward
//     = false` keeps it until the unit's backward, as ZeRO-2), and gathered again before
//     its backward;
//   - the unit's backward writes its gradients into one buffer (each gradient a view
//     into it), which is copied into the ranks' chunks and reduce-scattered (averaged)
//     straight into the shards' gradients, then freed;
//   - while a unit computes, the next `prefetch` units' all-gathers run on the group's
//     communication thread (0: each all-gather only when its unit needs it);
//   - the optimizer steps on the shards: shard_parameters() holds, in model order, this
//     rank's rows of each model parameter (none where it holds no row), with
//     shard_decay_mask() for its weight decay.
// Every rank must build the same model; construction checks it, broadcasts rank 0's
// values and shards them. A model built under init::DeferredInit (meta-device
// initialisation) holds no parameter memory: each rank draws only its shards' rows, from
// rank 0's recipes, so no rank ever holds the whole model.
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/comm/process_group.h"
#include "engine/models/model.h"
#include "engine/optim/optimizer.h"
#include "engine/parallel/collective_record.h"

namespace dpb {

struct FsdpOptions {
  bool reshard_after_forward = true;  // --fsdp-reshard
  int prefetch = 1;                   // --fsdp-prefetch: units all-gathered ahead
  // The type parameters are all-gathered in for training and evaluation (FSDP2's
  // MixedPrecisionPolicy.param_dtype): bf16 sends half the bytes; each rank's shard is
  // rounded to it before the gather, and the gathered values are widened back into the
  // unit's f32 parameters, which the layers convert to their compute type as always.
  // Gradients are reduce-scattered in f32 (reduce_dtype float32), the shards and the
  // optimizer stay f32, and a full state dict is gathered in f32. One rank gathers
  // nothing and uses its f32 shards as they are.
  DType param_dtype = DType::f32;
};

// What one rank holds, in bytes (f32 parameters).
struct FsdpMemory {
  int64_t full_parameter_bytes = 0;    // the whole model's parameters, unsharded
  int64_t shard_parameter_bytes = 0;   // this rank's shards (with each chunk's padding)
  int64_t shard_gradient_bytes = 0;    // their gradients (this rank's rows, without padding)
  int64_t largest_unit_bytes = 0;      // the largest unit's gathered parameters
  int64_t peak_gathered_bytes = 0;     // most gathered parameters alive at once in training
                                       // and evaluation (not gather_full_parameters())
  int64_t peak_full_gradient_bytes = 0;  // most unsharded gradients alive at once
  // What a training forward left allocated for its backward (saved activations and the
  // output), from the device allocator, gathered parameters not counted; the largest
  // of the forwards so far (-1 before the first).
  int64_t activation_bytes = -1;
};

// The wrap policy's units (ModelSpec::fsdp_units; without one, every layer with
// parameters of its own), as the constructor shards a model: for each parameter, the name
// of the layer (pipeline_units) whose unit holds it, or "root" for one that no wrapped
// layer holds alone (a tied weight, a layer the policy does not wrap). The simulator
// replays a profile's FSDP step with the same units (benchmarks/simulate).
inline constexpr const char* kFsdpRootUnit = "root";
std::map<const Parameter*, std::string> fsdp_unit_of_parameters(Model& model);

class FullyShardedDataParallel : private Sequential::LayerHooks {
 public:
  FullyShardedDataParallel(Model& module, comm::ProcessGroup& group, FsdpOptions options = {});
  ~FullyShardedDataParallel() override;
  FullyShardedDataParallel(const FullyShardedDataParallel&) = delete;
  FullyShardedDataParallel& operator=(const FullyShardedDataParallel&) = delete;

  // The model's forward with each unit gathered when it runs. Calling the model's own
  // forward (evaluation) gathers and frees the same way.
  Tensor forward(const Tensor& x);
  // The model's backward; returns when every unit's gradient is reduce-scattered into
  // the shards' gradients (added to them when a step accumulates several batches).
  void backward(Tensor grad_out);

  // What the optimizer steps: this rank's rows of each model parameter that it holds
  // rows of, in model order.
  std::vector<Parameter*> shard_parameters();
  // The model parameter (its index in named_parameters()) each shard is part of, and the
  // first of its rows the shard holds.
  size_t shard_source(size_t shard) const { return shard_members_.at(shard); }
  int64_t shard_first_row(size_t shard) const;
  // Every model parameter in model order: its name, the shape of this rank's rows of it
  // (0 rows where it holds none) and its shard (null where none), for a sharded
  // checkpoint.
  struct LocalShard {
    std::string name;
    Shape shape;
    Parameter* shard = nullptr;
  };
  std::vector<LocalShard> local_shards();
  // The model's weight-decay mask (one flag per model parameter) for shard_parameters().
  std::vector<bool> shard_decay_mask(const std::vector<bool>& model_mask) const;
  // The global L2 norm of the shards' gradients (every rank's squares summed), clipped as
  // torch.nn.utils.clip_grad_norm_ does; returns the norm before clipping.
  double clip_grad_norm(double max_norm);
  // Every unit's full parameters gathered into the model and kept (a full state dict;
  // the model as single-device training would hold it). The next forward shards again.
  void gather_full_parameters();
  // Scatters the model's current (full) parameter values back into the shards (after a
  // checkpoint was loaded into the model).
  void shard_from_model();
  // The optimizer's state over shard_parameters() as full tensors of the model's
  // parameter shapes, indexed by model parameter (every rank's shards all-gathered;
  // every rank must call it), for a full checkpoint.
  std::vector<OptimizerState> full_optimizer_state(const Optimizer& sharded);
  // Loads full optimizer state (a checkpoint's, indexed by model parameter) into the
  // optimizer over shard_parameters(): each rank keeps its chunk.
  void load_full_optimizer_state(Optimizer& sharded, const std::vector<OptimizerState>& full);

  Model& module() { return module_; }
  comm::ProcessGroup& group() { return group_; }
  const FsdpOptions& options() const { return options_; }
  const FsdpMemory& memory() const { return memory_; }
  int units() const { return static_cast<int>(units_.size()); }
  // The last training forward + backward's collectives, in the order they were issued.
  const std::vector<CollectiveRecord>& collectives() const { return last_step_; }
  int64_t backward_begin_ns() const { return backward_begin_ns_; }
  int64_t backward_end_ns() const { return backward_end_ns_; }

 private:
  struct Member {
    Parameter* param = nullptr;
    Shape shape;
    size_t unit = 0;
    int64_t numel = 0, offset = 0;  // offset: within the unit's buffer of whole parameters
    int64_t rows = 0, row = 0;      // dim 0 (1 for a scalar) and the elements of one row
    int64_t chunk_rows = 0;         // ceil(rows / W): one rank's chunk
    int64_t slot = 0;               // where its chunk lies in a rank's buffer of chunks
    std::unique_ptr<Parameter> shard;  // this rank's rows; null when it holds none
    // Rows of rank r's chunk (the last ranks' are shorter, or none).
    int64_t rows_of(int64_t r) const { return std::clamp<int64_t>(rows - r * chunk_rows, 0, chunk_rows); }
  };
  struct Unit {
    std::string name;
    std::vector<size_t> members;
    int64_t total = 0;  // elements of its parameters
    int64_t chunk = 0;  // elements of one rank's chunks, padded (the members' chunk_rows x row)
    Tensor flat;        // this rank's chunks, one after another: the shards' storage
    Tensor sent;        // `flat` in the gather's type while the all-gather is pending
    Tensor gathered;    // every rank's chunks (W x chunk) while the all-gather is pending
    Tensor whole;       // the whole parameters, the members' storage (freed when resharded)
    Tensor grads;       // the gradients its backward writes into (the members' layout)
    std::shared_ptr<comm::Work> gather_work;
    int gather_record = -1;
    bool full = false;      // members' data are views into `whole`
    DType full_dtype = DType::f32;  // the type `whole`'s values were gathered in
    bool released = false;  // full, but its memory freed before backward ended (release_early)
  };
  // One reduce-scatter of a unit: its input (a piece of every rank's chunks), the part
  // of this rank's chunk it fills, and the whole chunk, which becomes the shards'
  // gradients once the unit's last piece is in.
  struct PendingScatter {
    size_t unit;
    Tensor in, piece_out, out;
    bool last = true;
    std::shared_ptr<comm::Work> work;
    int record = -1;
  };

  void before_forward(Sequential& seq, size_t layer) override;
  void after_forward(Sequential& seq, size_t layer) override;
  void before_backward(Sequential& seq, size_t layer) override;
  void after_backward(Sequential& seq, size_t layer) override;

  void broadcast_deferred_from_rank0();
  int unit_of(Sequential& seq, size_t layer) const;
  // Units of one layer each, numbered in forward order before the root.
  size_t layer_units() const { return units_.size() - (root_ >= 0 ? 1 : 0); }
  void attach_gradients(size_t u);
  // The type unit u is gathered in: options_.param_dtype, or f32 for a full state dict
  // and wherever there is nothing to gather (one rank).
  DType gather_dtype(bool full_state) const;
  void start_gather(size_t u, DType dtype);
  static int64_t gather_buffer_bytes(const Unit& unit);
  void drop_gather(Unit& unit);  // the all-gather's buffers and work let go (after its wait)
  void ensure_full(size_t u, bool full_state = false);
  void free_full(size_t u);
  void release_early(size_t u);
  void prefetch_after(size_t u, int direction);
  void reduce_scatter(size_t u);
  void finish_scatter(PendingScatter& p);
  void drain_scatters(size_t keep);
  void note_gathered(int64_t delta);
  void note_grads(int64_t delta);
  int64_t unit_bytes(size_t u) const;
  Shape shard_shape(const Member& m) const;

  Model& module_;
  comm::ProcessGroup& group_;
  FsdpOptions options_;
  Device device_;
  std::vector<Member> members_;
  std::vector<size_t> shard_members_;  // the members with a shard, in model order
  std::vector<Unit> units_;  // forward order; the root unit (shared parameters), if any, last
  int root_ = -1;
  std::map<std::pair<const Sequential*, size_t>, int> unit_at_;
  std::map<std::pair<const Sequential*, size_t>, size_t> layer_pos_;  // place in pipeline_units
  // The first layer (forward order) whose backward reads the root's parameters; after its
  // backward the root's memory is freed (INT64_MAX: none reads them).
  int64_t root_read_until_ = INT64_MAX;
  std::pair<const Sequential*, size_t> last_layer_{nullptr, 0};  // the model's last layer
  std::vector<Sequential*> hooked_;
  std::vector<PendingScatter> scatters_;
  std::vector<CollectiveRecord> collectives_;  // since the last forward()
  std::vector<CollectiveRecord> last_step_;
  FsdpMemory memory_;
  int64_t gathered_now_ = 0, grads_now_ = 0;
  int64_t backward_begin_ns_ = 0, backward_end_ns_ = 0;
};

}  // namespace dpb
