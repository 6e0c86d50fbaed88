#include "engine/models/model.h"

#include "engine/models/gpt2.h"
#include "engine/nn/embedding.h"
#include "engine/nn/tied_linear.h"

namespace dpb {

Tensor Model::forward(const Tensor& x) {
  bool ok = x.ndim() == spec_.input.ndim() + 1 && x.size(0) > 0;
  for (int i = 0; ok && i < spec_.input.ndim(); ++i) ok = x.size(i + 1) == spec_.input[i];
  DPB_CHECK(ok) << "model '" << spec_.name << "' expects input (N, "
                << spec_.input.str().substr(1, spec_.input.str().size() - 2) << ") with N >= 1, got " << x.shape();
  DPB_CHECK(x.dtype() == spec_.input_dtype || (spec_.input_dtype == DType::f32 && x.dtype() == DType::bf16))
      << "model '" << spec_.name << "' expects " << dtype_name(spec_.input_dtype) << " input, got "
      << dtype_name(x.dtype());
  return Sequential::forward(x);
}

std::unique_ptr<Module> Model::clone_structure() const {
  auto m = std::make_unique<Model>(spec_);
  auto* self = const_cast<Model*>(this);
  for (auto& [name, child] : self->named_children()) m->add(name, child->clone_structure());
  m->tie_head();
  return m;
}

Tensor Model::random_batch(int64_t batch, Device device, Generator& gen) const {
  std::vector<int64_t> dims{batch};
  for (auto d : spec_.input.dims()) dims.push_back(d);
  const Shape shape(dims);
  if (spec_.input_dtype == DType::i32) {
    std::vector<int32_t> tokens(static_cast<size_t>(shape.numel()));
    for (auto& t : tokens) t = static_cast<int32_t>(gen.below(static_cast<uint64_t>(spec_.outputs)));
    return Tensor::from_labels(tokens, device).view(shape);
  }
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (auto& e : v) e = static_cast<float>(gen.normal());
  return Tensor::from_vector(shape, v, device);
}

double Model::flops_per_token() {
  if (!spec_.per_position || spec_.layers == 0) return 0;
  return gpt2_flops_per_token(spec_, parameter_count());
}

std::vector<bool> Model::weight_decay_mask() {
  std::vector<bool> mask;
  if (!spec_.per_position) {
    mask.assign(parameters().size(), true);
    return mask;
  }
  for (auto& [name, child] : named_children()) {
    const bool table = dynamic_cast<Embedding*>(child) || dynamic_cast<PositionEmbedding*>(child);
    for (Parameter* p : child->parameters()) mask.push_back(!table && p->data().ndim() >= 2);
  }
  DPB_CHECK(mask.size() == parameters().size()) << "model '" << spec_.name << "': parameters outside its layers";
  return mask;
}

void Model::tie_head() {
  if (spec_.head_tied_to.empty()) return;
  Parameter* weight = nullptr;
  for (auto& [name, p] : named_parameters())
    if (name == spec_.head_tied_to) weight = p;
  DPB_CHECK(weight) << "model '" << spec_.name << "': no parameter '" << spec_.head_tied_to << "' to tie the head to";
  int heads = 0;
  for (auto& [name, child] : named_children()) {
    if (auto* head = dynamic_cast<TiedLinear*>(child)) {
      head->tie(weight);
      ++heads;
      weight->set_uses(2);
    }
  }
  DPB_CHECK(heads == 1) << "model '" << spec_.name << "' has " << heads << " tied heads, expected 1";
}

int64_t Model::flops_per_sample() const {
  Shape out;
  return forward_flops(spec_.input, &out);
}

}  // namespace dpb
