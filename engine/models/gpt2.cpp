// GPT-2, top-down: configuration, attention, MLP, block, model, FLOPs (gpt2.h says what
// each is; nanoGPT's model.py and llm.c's train_gpt2.c are the references).
//
//   tokens (N, T) -> wte (V, C) + wpe (T, C)              transformer.wte, transformer.wpe
//   x -> L x Block:                                        transformer.h.<i>
//          x = x + attn(ln_1(x))    attn: c_attn (C -> 3C), causal attention over
//                                         `heads` heads, c_proj (C -> C)
//          x = x + mlp(ln_2(x))     mlp:  c_fc (C -> 4C), gelu (tanh), c_proj (4C -> C)
//   -> ln_f -> lm_head (tied to wte) -> logits (N, T, V)   transformer.ln_f, lm_head
//   loss: cross-entropy of every position's next token.
#include "engine/models/gpt2.h"

#include <cmath>

#include "engine/backend/ops.h"
#include "engine/nn/embedding.h"
#include "engine/nn/gelu.h"
#include "engine/nn/init.h"
#include "engine/nn/tied_linear.h"

namespace dpb {

// --- configuration ---------------------------------------------------------------------------

// GPT-2 124M (12 layers, 12 heads, 768 wide, context 1024) and 350M (24, 16, 1024), with
// the vocabulary of 50257 padded to 50304 (a multiple of 128) as llm.c and nanoGPT do; and
// one small enough for tests: 2 layers, 4 heads, 64 wide, context 256, a vocabulary of
// 512 (byte-level text uses its first 256 tokens).
constexpr Gpt2Config kGpt2{"gpt2", 12, 12, 768, 1024, 50304};
constexpr Gpt2Config kGpt2Medium{"gpt2-medium", 24, 16, 1024, 1024, 50304};
constexpr Gpt2Config kGpt2Tiny{"gpt2-tiny", 2, 4, 64, 256, 512};

const std::vector<const Gpt2Config*>& gpt2_configs() {
  static const std::vector<const Gpt2Config*> all{&kGpt2, &kGpt2Medium, &kGpt2Tiny};
  return all;
}

std::unique_ptr<Linear> gpt2_linear(int64_t in, int64_t out, float std, Generator* gen) {
  auto l = std::make_unique<Linear>(in, out, true, nullptr);
  if (gen) {
    for (auto& [name, p] : l->named_parameters()) {
      if (name == "weight") init::normal(p->data(), std, *gen);
      else p->data().zero();
    }
  }
  return l;
}

// --- attention ---------------------------------------------------------------------------

CausalSelfAttention::CausalSelfAttention(int64_t dim, int64_t heads, float proj_std, Generator* gen)
    : CausalSelfAttention(dim, heads, dim, gpt2_linear(dim, 3 * dim, 0.02f, gen), gpt2_linear(dim, dim, proj_std, gen)) {}

CausalSelfAttention::CausalSelfAttention(int64_t dim, int64_t heads, int64_t head_width,
                                         std::unique_ptr<Module> c_attn, std::unique_ptr<Module> c_proj)
    : dim_(dim), heads_(heads), head_width_(head_width), full_heads_(heads), full_width_(head_width) {
  DPB_CHECK(dim > 0 && heads > 0 && head_width > 0 && head_width % heads == 0)
      << "CausalSelfAttention: width " << head_width << " does not divide into " << heads << " heads";
  c_attn_ = &register_module("c_attn", std::move(c_attn));
  c_proj_ = &register_module("c_proj", std::move(c_proj));
}

bool CausalSelfAttention::split_heads(int ranks) {
  DPB_CHECK(ranks >= 1 && full_heads_ % ranks == 0)
      << "CausalSelfAttention: " << full_heads_ << " heads do not split over " << ranks << " ranks";
  heads_ = full_heads_ / ranks;
  head_width_ = full_width_ / ranks;
  return true;
}

void CausalSelfAttention::child_replaced(const std::string& name, Module* child) {
  if (name == "c_attn") c_attn_ = child;
  if (name == "c_proj") c_proj_ = child;
}

void CausalSelfAttention::set_needs_input_grad(bool on) {
  Module::set_needs_input_grad(on);
  c_attn_->set_needs_input_grad(on);
}

// x (N, T, C) -> qkv (N, T, 3C) -> y (N, T, C) -> out (N, T, C)
Tensor CausalSelfAttention::forward(const Tensor& x) {
  DPB_CHECK(x.ndim() == 3 && x.size(2) == dim_)
      << "CausalSelfAttention(" << dim_ << ") expects (N, T, " << dim_ << "), got " << x.shape();
  Tensor qkv = c_attn_->forward(x);
  DPB_CHECK(qkv.size(2) == 3 * head_width_) << "CausalSelfAttention: c_attn gives " << qkv.size(2)
                                            << " columns, not 3 x " << head_width_;
  Tensor y = Tensor::empty({x.size(0), x.size(1), head_width_}, x.device(), qkv.dtype());
  if (ops::attention_fused(qkv, heads_)) {
    Tensor stats = Tensor::empty({x.size(0), heads_, x.size(1)}, x.device());
    ops::attention_forward_fused(qkv, heads_, y, stats);
    if (training_) {
      qkv_ = qkv;
      y_ = y;
      stats_ = stats;
    }
  } else {
    Tensor probs = Tensor::empty({x.size(0), heads_, x.size(1), x.size(1)}, x.device(), qkv.dtype());
    ops::attention_forward(qkv, heads_, y, probs);
    if (training_) {
      qkv_ = qkv;
      probs_ = probs;
    }
  }
  return c_proj_->forward(y);
}

Tensor CausalSelfAttention::backward(const Tensor& dy) {
  DPB_CHECK(qkv_.defined()) << "CausalSelfAttention.backward without a training-mode forward";
  Tensor dattn = c_proj_->backward(dy);
  Tensor dqkv = Tensor::empty_like(qkv_);
  if (stats_.defined()) ops::attention_backward_fused(qkv_, y_, stats_, dattn, heads_, dqkv);
  else ops::attention_backward(qkv_, probs_, dattn, heads_, dqkv);
  qkv_ = probs_ = y_ = stats_ = Tensor();
  return c_attn_->backward(dqkv);
}

int64_t CausalSelfAttention::forward_flops(const Shape& input, Shape* output) const {
  Shape qkv, y;
  int64_t total = c_attn_->forward_flops(input, &qkv);
  std::vector<int64_t> heads_out = input.dims();
  heads_out.back() = head_width_;
  total += c_proj_->forward_flops(Shape(heads_out), &y);
  // q k^T and probs v: 2 x T x T x C multiply-adds each over the heads. The causal mask
  // halves the useful work, but the products are computed whole, as PaLM's count states.
  const int64_t T = input.ndim() >= 2 ? input[input.ndim() - 2] : 1;
  total += 2 * 2 * T * T * head_width_;
  *output = input;
  return total;
}

std::unique_ptr<Module> CausalSelfAttention::clone_structure() const {
  return std::make_unique<CausalSelfAttention>(dim_, heads_, head_width_, c_attn_->clone_structure(),
                                               c_proj_->clone_structure());
}

// --- the MLP and the block -------------------------------------------------------------------

namespace {
// GPT-2 scales the residual projections' initialisation by 1/sqrt(2 x layers).
float proj_std(int64_t layers) {
  DPB_CHECK(layers >= 1) << "TransformerBlock: a model of " << layers << " layers";
  return 0.02f / std::sqrt(2.0f * static_cast<float>(layers));
}

std::unique_ptr<Module> gpt2_mlp(int64_t dim, float proj, Generator* gen) {
  auto mlp = std::make_unique<Sequential>();
  mlp->add("c_fc", gpt2_linear(dim, 4 * dim, 0.02f, gen));
  mlp->add("gelu", std::make_unique<GELU>());
  mlp->add("c_proj", gpt2_linear(4 * dim, dim, proj, gen));
  return mlp;
}
}  // namespace

TransformerBlock::TransformerBlock(int64_t dim, int64_t heads, int64_t layers, Generator* gen)
    : TransformerBlock(dim, std::make_unique<CausalSelfAttention>(dim, heads, proj_std(layers), gen),
                       gpt2_mlp(dim, proj_std(layers), gen)) {}

TransformerBlock::TransformerBlock(int64_t dim, std::unique_ptr<Module> attn, std::unique_ptr<Module> mlp)
    : dim_(dim) {
  ln_1_ = &register_module("ln_1", std::make_unique<LayerNorm>(dim));
  attn_ = &register_module("attn", std::move(attn));
  ln_2_ = &register_module("ln_2", std::make_unique<LayerNorm>(dim));
  mlp->set_needs_input_grad(true);
  mlp_ = &register_module("mlp", std::move(mlp));
}

void TransformerBlock::child_replaced(const std::string& name, Module* child) {
  if (name == "attn") attn_ = child;
  if (name == "mlp") mlp_ = child;
  DPB_CHECK(name != "ln_1" && name != "ln_2") << "TransformerBlock: its layer norms are not replaced";
}

void TransformerBlock::set_needs_input_grad(bool on) {
  Module::set_needs_input_grad(on);
  ln_1_->set_needs_input_grad(on);
}

// x (N, T, C) -> (N, T, C)
Tensor TransformerBlock::forward(const Tensor& x) {
  DPB_CHECK(x.ndim() == 3 && x.size(2) == dim_)
      << "TransformerBlock(" << dim_ << ") expects (N, T, " << dim_ << "), got " << x.shape();
  // The residual stream keeps x's dtype; under bf16 the branches come back in bf16 and
  // are added in f32, as autocast promotes them.
  Tensor a = attn_->forward(ln_1_->forward(x)).to_dtype(x.dtype());
  Tensor h = Tensor::empty_like(x);
  ops::add(x, a, h);
  Tensor m = mlp_->forward(ln_2_->forward(h)).to_dtype(x.dtype());
  Tensor out = Tensor::empty_like(h);
  ops::add(h, m, out);
  return out;
}

Tensor TransformerBlock::backward(const Tensor& dy) {
  // The MLP branch: dh = dy + ln_2'(mlp'(dy))
  Tensor dh = ln_2_->backward(mlp_->backward(dy)).to_dtype(dy.dtype());
  ops::add(dh, dy, dh);
  // The attention branch: dx = dh + ln_1'(attn'(dh))
  Tensor dx = ln_1_->backward(attn_->backward(dh));
  if (!dx.defined()) return Tensor();
  dx = dx.to_dtype(dh.dtype());
  ops::add(dx, dh, dx);
  return dx;
}

int64_t TransformerBlock::forward_flops(const Shape& input, Shape* output) const {
  Shape s;
  int64_t total = ln_1_->forward_flops(input, &s);
  total += attn_->forward_flops(s, &s);
  total += ln_2_->forward_flops(s, &s);
  total += mlp_->forward_flops(s, &s);
  total += 2 * input.numel();  // the residual adds
  *output = input;
  return total;
}

std::unique_ptr<Module> TransformerBlock::clone_structure() const {
  return std::make_unique<TransformerBlock>(dim_, attn_->clone_structure(), mlp_->clone_structure());
}

// --- the model ---------------------------------------------------------------------------

ModelSpec gpt2_spec(const Gpt2Config& c, const ModelOptions& o) {
  const int64_t T = o.seq == 0 ? c.context : o.seq;
  DPB_CHECK(T >= 1 && T <= c.context) << c.name << " takes sequences of 1 to " << c.context << " tokens, got "
                                      << T << " (--seq)";
  ModelSpec spec;
  spec.name = c.name;
  spec.input = Shape{T};
  spec.outputs = c.vocab;
  spec.loss = LossKind::cross_entropy;
  spec.input_dtype = DType::i32;
  spec.per_position = true;
  spec.head_tied_to = "transformer.wte.weight";
  spec.layers = c.layers;
  spec.width = c.width;
  spec.heads = c.heads;
  spec.context = c.context;
  // Each block is an FSDP unit; the embeddings, the last LayerNorm and the tied head
  // belong to the root (torchtitan's fully_shard per block, then the whole model).
  spec.fsdp_units = {"transformer.h."};
  // Megatron-LM's plan (torchtitan's for Llama, on nanoGPT's names): in each block the
  // fused q/k/v and the MLP's first linear column-parallel (a rank keeps its heads' q, k
  // and v rows, its quarter of the hidden units), the two output projections row-parallel
  // (one all-reduce each), attention over the rank's heads; the token embedding and the
  // tied head over its rows vocabulary-parallel. Norms and the position table replicated.
  spec.tp_plan = {{"transformer.wte", TpStyle::vocab},
                  {"transformer.h.*.attn", TpStyle::heads},
                  {"transformer.h.*.attn.c_attn", TpStyle::colwise, 3},
                  {"transformer.h.*.attn.c_proj", TpStyle::rowwise},
                  {"transformer.h.*.mlp.c_fc", TpStyle::colwise},
                  {"transformer.h.*.mlp.c_proj", TpStyle::rowwise},
                  {"lm_head", TpStyle::vocab_head}};
  return spec;
}

// wte, wpe, the blocks, ln_f and the head tied to wte (the weight stored once). Each block
// is a layer of the Sequential, so a pipeline cuts between blocks. The input is (T) i32
// tokens, the output (T, vocab) logits per sample.
std::unique_ptr<Model> build_gpt2(const Gpt2Config& c, Generator& gen, const ModelOptions& o) {
  auto m = std::make_unique<Model>(gpt2_spec(c, o));
  m->add("transformer.wte", std::make_unique<Embedding>(c.vocab, c.width, &gen));
  m->add("transformer.wpe", std::make_unique<PositionEmbedding>(c.context, c.width, &gen));
  for (int64_t i = 0; i < c.layers; ++i)
    m->add("transformer.h." + std::to_string(i), std::make_unique<TransformerBlock>(c.width, c.heads, c.layers, &gen));
  m->add("transformer.ln_f", std::make_unique<LayerNorm>(c.width));
  m->add("lm_head", std::make_unique<TiedLinear>());
  m->tie_head();
  return m;
}

// --- FLOPs -------------------------------------------------------------------------------

double gpt2_flops_per_token(const ModelSpec& spec, int64_t parameters) {
  // 6 per parameter (forward 2, backward 4) over the parameters a token's products use
  // (the token table counts: it is also the output layer), and 12 L C T for attention's
  // q k^T and probs v (forward and backward, computed whole despite the causal mask).
  const double n = static_cast<double>(parameters - spec.context * spec.width);
  return 6.0 * n + 12.0 * static_cast<double>(spec.layers * spec.width * spec.input[0]);
}

}  // namespace dpb
