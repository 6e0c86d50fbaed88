#pragma once
// A registry model on a device, and a synthetic dataset that fits it, for the tests of the
// parallel modes.
#include <memory>
#include <string>

#include "engine/data/synthetic.h"
#include "engine/data/tokens.h"
#include "engine/models/model.h"

namespace dpb::test {

// `name` built from seed 7 (every rank the same model) and moved to `d`.
inline std::unique_ptr<Model> model_on(const std::string& name, Device d) {
  Generator g(7);
  auto m = build_model(name, g);
  m->to(d);
  return m;
}

// `n` synthetic samples for `m` (tokens for a language model), from seed 3.
inline std::unique_ptr<Dataset> data_for(const Model& m, int64_t n) {
  const auto& spec = m.spec();
  if (spec.input_dtype == DType::i32) return std::make_unique<SyntheticTokens>(spec.input[0], spec.outputs, n, 3);
  return std::make_unique<SyntheticDataset>(spec.input, spec.loss, spec.outputs, n, 3);
}

}  // namespace dpb::test
