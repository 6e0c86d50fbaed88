// dpbench's tensor-parallel training against PyTorch's: tests/data/gpt2/
// gpt2_tiny_tp_pytorch.safetensors was written by benchmarks/pytorch_reference/tp.py
// --reference (PyTorch 2.15, torch.distributed.tensor.parallel with Megatron's plan and
// loss_parallel, two ranks over gloo), starting from gpt2_tiny_pytorch.safetensors'
// weights and batch, every rank on the whole batch. Two dpbench tensor-parallel ranks from
// the same weights and batch must give the same loss at each of five AdamW steps (within
// 1e-5) and the same parameters after them, as the single-device comparison requires.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "engine/models/model.h"
#include "engine/optim/optimizer.h"
#include "engine/parallel/tensor_parallel.h"
#include "tests/models/pytorch_fixture.h"
#include "tests/support/ranks.h"

namespace dpb {
namespace {

using test::load_gpt2_fixture;

TEST(Gpt2TpMatchesPyTorchTensorParallel, LossesAndParametersOverFiveAdamWSteps) {
  const auto start = load_gpt2_fixture("gpt2_tiny_pytorch.safetensors");
  const auto want = load_gpt2_fixture("gpt2_tiny_tp_pytorch.safetensors");
  const Tensor tokens = start.at("tokens"), targets = start.at("targets");
  const int world = 2;
  std::vector<std::vector<double>> losses(world);
  std::map<std::string, Tensor> after;
  test::run_ranks_ok(world, [&](int rank, comm::ProcessGroup& pg) {
    const Device dev = Device::cpu(rank);
    auto model = test::gpt2_tiny_from(start, dev);
    const std::vector<bool> decay = model->weight_decay_mask();
    TensorParallel tp(*model, pg);
    auto opt = make_optimizer(test::reference_adamw(), model->parameters());
    opt->set_decay_mask(decay);
    const Tensor x = tokens.to(dev), y = targets.to(dev);
    for (int step = 0; step < 5; ++step) {
      opt->zero_grad();
      LossResult l = tp.loss(model->forward(x), y, true, false);
      model->backward(l.grad);
      opt->step();
      losses[static_cast<size_t>(rank)].push_back(l.loss);
    }
    tp.gather_full_parameters();
    if (rank == 0)
      for (auto& [name, p] : model->named_parameters()) after[name] = p->data().clone();
  });
  ASSERT_EQ(after.size(), 28u);
  for (int step = 0; step < 5; ++step) {
    const double theirs = want.at("loss." + std::to_string(step)).item();
    for (int r = 0; r < world; ++r)
      EXPECT_NEAR(losses[static_cast<size_t>(r)][static_cast<size_t>(step)], theirs, 1e-5 * theirs)
          << "rank " << r << ", step " << step;
  }
  test::expect_parameters_match(after, want, start, "PyTorch's");
}

}  // namespace
}  // namespace dpb
