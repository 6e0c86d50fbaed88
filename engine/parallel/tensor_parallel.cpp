#include "engine/parallel/tensor_parallel.h"

#include <cmath>
#include <functional>
#include <string_view>

#include "engine/backend/ops.h"
#include "engine/core/clock.h"
#include "engine/nn/linear.h"
#include "engine/parallel/distributed_data_parallel.h"
#include "engine/trace/nvtx.h"

namespace dpb {

namespace {

int64_t bytes_of(const Tensor& t) { return t.numel() * static_cast<int64_t>(dtype_size(t.dtype())); }

// Rank `rank`'s part of `full` (on the host) cut as `s` over `ranks`.
Tensor part_of(const Tensor& full, TpSplit s, int rank, int ranks) {
  const Tensor h = full.to(Device::cpu()).to_plain();
  std::vector<int64_t> dims = h.shape().dims();
  const float* src = h.data();
  if (s.dim == 0) {
    const int64_t rows = dims[0], inner = h.numel() / rows, block = rows / s.blocks, part = block / ranks;
    dims[0] = part * s.blocks;
    Tensor out = Tensor::empty(Shape(dims));
    for (int64_t b = 0; b < s.blocks; ++b)
      std::copy_n(src + (b * block + rank * part) * inner, part * inner, out.data() + b * part * inner);
    return out;
  }
  const int64_t rows = dims[0], cols = dims[1], part = cols / ranks;
  Tensor out = Tensor::empty({rows, part});
  for (int64_t r = 0; r < rows; ++r) std::copy_n(src + r * cols + rank * part, part, out.data() + r * part);
  return out;
}

// The whole parameter (of shape `full`) from every rank's part, gathered (ranks, part...) on the host.
Tensor whole_of(const Tensor& gathered, const Shape& full, TpSplit s, int ranks) {
  const Tensor h = gathered.to(Device::cpu()).to_plain();
  const float* src = h.data();
  Tensor out = Tensor::empty(full);
  const int64_t part_numel = h.numel() / ranks;
  if (s.dim == 0) {
    const int64_t rows = full[0], inner = full.numel() / rows, block = rows / s.blocks, part = block / ranks;
    for (int r = 0; r < ranks; ++r)
      for (int64_t b = 0; b < s.blocks; ++b)
        std::copy_n(src + r * part_numel + b * part * inner, part * inner,
                    out.data() + (b * block + r * part) * inner);
    return out;
  }
  const int64_t rows = full[0], cols = full[1], part = cols / ranks;
  for (int r = 0; r < ranks; ++r)
    for (int64_t i = 0; i < rows; ++i)
      std::copy_n(src + r * part_numel + i * part, part, out.data() + i * cols + r * part);
  return out;
}

void each_module(Module& m, const std::function<void(Module&)>& fn) {
  fn(m);
  for (auto& [name, child] : m.named_children()) each_module(*child, fn);
}

// out and in of a Linear, from its weight (out, in).
std::pair<int64_t, int64_t> linear_shape(Module& l) {
  for (auto& [name, p] : l.named_parameters())
    if (name == "weight") return {p->data().size(0), p->data().size(1)};
  DPB_FAIL() << l.type_name() << " has no weight";
}

bool has_bias(Module& l) {
  for (auto& [name, p] : l.named_parameters())
    if (name == "bias") return true;
  return false;
}

// Whether `path` is what `pattern` names: the same dot-separated names, '*' any one.
bool path_matches(std::string_view pattern, std::string_view path) {
  while (true) {
    const size_t pd = pattern.find('.'), qd = path.find('.');
    const std::string_view p = pattern.substr(0, pd), q = path.substr(0, qd);
    if (p != "*" && p != q) return false;
    if (pd == std::string_view::npos || qd == std::string_view::npos) return pd == qd;
    pattern.remove_prefix(pd + 1);
    path.remove_prefix(qd + 1);
  }
}

struct Cut {
  std::string path;
  Module* module;
  const TpRule* rule;
};

// The modules the model's plan cuts, parents first, each by the first rule naming it; the
// rules that name no module of it in *unmatched.
std::vector<Cut> plan_cuts(Model& model, std::vector<std::string>* unmatched) {
  std::vector<Cut> out;
  std::vector<bool> used(model.spec().tp_plan.size());
  for (auto& [path, m] : model.named_modules())
    for (size_t r = 0; r < used.size(); ++r)
      if (path_matches(model.spec().tp_plan[r].path, path)) {
        out.push_back({path, m, &model.spec().tp_plan[r]});
        used[r] = true;
        break;
      }
  for (size_t r = 0; r < used.size(); ++r)
    if (!used[r]) unmatched->push_back(model.spec().tp_plan[r].path);
  return out;
}

Module& module_at(Model& model, const std::string& path) {
  for (auto& [p, m] : model.named_modules())
    if (p == path) return *m;
  DPB_FAIL() << "--mode=tp: no module at '" << path << "'";
}

const char* style_name(TpStyle s) {
  switch (s) {
    case TpStyle::colwise: return "column-parallel";
    case TpStyle::rowwise: return "row-parallel";
    case TpStyle::vocab: return "vocabulary-parallel";
    case TpStyle::vocab_head: return "a vocabulary-parallel head";
    case TpStyle::heads: return "split by heads";
  }
  return "?";
}

// Why `cut` cannot be cut over `ranks`; empty when it can.
std::string cannot_cut(const Cut& cut, int ranks) {
  const std::string what = "layer '" + cut.path + "' (" + style_name(cut.rule->style) + ")";
  const bool linear = cut.rule->style == TpStyle::colwise || cut.rule->style == TpStyle::rowwise;
  if (linear || cut.rule->style == TpStyle::vocab) {
    bool weight = false;
    for (auto& [name, p] : cut.module->named_parameters()) weight = weight || (name == "weight" && p->data().ndim() == 2);
    if (!weight) return what + " is a " + cut.module->type_name() + ", which has no weight matrix to cut";
  }
  if (linear && !has_bias(*cut.module)) return what + " has no bias";
  switch (cut.rule->style) {
    case TpStyle::colwise: {
      const int64_t out = linear_shape(*cut.module).first;
      if (cut.rule->blocks < 1 || out % (static_cast<int64_t>(cut.rule->blocks) * ranks) != 0)
        return "layer '" + cut.path + "' has " + std::to_string(out) + " outputs, which do not divide evenly" +
               (cut.rule->blocks > 1 ? " in " + std::to_string(cut.rule->blocks) + " blocks" : "");
      return "";
    }
    case TpStyle::rowwise: {
      const int64_t in = linear_shape(*cut.module).second;
      if (in % ranks != 0)
        return "layer '" + cut.path + "' has " + std::to_string(in) + " inputs, which do not divide evenly";
      return "";
    }
    case TpStyle::vocab: {
      const int64_t rows = linear_shape(*cut.module).first;
      if (rows % ranks != 0) return "its vocabulary of " + std::to_string(rows) + " does not divide evenly";
      return "";
    }
    case TpStyle::vocab_head:
      if (!dynamic_cast<TiedLinear*>(cut.module)) return what + " is a " + cut.module->type_name() + ", not a TiedLinear";
      return "";
    case TpStyle::heads: {
      const int64_t heads = cut.module->attention_heads();
      if (heads == 0) return what + " is a " + cut.module->type_name() + ", which has no attention heads";
      if (heads % ranks != 0) return "its " + std::to_string(heads) + " heads do not divide evenly";
      return "";
    }
  }
  return "";
}

}  // namespace

// --- the collectives ---------------------------------------------------------------------------

void TpComm::record(CollectiveRecord c, comm::Work& work) {
  {
    trace::NvtxRange range("wait for " + c.kind);
    // The training thread waits from the issue on: nothing runs between (a backend may
    // also run the collective inside the call that issues it).
    c.wait_begin_ns = c.issued_ns;
    work.wait();
    c.wait_end_ns = now_ns();
  }
  c.started_ns = work.started_ns();
  c.finished_ns = work.finished_ns();
  records_.push_back(std::move(c));
}

void TpComm::all_reduce(Tensor& t, const std::string& unit) {
  if (size() == 1) return;
  if (t.dtype() != DType::f32 && group_.backend() == "gloo") {
    // Gloo sums f32 only: bf16 activations are summed in f32 and rounded back once.
    Tensor f = t.to_dtype(DType::f32);
    all_reduce(f, unit);
    t.copy_from(f.to_dtype(t.dtype()));
    return;
  }
  CollectiveRecord c{"all-reduce", unit, bytes_of(t), now_ns()};
  auto work = group_.allreduce(t, comm::ReduceOp::sum);
  record(std::move(c), *work);
}

Tensor TpComm::all_gather(const Tensor& t, const std::string& unit) {
  std::vector<int64_t> dims{size()};
  for (int64_t d : t.shape().dims()) dims.push_back(d);
  Tensor out = Tensor::empty(Shape(dims), t.device(), t.dtype());
  if (size() == 1) {
    out.view(t.shape()).copy_from(t);
    return out;
  }
  CollectiveRecord c{"all-gather", unit, bytes_of(t), now_ns()};
  Tensor flat = out.view({out.numel()});
  auto work = group_.allgather(flat, t.to_plain());
  record(std::move(c), *work);
  return out;
}

std::vector<CollectiveRecord> TpComm::take() {
  std::vector<CollectiveRecord> out;
  out.swap(records_);
  return out;
}

// --- the layers --------------------------------------------------------------------------------

SplitLinear::SplitLinear(TpComm& comm, int64_t in, int64_t out, std::string unit, Shape weight, int64_t bias)
    : comm_(comm), in_(in), out_(out), unit_(std::move(unit)) {
  weight_ = &register_parameter("weight", Tensor::empty(weight));
  bias_ = &register_parameter("bias", Tensor::empty({bias}));
}

Tensor SplitLinear::product(const Tensor& x, bool with_bias) {
  const int64_t in = weight_->data().size(1);
  DPB_CHECK(x.ndim() >= 2 && x.size(x.ndim() - 1) == in) << unit_ << " expects (N, ..., " << in << "), got " << x.shape();
  const Tensor w = ops::compute_weight(weight_->data());
  Tensor y = linear_rows_forward(x, w, with_bias ? bias_->data() : Tensor());
  if (training_) {
    x_ = x;
    w_ = w;
  }
  return y;
}

Tensor SplitLinear::gradients(const Tensor& dy) {
  DPB_CHECK(x_.defined()) << unit_ << ".backward without a training-mode forward";
  const bool acc = weight_->begin_grad();
  DPB_CHECK(bias_->begin_grad() == acc) << unit_ << ": weight and bias gradients out of step";
  Tensor dx = linear_rows_backward(x_, w_, dy, needs_input_grad_, weight_->grad(), bias_->grad(), acc);
  bias_->mark_grad_ready();
  weight_->mark_grad_ready();
  x_ = w_ = Tensor();
  return dx;
}

ColumnParallelLinear::ColumnParallelLinear(TpComm& comm, int64_t in, int64_t out, int blocks, std::string unit)
    : SplitLinear(comm, in, out, std::move(unit), {out / comm.size(), in}, out / comm.size()), blocks_(blocks) {
  DPB_CHECK(out % (static_cast<int64_t>(blocks) * comm.size()) == 0)
      << unit_ << ": " << out << " outputs do not split over " << comm.size() << " ranks";
}

Tensor ColumnParallelLinear::backward(const Tensor& dy) {
  Tensor dx = gradients(dy);
  // Each rank's rows contribute to the whole input's gradient.
  if (dx.defined()) comm_.all_reduce(dx, unit_);
  return dx;
}

int64_t ColumnParallelLinear::forward_flops(const Shape& input, Shape* output) const {
  return linear_flops(input, in_, out_ / comm_.size(), output);
}

std::unique_ptr<Module> ColumnParallelLinear::clone_structure() const {
  return std::make_unique<ColumnParallelLinear>(comm_, in_, out_, blocks_, unit_);
}

std::vector<std::pair<Parameter*, TpSplit>> ColumnParallelLinear::splits() {
  return {{weight_, {0, blocks_}}, {bias_, {0, blocks_}}};
}

RowParallelLinear::RowParallelLinear(TpComm& comm, int64_t in, int64_t out, std::string unit)
    : SplitLinear(comm, in, out, std::move(unit), {out, in / comm.size()}, out) {
  DPB_CHECK(in % comm.size() == 0) << unit_ << ": " << in << " inputs do not split over " << comm.size() << " ranks";
}

Tensor RowParallelLinear::forward(const Tensor& x) {
  // Rank 0's partial product carries the bias, so the sum has it once.
  Tensor y = product(x, comm_.rank() == 0);
  comm_.all_reduce(y, unit_);
  return y;
}

int64_t RowParallelLinear::forward_flops(const Shape& input, Shape* output) const {
  return linear_flops(input, in_ / comm_.size(), out_, output);
}

std::unique_ptr<Module> RowParallelLinear::clone_structure() const {
  return std::make_unique<RowParallelLinear>(comm_, in_, out_, unit_);
}

std::vector<std::pair<Parameter*, TpSplit>> RowParallelLinear::splits() { return {{weight_, {1, 1}}}; }

VocabParallelEmbedding::VocabParallelEmbedding(TpComm& comm, int64_t vocab, int64_t dim, std::string unit)
    : comm_(comm), vocab_(vocab), dim_(dim), first_(vocab / comm.size() * comm.rank()), unit_(std::move(unit)) {
  DPB_CHECK(vocab % comm.size() == 0) << unit_ << ": a vocabulary of " << vocab << " does not split over "
                                      << comm.size() << " ranks";
  weight_ = &register_parameter("weight", Tensor::empty({vocab / comm.size(), dim}));
}

Tensor VocabParallelEmbedding::forward(const Tensor& tokens) {
  DPB_CHECK(tokens.ndim() == 2 && tokens.dtype() == DType::i32)
      << unit_ << " expects i32 tokens (N, T), got " << dtype_name(tokens.dtype()) << " " << tokens.shape();
  Tensor y = Tensor::empty({tokens.size(0), tokens.size(1), dim_}, tokens.device());
  ops::embedding_part_forward(tokens, weight_->data(), first_, vocab_, y);
  comm_.all_reduce(y, unit_);
  if (training_) tokens_ = tokens;
  return y;
}

Tensor VocabParallelEmbedding::backward(const Tensor& dy) {
  DPB_CHECK(tokens_.defined()) << unit_ << ".backward without a training-mode forward";
  const bool acc = weight_->begin_grad();
  ops::embedding_part_backward(tokens_, dy, first_, weight_->grad(), acc);
  weight_->mark_grad_ready();
  tokens_ = Tensor();
  return Tensor();
}

int64_t VocabParallelEmbedding::forward_flops(const Shape& input, Shape* output) const {
  std::vector<int64_t> dims = input.dims();
  dims.push_back(dim_);
  *output = Shape(dims);
  return 0;
}

std::unique_ptr<Module> VocabParallelEmbedding::clone_structure() const {
  return std::make_unique<VocabParallelEmbedding>(comm_, vocab_, dim_, unit_);
}

std::vector<std::pair<Parameter*, TpSplit>> VocabParallelEmbedding::splits() { return {{weight_, {0, 1}}}; }

Tensor VocabParallelHead::backward(const Tensor& dy) {
  Tensor dx = TiedLinear::backward(dy);
  if (dx.defined()) comm_.all_reduce(dx, "lm_head");
  return dx;
}

// --- the model -----------------------------------------------------------------------------------

namespace {
std::string cannot_split_what(const ModelSpec& spec, int ranks, const std::string& flag) {
  std::string who = flag;
  who += " cannot split '";
  who += spec.name;
  who += "' over " + std::to_string(ranks) + " ranks: ";
  return who;
}
}  // namespace

std::string TensorParallel::cannot_split(const ModelSpec& spec, int ranks, const std::string& flag) {
  const std::string who = cannot_split_what(spec, ranks, flag);
  DPB_CHECK(spec.per_position && spec.layers > 0) << "'" << spec.name << "' is not a transformer";
  if (ranks < 1) return who + "a tensor-parallel group needs at least 1 rank";
  if (spec.heads % ranks != 0) return who + "its " + std::to_string(spec.heads) + " heads do not divide evenly";
  if (spec.outputs % ranks != 0)
    return who + "its vocabulary of " + std::to_string(spec.outputs) + " does not divide evenly";
  return "";
}

std::string TensorParallel::cannot_split(Model& model, int ranks, const std::string& flag) {
  const ModelSpec& spec = model.spec();
  if (spec.per_position && spec.layers > 0) {
    const std::string why = cannot_split(spec, ranks, flag);
    if (!why.empty()) return why;
  }
  const std::string who = cannot_split_what(spec, ranks, flag);
  if (ranks < 1) return who + "a tensor-parallel group needs at least 1 rank";
  if (spec.tp_plan.empty())
    return who + "it declares no tensor-parallel plan (a model declares one beside its definition, ModelSpec::tp_plan: "
                 "which layers are column-parallel, row-parallel, vocabulary-parallel or split by heads)";
  std::vector<std::string> unmatched;
  const std::vector<Cut> cuts = plan_cuts(model, &unmatched);
  if (!unmatched.empty()) return who + "its plan names '" + unmatched.front() + "', which is no module of it";
  for (const Cut& c : cuts) {
    const std::string why = cannot_cut(c, ranks);
    if (!why.empty()) return who + why;
  }
  return "";
}

TensorParallel::TensorParallel(Model& model, comm::ProcessGroup& group) : model_(model), comm_(group) {
  const std::string why = cannot_split(model, group.size());
  DPB_CHECK(why.empty()) << why;
  check_same_parameter_shapes(model_, group, "tensor parallel");
  std::vector<Tensor*> state;
  for (auto* p : model_.parameters()) state.push_back(&p->data());
  broadcast_from_rank0(group, state);
  for (auto* p : model_.parameters()) memory_.full_parameter_bytes += bytes_of(p->data());

  // The plan applied: each module it cuts replaced by this rank's part of it (the same
  // parameter names, in the same order), attention over this rank's heads.
  std::vector<std::string> unmatched;
  const Device device = model_.device();
  const int64_t W = comm_.size();
  for (const Cut& c : plan_cuts(model_, &unmatched)) {
    if (c.rule->style == TpStyle::heads) {
      DPB_CHECK(c.module->split_heads(static_cast<int>(W))) << "--mode=tp: '" << c.path << "' has no heads to split";
      headed_.push_back(c.path);
      continue;
    }
    std::unique_ptr<Module> part;
    // (rows, columns) of its weight; the tied head has none of its own.
    const auto [out, in] = c.rule->style == TpStyle::vocab_head ? std::pair<int64_t, int64_t>{0, 0}
                                                                 : linear_shape(*c.module);
    switch (c.rule->style) {
      case TpStyle::colwise: part = std::make_unique<ColumnParallelLinear>(comm_, in, out, c.rule->blocks, c.path); break;
      case TpStyle::rowwise: part = std::make_unique<RowParallelLinear>(comm_, in, out, c.path); break;
      case TpStyle::vocab:
        vocab_parallel_ = true;
        vocab_first_ = out / W * comm_.rank();
        part = std::make_unique<VocabParallelEmbedding>(comm_, out, in, c.path);
        break;
      case TpStyle::vocab_head: part = std::make_unique<VocabParallelHead>(comm_); break;
      case TpStyle::heads: break;
    }
    copy_parts(*c.module, *part);
    part->to(device);
    part->train(model_.is_training());
    std::unique_ptr<Module> whole = model_.replace_module(c.path, std::move(part));
    std::vector<Shape> shapes;
    for (Parameter* p : whole->parameters()) {
      shapes.push_back(p->data().shape());
      p->data() = Tensor();
      p->grad() = Tensor();
    }
    replaced_.push_back({c.path, std::move(whole), std::move(shapes)});
  }
  model_.tie_head();
  for (auto* p : model_.parameters()) {
    memory_.rank_parameter_bytes += bytes_of(p->data());
    if (!splits_.count(p)) memory_.replicated_bytes += bytes_of(p->data());
  }
}

void TensorParallel::copy_parts(Module& full, Module& cut) {
  std::map<const Parameter*, TpSplit> splits;
  each_module(cut, [&](Module& m) {
    if (auto* t = dynamic_cast<TpLayer*>(&m))
      for (auto& [p, s] : t->splits()) splits[p] = s;
  });
  auto whole = full.named_parameters();
  auto part = cut.named_parameters();
  DPB_CHECK(whole.size() == part.size()) << "--mode=tp: a cut " << full.type_name() << " has " << part.size()
                                         << " parameters, the whole one " << whole.size();
  for (size_t i = 0; i < whole.size(); ++i) {
    DPB_CHECK(whole[i].first == part[i].first)
        << "--mode=tp: parameter '" << part[i].first << "' where '" << whole[i].first << "' was";
    Parameter* p = part[i].second;
    auto s = splits.find(p);
    if (s == splits.end()) {
      p->data().copy_from(whole[i].second->data().to(Device::cpu()));
      continue;
    }
    splits_[p] = s->second;
    p->data().copy_from(part_of(whole[i].second->data(), s->second, comm_.rank(), comm_.size()));
  }
}

LossResult TensorParallel::loss(const Tensor& out, const Tensor& target, bool need_grad, bool deferred) {
  // One rank holds the whole vocabulary: the one-pass cross-entropy of single-device
  // training (the parallel one reads the logits twice, for its statistics and then for
  // the loss and gradient).
  if (!vocab_parallel_ || comm_.size() == 1) return compute_loss(model_.spec().loss, out, target, need_grad, deferred);
  DPB_CHECK(out.ndim() == 3 && target.ndim() == 2 && target.size(0) == out.size(0) && target.size(1) == out.size(1))
      << "vocabulary-parallel cross-entropy of " << out.shape() << " needs targets (N, T), got " << target.shape();
  const int64_t rows = out.size(0) * out.size(1), part = out.size(2);
  const Tensor logits = out.view({rows, part});
  const Tensor labels = target.view({rows});
  Tensor stats = Tensor::empty({rows, 4}, out.device());
  ops::cross_entropy_part_stats(logits, labels, vocab_first_, stats);
  const Tensor all = comm_.all_gather(stats, "cross-entropy");
  LossResult r;
  Tensor dlogits;
  if (need_grad) {
    r.grad = Tensor::empty(out.shape(), out.device(), out.dtype());
    dlogits = r.grad.view({rows, part});
  }
  r.pending = ops::cross_entropy_part_finish(logits, labels, vocab_first_, model_.spec().outputs, all, dlogits);
  r.rows = rows;
  r.classes = model_.spec().outputs;
  if (!deferred) r.resolve();
  return r;
}

double TensorParallel::clip_grad_norm(double max_norm) {
  DPB_CHECK(max_norm > 0) << "gradient clipping needs a positive norm, got " << max_norm;
  double parts = 0, replicated = 0;
  auto params = model_.parameters();
  for (const Parameter* p : params) {
    if (p->grad_is_zero()) continue;
    (splits_.count(p) ? parts : replicated) += ops::sum_squares(p->grad());
  }
  Tensor t = Tensor::full({1}, static_cast<float>(parts));
  if (comm_.size() > 1) comm_.group().allreduce(t, comm::ReduceOp::sum)->wait();
  const double norm = std::sqrt(static_cast<double>(t.item()) + replicated);
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0)
    for (Parameter* p : params)
      if (!p->grad_is_zero()) ops::scale(p->grad(), static_cast<float>(coef));
  return norm;
}

