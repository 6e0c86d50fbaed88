#include "engine/models/model.h"

namespace dpb {

Tensor Model::forward(const Tensor& x) {
  bool ok = x.ndim() == spec_.input.ndim() + 1 && x.size(0) > 0;
  for (int i = 0; ok && i < spec_.input.ndim(); ++i) ok = x.size(i + 1) == spec_.input[i];
  DPB_CHECK(ok) << "model '" << spec_.name << "' expects input (N, "
                << spec_.input.str().substr(1, spec_.input.str().size() - 2) << ") with N >= 1, got " << x.shape();
  return Sequential::forward(x);
}

std::unique_ptr<Module> Model::clone_structure() const {
  auto m = std::make_unique<Model>(spec_);
  auto* self = const_cast<Model*>(this);
  for (auto& [name, child] : self->named_children()) m->add(name, child->clone_structure());
  return m;
}

int64_t Model::flops_per_sample() const {
  Shape out;
  return forward_flops(spec_.input, &out);
}

}  // namespace dpb
