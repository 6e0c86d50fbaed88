#pragma once
// Tensor parallelism within a node, as Megatron-LM (Shoeybi et al., 2019, section 3):
// every rank of the group holds a part of each large layer and sees the whole batch.
// What is cut is the model's own declared plan (ModelSpec::tp_plan, beside its
// definition, as torchtitan's parallelize plans): this applier knows no model.
//   - colwise: a Linear's outputs (a rank keeps its rows of the weight and bias; in
//     `blocks` blocks for a fused projection: its heads' query, key and value rows). Its
//     input is the whole activation (Megatron's f: identity forward, all-reduce of its
//     gradient in the backward).
//   - rowwise: a Linear's inputs (its columns of the weight), the partial products summed
//     by one all-reduce in the forward, the (replicated) bias added once.
//   - vocab: an Embedding's rows [r V/W, (r+1) V/W), each lookup's partial rows summed
//     by an all-reduce; vocab_head: the tied output head over those rows, each rank
//     computing its part of the logits, and the loss the vocabulary-parallel
//     cross-entropy (max, sum of exponentials and the label's logit of each part,
//     all-gathered: one collective of 4 floats a token), never the whole logits.
//   - heads: attention over 1/W of its heads (its q/k/v colwise, its output rowwise).
//   - anything no rule names is replicated: its gradients are the same on every rank.
// GPT-2's plan (engine/models/registry.cpp) is Megatron's: two all-reduces forward and
// two backward per block. The MLPs' (mlp, widemlp): fc1 colwise, fc2 rowwise.
// The model is cut in place: each module the plan names is replaced by one holding this
// rank's parts, with the same parameter names and order (so the optimizer, weight decay
// mask and checkpoints see the usual names). gather_full_parameters() puts the whole
// modules back.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/comm/process_group.h"
#include "engine/models/model.h"
#include "engine/nn/tied_linear.h"
#include "engine/optim/optimizer.h"
#include "engine/parallel/collective_record.h"

namespace dpb {

// How a parameter is cut across the ranks: along `dim` (0: rows, 1: columns), in
// `blocks` blocks of equal size each cut into one part per rank (3 for the fused
// query/key/value projection: a rank keeps its part of each of q, k and v).
struct TpSplit {
  int dim = 0;
  int blocks = 1;
};

// The group's collectives for the layers: each is waited for at once (tensor
// parallelism's collectives sit between the products that need them) and recorded.
class TpComm {
 public:
  explicit TpComm(comm::ProcessGroup& group) : group_(group) {}
  comm::ProcessGroup& group() { return group_; }
  int rank() const { return group_.rank(); }
  int size() const { return group_.size(); }
  // Sums t over the ranks, in place.
  void all_reduce(Tensor& t, const std::string& unit);
  // Every rank's t in rank order: (ranks, t's shape...).
  Tensor all_gather(const Tensor& t, const std::string& unit);
  // The collectives since the last take().
  std::vector<CollectiveRecord> take();

 private:
  void record(CollectiveRecord c, comm::Work& work);
  comm::ProcessGroup& group_;
  std::vector<CollectiveRecord> records_;
};

// A layer that holds parts of its parameters, and how each is cut.
class TpLayer {
 public:
  virtual ~TpLayer() = default;
  virtual std::vector<std::pair<Parameter*, TpSplit>> splits() = 0;
};

// This rank's part of a Linear(in, out) with bias: weight (out_rows, in_cols), bias
// (bias_len), as the subclass cuts them. What both cuts share: the product on this rank's
// part (with the bias or without), saving what the backward needs, and the backward's
// parameter gradients and input gradient.
class SplitLinear : public Module, public TpLayer {
 protected:
  SplitLinear(TpComm& comm, int64_t in, int64_t out, std::string unit, Shape weight, int64_t bias);
  Tensor product(const Tensor& x, bool with_bias);
  Tensor gradients(const Tensor& dy);

  TpComm& comm_;
  int64_t in_, out_;  // the whole layer's
  std::string unit_;
  Parameter* weight_;
  Parameter* bias_;
  Tensor x_, w_;
};

// y = x W_r^T + b_r: this rank's rows of a Linear(in, out) (out / W of them, from each
// of `blocks` blocks). The input gradient, a partial sum, is all-reduced.
class ColumnParallelLinear : public SplitLinear {
 public:
  ColumnParallelLinear(TpComm& comm, int64_t in, int64_t out, int blocks, std::string unit);
  Tensor forward(const Tensor& x) override { return product(x, true); }
  Tensor backward(const Tensor& grad_out) override;
  std::string type_name() const override { return "ColumnParallelLinear"; }
  int64_t forward_flops(const Shape& input, Shape* output) const override;
  std::unique_ptr<Module> clone_structure() const override;
  std::vector<std::pair<Parameter*, TpSplit>> splits() override;

