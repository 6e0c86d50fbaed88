// Every reader of outside data takes every real file we have: a bound chosen against
// hostile input must never reject real data. Real means written by something other than
// the reader's own tests: the datasets as published, files other tools wrote, and what
// dpbench itself wrote on real runs.
//   IDX          Fashion-MNIST as Debian's dataset-fashion-mnist installs it (all four files);
//   safetensors  a LeNet state_dict written by PyTorch 2.15 with Hugging Face's safetensors
//                (benchmarks/pytorch_reference/write_safetensors.py), and a GPT-2 (tiny) with its
//                gradients and a real-text batch (benchmarks/pytorch_reference/gpt2_reference.py);
//   reports      dpbench reports of real runs (tests/data/reports, the fuzz seeds);
//   collectives  dpbench --bench=collectives reports of 2 Gloo ranks, and the links fitted on them;
//   presets      every hardware and link preset file (benchmarks/simulate/presets).
// PyTorch profiler traces have their own corpus test (tests/scenarios/trace_corpus_test).
// Not covered, for want of a real file here: CIFAR-10's binary batches (not packaged for
// Debian, and nothing else is reachable to fetch them) and nccl-tests' -J output (needs
// GPUs); their readers are fuzzed on constructed seeds.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "benchmarks/simulate/link.h"
#include "engine/data/idx.h"
#include "engine/train/safetensors.h"
#include "reports/collectives_report.h"
#include "reports/model.h"

namespace dpb {
namespace {

namespace fs = std::filesystem;

std::string source(const std::string& rel) { return (fs::path(DPB_SOURCE_DIR) / rel).string(); }

std::vector<std::string> files_in(const std::string& dir, const std::string& ext) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(source(dir)))
    if (e.is_regular_file() && e.path().extension() == ext) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(RealInputs, FashionMnistAsPublished) {
  if (!fs::exists(fs::path(kFashionMnistDir) / "train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "Fashion-MNIST is not installed (scripts/setup.sh installs dataset-fashion-mnist)";
  const auto train = load_mnist_like("fashion-mnist", kFashionMnistDir, true);
  const auto test = load_mnist_like("fashion-mnist", kFashionMnistDir, false);
  EXPECT_EQ(train->size(), 60000);
  EXPECT_EQ(test->size(), 10000);
  EXPECT_EQ(train->sample_shape(), (Shape{1, 28, 28}));
}

TEST(RealInputs, SafetensorsWrittenByPyTorch) {
  const auto f = safetensors::load(source("tests/data/safetensors/lenet_pytorch.safetensors"));
  std::set<std::string> names;
  for (const auto& [name, t] : f.tensors) names.insert(name);
  EXPECT_EQ(names, (std::set<std::string>{"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias", "fc1.weight",
                                          "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"}));
  for (const auto& [name, t] : f.tensors) {
    if (name == "fc1.weight") {
      EXPECT_EQ(t.shape(), (Shape{120, 400}));
    }
  }
  EXPECT_EQ(f.metadata.at("format"), "pt");
  // 28 parameters three times (initial, gradient, after five steps), the i32 batch and
  // the loss; the largest tensor is the 512 x 64 token embedding.
  const auto g = safetensors::load(source("tests/data/gpt2/gpt2_tiny_pytorch.safetensors"));
  EXPECT_EQ(g.tensors.size(), 3u * 28u + 3u);
  for (const auto& [name, t] : g.tensors) {
    if (name == "init.transformer.wte.weight") {
      EXPECT_EQ(t.shape(), (Shape{512, 64}));
    }
    if (name == "tokens") {
      EXPECT_EQ(t.dtype(), DType::i32);
    }
  }
  EXPECT_EQ(g.metadata.at("model"), "gpt2-tiny");
}

TEST(RealInputs, DpbenchReportsOfRealRuns) {
  auto reports = files_in("tests/data/reports", ".json");
  for (const auto& f : files_in("tests/fuzz/corpus/report", ".json")) reports.push_back(f);
  size_t read = 0;
  for (const auto& path : reports) {
    if (path.find("collectives") != std::string::npos) continue;
    EXPECT_NO_THROW(reports::RunReport::read(path)) << path;
    ++read;
  }
  EXPECT_GE(read, 5u);
}

TEST(RealInputs, CollectivesReportsAndTheLinksFittedOnThem) {
  size_t fitted = 0;
  for (const auto& path : files_in("tests/data/reports", ".json")) {
    if (path.find("collectives") == std::string::npos) continue;
    const auto r = reports::CollectivesReport::read(path);
    EXPECT_FALSE(r.results.empty()) << path;
    size_t sizes = 0;
    for (const auto& row : r.results) sizes += row.op == "allreduce";
    if (sizes < 2) continue;  // a size measured alone: fitted with its sweep (simulator_test)
    const auto link = sim::fit_link({path}, sim::load_preset("cpu-gloo-local"));
    EXPECT_EQ(link.fitted.count(r.config.world_size), 1u) << path;
    ++fitted;
  }
  EXPECT_GE(fitted, 3u);
}

TEST(RealInputs, EveryPresetFile) {
  const auto presets = files_in("benchmarks/simulate/presets", ".json");
  EXPECT_EQ(presets.size(), sim::preset_names().size());
  for (const auto& path : presets) EXPECT_NO_THROW(sim::load_preset(path)) << path;
}

}  // namespace
}  // namespace dpb
