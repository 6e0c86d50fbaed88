#pragma once
// Model: a named network (a Sequential whose top-level children are its layers) plus
// what it expects and what it is trained with. forward() checks the input shape
// against the spec, so a wrong dataset/model pairing is a clear error up front.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/rng.h"
#include "engine/nn/loss.h"
#include "engine/nn/sequential.h"

namespace dpb {

// How tensor parallelism cuts one module (torchtitan's ColwiseParallel, RowwiseParallel,
// ...; Megatron-LM's column- and row-parallel linears).
enum class TpStyle {
  colwise,     // a Linear's outputs: its weight's rows and its bias, in `blocks` equal blocks
               // each cut over the ranks (3 for a fused query/key/value projection)
  rowwise,     // a Linear's inputs: its weight's columns; the partial products all-reduced,
               // the bias added once
  vocab,       // an Embedding's rows (the vocabulary); each lookup's partial rows all-reduced
  vocab_head,  // the TiedLinear head over a vocab embedding: this rank's part of the
               // logits, the loss the vocabulary-parallel cross-entropy
  heads,       // a module whose attention heads are divided over the ranks (its q/k/v colwise)
};
struct TpRule {
  std::string path;  // a module path; '*' stands for one name ("transformer.h.*.attn.c_attn")
  TpStyle style = TpStyle::colwise;
  int blocks = 1;    // colwise
};

struct ModelSpec {
  std::string name;
  Shape input;          // per sample: (C, H, W), (features) or (T) tokens
  int64_t outputs = 0;  // classes (cross-entropy), regression width (mse) or vocabulary
  LossKind loss = LossKind::cross_entropy;
  bool has_batchnorm = false;
  DType input_dtype = DType::f32;  // i32 for token sequences (language models)
  // A language model predicts every position: its output is (N, T, vocabulary) and its
  // target (N, T) next tokens, one cross-entropy row per token.
  bool per_position = false;
  // The parameter a TiedLinear head among the layers uses ("transformer.wte.weight").
  std::string head_tied_to;
  // A transformer's depth and width (0 for other models), for its FLOPs per token.
  int64_t layers = 0, width = 0, heads = 0, context = 0;
  // FSDP's wrap policy: the layers (by name prefix) that are units of their own, as
  // FSDP2's fully_shard on each; every other parameter belongs to the root unit. Empty:
  // every layer with parameters of its own is a unit.
  std::vector<std::string> fsdp_units;
  // Tensor parallelism's plan, beside the model's definition: which modules are cut and
  // how; a parameter no rule cuts is replicated. Empty: the model is not cut.
  std::vector<TpRule> tp_plan;
};

class Model : public Sequential {
 public:
  explicit Model(ModelSpec spec) : spec_(std::move(spec)) {}

  const ModelSpec& spec() const { return spec_; }
  // The model's tensor-parallel plan (ModelSpec::tp_plan), declared where it is built.
  void set_tp_plan(std::vector<TpRule> plan) { spec_.tp_plan = std::move(plan); }
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return spec_.name; }
  std::unique_ptr<Module> clone_structure() const override;
  // Forward FLOPs for one sample (x3 for a training step).
  int64_t flops_per_sample() const;
  // A transformer's training FLOPs per token as the PaLM paper's appendix B counts them
  // (and nanoGPT's estimate_mfu): 6 N + 12 L C T, with N the parameters without the
  // position table (the token embedding counts: it is the output layer's weight), L
  // layers, C the width (heads x head size) and T the tokens per sequence. 0 otherwise.
  double flops_per_token();
  // A batch of `batch` random inputs on `device` (N(0, 1) values, or tokens drawn
  // uniformly from the vocabulary) for measuring the model without a dataset.
  Tensor random_batch(int64_t batch, Device device, Generator& gen) const;
  // Which parameters (in parameters() order) weight decay applies to. GPT-2 (as
  // nanoGPT's optimizer groups, without its embeddings) decays only the linear layers'
  // weight matrices, not biases, norms or embedding tables; every other model decays all.
  std::vector<bool> weight_decay_mask();
  // Ties the TiedLinear head to spec().head_tied_to (done at build and after every clone).
  void tie_head();

 private:
  ModelSpec spec_;
};

struct ModelOptions {
  // Input image shape for the convolutional models; (0, 0, 0) picks the model's default.
  Shape image{0, 0, 0};
  int64_t classes = 10;
  // Tokens per sequence for the language models (at most their context); 0: the context.
  int64_t seq = 0;
};

using ModelBuilder = std::function<std::unique_ptr<Model>(Generator&, const ModelOptions&)>;
// Adds a model defined outside the registry (a test's, a user's) under `name`; its
// builder sets its spec, its plans included. A name already there is an error.
void register_model(const std::string& name, ModelBuilder build);

// Builds a model by name with PyTorch-default initialisation from `gen`.
// Throws dpb::Error listing the valid names for an unknown one.
std::unique_ptr<Model> build_model(const std::string& name, Generator& gen, const ModelOptions& options = {});
// A transformer's description (its spec: depth, width, heads, vocabulary) without
// building or initialising any parameter; nullopt for a model that is not one.
std::optional<ModelSpec> describe_transformer(const std::string& name, const ModelOptions& options = {});
const std::vector<std::string>& model_names();

}  // namespace dpb