 private:
  int blocks_;
};

// y = sum over ranks of x_r W_r^T, + b: this rank's columns of a Linear(in, out), its
// input the matching part of the features; the partial products are all-reduced and the
// (replicated) bias added once.
class RowParallelLinear : public SplitLinear {
 public:
  RowParallelLinear(TpComm& comm, int64_t in, int64_t out, std::string unit);
  Tensor forward(const Tensor& x) override;
  // dy is the whole output's gradient on every rank: the bias gradient is the same on all.
  Tensor backward(const Tensor& grad_out) override { return gradients(grad_out); }
  std::string type_name() const override { return "RowParallelLinear"; }
  int64_t forward_flops(const Shape& input, Shape* output) const override;
  std::unique_ptr<Module> clone_structure() const override;
  std::vector<std::pair<Parameter*, TpSplit>> splits() override;
};

// This rank's rows of a token embedding (vocab, dim); the lookup's partial rows (zero
// for tokens in other ranks' parts) are all-reduced.
class VocabParallelEmbedding : public Module, public TpLayer {
 public:
  VocabParallelEmbedding(TpComm& comm, int64_t vocab, int64_t dim, std::string unit);
  Tensor forward(const Tensor& tokens) override;
  Tensor backward(const Tensor& grad_out) override;
  std::string type_name() const override { return "VocabParallelEmbedding"; }
  int64_t forward_flops(const Shape& input, Shape* output) const override;
  std::unique_ptr<Module> clone_structure() const override;
  std::vector<std::pair<Parameter*, TpSplit>> splits() override;

 private:
  TpComm& comm_;
  int64_t vocab_, dim_, first_;
  std::string unit_;
  Parameter* weight_;  // (vocab / W, dim)
  Tensor tokens_;
};

// The tied output head over the rank's part of the embedding: this rank's logits
// (..., vocab / W); the input gradient, a partial sum, is all-reduced.
class VocabParallelHead : public TiedLinear {
 public:
  explicit VocabParallelHead(TpComm& comm) : comm_(comm) {}
  Tensor backward(const Tensor& grad_out) override;
  std::string type_name() const override { return "VocabParallelHead"; }
  std::unique_ptr<Module> clone_structure() const override { return std::make_unique<VocabParallelHead>(comm_); }

 private:
  TpComm& comm_;
};

// What one rank holds (f32 parameters).
struct TpMemory {
  int64_t full_parameter_bytes = 0;  // the whole model's
  int64_t rank_parameter_bytes = 0;  // this rank's parts and replicated parameters
  int64_t replicated_bytes = 0;      // of which replicated
};

class TensorParallel {
 public:
  // Cuts `model` (built the same on every rank: checked, and rank 0's values broadcast)
  // into this rank's part, in place.
  TensorParallel(Model& model, comm::ProcessGroup& group);
  TensorParallel(const TensorParallel&) = delete;
  TensorParallel& operator=(const TensorParallel&) = delete;

  // Why `model` cannot be cut over `ranks` ranks (a width, head count or vocabulary
  // they do not divide, or layers tensor parallelism does not split); empty when it can.
  // `flag`: how the user asked for it, named in the reason ("--mode=tp", "--tp=3").
  static std::string cannot_split(Model& model, int ranks, const std::string& flag = "--mode=tp");
  // The same for a transformer from its description alone (no parameters built).
  static std::string cannot_split(const ModelSpec& transformer, int ranks, const std::string& flag = "--mode=tp");

  // The loss of the cut model's output: the vocabulary-parallel cross-entropy when the
  // head is cut, else the model's own loss (its last layer is replicated). Deferred as
  // compute_loss.
  LossResult loss(const Tensor& out, const Tensor& target, bool need_grad, bool deferred);
  // The global L2 norm of the gradients (parts summed over the ranks, replicated
  // parameters once), clipped as torch.nn.utils.clip_grad_norm_; returns the norm.
  double clip_grad_norm(double max_norm);
  // Every rank's parts all-gathered into the whole layers, which replace the cut ones:
  // the model as single-device training would hold it (every rank must call it; at the
  // end of a run).
  void gather_full_parameters();
  // The optimizer's state over the cut parameters as whole tensors of the model's
  // parameter shapes (every rank's parts all-gathered; every rank must call it), for a
  // full checkpoint.
  std::vector<OptimizerState> full_optimizer_state(const Optimizer& cut);
  // Loads whole-model optimizer state (a checkpoint's) into the optimizer over the cut
  // parameters: each rank keeps its parts.
  void load_full_optimizer_state(Optimizer& cut, const std::vector<OptimizerState>& full);

  Model& module() { return model_; }
  comm::ProcessGroup& group() { return comm_.group(); }
  const TpMemory& memory() const { return memory_; }
  // The collectives of the last training forward and backward (take_step() moves them here).
  void take_step() { last_step_ = comm_.take(); }
  const std::vector<CollectiveRecord>& collectives() const { return last_step_; }

 private:
  struct Replaced {
    std::string path;
    // The whole layer, its parameters released while the cut one trains (no rank keeps a
    // whole copy); their shapes, to allocate them again when the parts are gathered.
    std::unique_ptr<Module> full;
    std::vector<Shape> shapes;
  };
  void copy_parts(Module& full, Module& cut);
  // A cut parameter's whole shape.
  Shape full_shape(const Parameter& p, TpSplit s) const;

  Model& model_;
  TpComm comm_;
  std::vector<Replaced> replaced_;
  std::vector<std::string> headed_;  // the modules whose heads are split
  std::map<const Parameter*, TpSplit> splits_;
  bool vocab_parallel_ = false;
  int64_t vocab_first_ = 0;
  bool gathered_ = false;
  TpMemory memory_;
  std::vector<CollectiveRecord> last_step_;
};

}  // namespace dpb