void TensorParallel::gather_full_parameters() {
  if (gathered_) return;
  const Device device = model_.device();
  for (auto& r : replaced_) {
    Module& cut = module_at(model_, r.path);
    auto part = cut.named_parameters();
    auto whole = r.full->named_parameters();
    for (size_t i = 0; i < part.size(); ++i) {
      Parameter* p = part[i].second;
      Tensor& dst = whole[i].second->data();
      dst = Tensor::empty(r.shapes[i]);
      auto s = splits_.find(p);
      if (s == splits_.end()) dst.copy_from(p->data().to(Device::cpu()));
      else dst.copy_from(whole_of(comm_.all_gather(p->data(), part[i].first), dst.shape(), s->second, comm_.size()));
    }
    r.full->to(device);
    r.full->train(model_.is_training());
    // The cut layer stays alive: the optimizer still holds its parameters.
    r.full = model_.replace_module(r.path, std::move(r.full));
  }
  for (const std::string& path : headed_) module_at(model_, path).split_heads(1);
  model_.tie_head();
  comm_.take();
  gathered_ = true;
}

std::vector<OptimizerState> TensorParallel::full_optimizer_state(const Optimizer& cut) {
  std::vector<OptimizerState> out;
  // Every rank steps every parameter: the same state, in the same order, on each.
  for (const OptimizerState& s : cut.state()) {
    const Parameter* p = cut.params().at(s.param);
    auto split = splits_.find(p);
    if (s.key == "step" || split == splits_.end()) {
      out.push_back({s.param, s.key, s.value.to(Device::cpu())});
      continue;
    }
    const Shape whole = full_shape(*p, split->second);
    out.push_back({s.param, s.key, whole_of(comm_.all_gather(s.value, s.key), whole, split->second, comm_.size())});
  }
  return out;
}

void TensorParallel::load_full_optimizer_state(Optimizer& cut, const std::vector<OptimizerState>& full) {
  for (const OptimizerState& s : full) {
    const Parameter* p = cut.params().at(s.param);
    auto split = splits_.find(p);
    if (s.key == "step" || split == splits_.end()) {
      cut.load_state({s.param, s.key, s.value.to(p->data().device())});
      continue;
    }
    cut.load_state({s.param, s.key, part_of(s.value, split->second, comm_.rank(), comm_.size()).to(p->data().device())});
  }
}

Shape TensorParallel::full_shape(const Parameter& p, TpSplit s) const {
  std::vector<int64_t> dims = p.data().shape().dims();
  dims[static_cast<size_t>(s.dim)] *= comm_.size();
  return Shape(dims);
}

}  // namespace dpb
