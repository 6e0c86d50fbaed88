// dpbench's sharded training against PyTorch FSDP2's: tests/data/gpt2/
// gpt2_tiny_fsdp2_pytorch.safetensors was written by benchmarks/pytorch_reference/fsdp.py
// --reference (PyTorch 2.15, torch.distributed.fsdp.fully_shard on each block and the
// root, two ranks over gloo), starting from gpt2_tiny_pytorch.safetensors' weights and
// batch, rank r taking half the batch. Two dpbench FSDP ranks from the same weights and
// halves must give the same loss at each of five AdamW steps (within 1e-5) and the same
// parameters after them, as the single-device comparison requires.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "engine/models/model.h"
#include "engine/optim/optimizer.h"
#include "engine/parallel/fully_sharded.h"
#include "tests/models/pytorch_fixture.h"
#include "tests/support/ranks.h"

namespace dpb {
namespace {

using test::load_gpt2_fixture;

TEST(Gpt2FsdpMatchesPyTorchFsdp2, LossesAndParametersOverFiveAdamWSteps) {
  const auto start = load_gpt2_fixture("gpt2_tiny_pytorch.safetensors");
  const auto want = load_gpt2_fixture("gpt2_tiny_fsdp2_pytorch.safetensors");
  const Tensor tokens = start.at("tokens"), targets = start.at("targets");
  const int world = 2;
  const int64_t rows = tokens.size(0) / world;
  std::vector<std::vector<double>> losses(world);
  std::map<std::string, Tensor> after;
  test::run_ranks_ok(world, [&](int rank, comm::ProcessGroup& pg) {
    const Device dev = Device::cpu(rank);
    auto model = test::gpt2_tiny_from(start, dev);
    const std::vector<bool> decay = model->weight_decay_mask();
    FullyShardedDataParallel fsdp(*model, pg);
    auto opt = make_optimizer(test::reference_adamw(), fsdp.shard_parameters());
    opt->set_decay_mask(fsdp.shard_decay_mask(decay));
    const Tensor x = tokens.slice(rank * rows, (rank + 1) * rows).to(dev);
    const Tensor y = targets.slice(rank * rows, (rank + 1) * rows).to(dev);
    for (int step = 0; step < 5; ++step) {
      opt->zero_grad();
      LossResult l = compute_loss(LossKind::cross_entropy, fsdp.forward(x), y, true);
      fsdp.backward(l.grad);
      opt->step();
      losses[static_cast<size_t>(rank)].push_back(l.loss);
    }
    fsdp.gather_full_parameters();
    if (rank == 0)
      for (auto& [name, p] : model->named_parameters()) after[name] = p->data().clone();
  });
  ASSERT_EQ(after.size(), 28u);
  for (int step = 0; step < 5; ++step) {
    const double mean = (losses[0][static_cast<size_t>(step)] + losses[1][static_cast<size_t>(step)]) / 2;
    const double theirs = want.at("loss." + std::to_string(step)).item();
    EXPECT_NEAR(mean, theirs, 1e-5 * theirs) << "step " << step;
  }
  test::expect_parameters_match(after, want, start, "FSDP2's");
}

}  // namespace
}  // namespace dpb
