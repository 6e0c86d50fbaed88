// Training with the step captured as a CUDA graph gives what eager training gives:
// the same kernels run in the same order on the same addresses, and the optimizer
// (outside the graph) follows the learning-rate schedule.
#include <gtest/gtest.h>

#include "engine/backend/cpu/cpu_context.h"
#include "engine/data/synthetic.h"
#include "engine/nn/batchnorm2d.h"
#include "engine/train/trainer.h"
#include "tests/cuda/cuda_test_util.h"

namespace dpb {
namespace {

struct Result {
  std::vector<std::vector<float>> params;
  std::vector<double> losses;
};

Result train(const std::string& model_name, const std::string& optimizer, bool graph, int64_t samples) {
  cpu::CpuDeviceScope scope(0);
  Generator g(11);
  auto model = build_model(model_name, g);
  freeze_batchnorm(*model, true);  // fixed statistics: the comparison isolates the graph
  const auto& spec = model->spec();
  SyntheticDataset data(spec.input, spec.loss, spec.outputs, samples, 11);
  TrainOptions o;
  o.batch = 16;
  o.steps = 8;
  o.warmup = 0;
  o.seed = 11;
  o.optim.kind = parse_optimizer(optimizer);
  o.optim.lr = optimizer == "sgd" ? 0.05f : 1e-3f;
  o.schedule = LrScheduleKind::cosine;
  o.device = Device::cuda(0);
  o.cuda_graph = graph;
  Trainer t(*model, data, o);
  Result r;
  for (const auto& s : t.run().steps) r.losses.push_back(s.loss);
  for (auto* p : model->parameters()) r.params.push_back(p->data().to_vector());
  return r;
}

class DeterministicScope {
 public:
  DeterministicScope() { set_deterministic(true); }
  ~DeterministicScope() { set_deterministic(false); }
};

TEST(CudaGraph, TrainsLikeEagerExecution) {
  DPB_REQUIRE_GPU();
  // Deterministic algorithms: the graph must then train bit for bit like eager
  // execution (with cuDNN's fastest algorithms, some of which accumulate with atomics,
  // even two eager runs differ in the last bits, and Adam amplifies that).
  DeterministicScope deterministic;
  // 40 samples in batches of 16: every third batch is the short last one of an epoch,
  // which runs eagerly beside the graph.
  for (const std::string name : {"lenet", "resnet18"}) {
    for (const std::string opt : {"sgd", "adam"}) {
      const Result eager = train(name, opt, false, 40), graphed = train(name, opt, true, 40);
      ASSERT_EQ(eager.losses.size(), graphed.losses.size());
      for (size_t i = 0; i < eager.losses.size(); ++i)
        EXPECT_EQ(graphed.losses[i], eager.losses[i]) << name << " " << opt << " step " << i;
      double diff = 0, scale = 0;
      for (size_t i = 0; i < eager.params.size(); ++i)
        for (size_t k = 0; k < eager.params[i].size(); ++k) {
          diff = std::max(diff, static_cast<double>(std::fabs(eager.params[i][k] - graphed.params[i][k])));
          scale = std::max(scale, static_cast<double>(std::fabs(eager.params[i][k])));
        }
      EXPECT_EQ(diff, 0.0) << name << " " << opt << ": parameters differ by " << diff / scale << " of their scale";
    }
  }
}

TEST(CudaGraph, ModelWithDeviceLossOnlyIsAClearError) {
  DPB_REQUIRE_GPU();
  Generator g(1);
  auto model = build_model("simple", g);
  SyntheticDataset data(model->spec().input, model->spec().loss, model->spec().outputs, 32, 1);
  TrainOptions o;
  o.device = Device::cuda(0);
  o.cuda_graph = true;
  try {
    Trainer t(*model, data, o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cross-entropy"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dpb
