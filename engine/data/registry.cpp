#include "engine/data/registry.h"

#include "engine/data/cifar10.h"
#include "engine/data/idx.h"
#include "engine/data/synthetic.h"
#include "engine/data/tokens.h"

namespace dpb {

namespace {
constexpr int64_t kSyntheticTrain = 60000, kSyntheticTest = 10000;
}

const std::vector<std::string>& dataset_names() {
  static const std::vector<std::string> names{"synthetic", "fashion-mnist", "mnist", "cifar10", "text"};
  return names;
}

std::string default_data_dir(const std::string& name) {
  if (name == "fashion-mnist") return kFashionMnistDir;
  if (name == "mnist") return "/usr/share/datasets/mnist";
  if (name == "cifar10") return "data/cifar-10-batches-bin";
  return "";
}

Shape dataset_sample_shape(const std::string& name) {
  if (name == "fashion-mnist" || name == "mnist") return Shape{1, 28, 28};
  if (name == "cifar10") return Shape{3, 32, 32};
  return Shape{};
}

DatasetSplits load_dataset(const DatasetRequest& r) {
  DatasetSplits s;
  if (r.name == "synthetic" && r.input_dtype == DType::i32) {
    DPB_CHECK(r.sample_shape.ndim() == 1) << "synthetic tokens: a sequence length, got " << r.sample_shape;
    s.train = std::make_unique<SyntheticTokens>(r.sample_shape[0], r.width, kSyntheticTrain, r.seed);
    s.test = std::make_unique<SyntheticTokens>(r.sample_shape[0], r.width, kSyntheticTest, r.seed, kSyntheticTrain);
    return s;
  }
  if (r.name == "text") {
    DPB_CHECK(!r.dir.empty()) << "the text dataset reads one file: --data=text:PATH";
    DPB_CHECK(r.input_dtype == DType::i32 && r.sample_shape.ndim() == 1)
        << "the text dataset is token sequences, for the language models (gpt2, gpt2-medium, gpt2-tiny)";
    s.dir = r.dir;
    s.train = std::make_unique<TextTokens>(r.dir, true, r.sample_shape[0], r.width);
    s.test = std::make_unique<TextTokens>(r.dir, false, r.sample_shape[0], r.width);
    return s;
  }
  if (r.name == "synthetic") {
    s.train = std::make_unique<SyntheticDataset>(r.sample_shape, r.loss, r.width, kSyntheticTrain, r.seed);
    s.test = std::make_unique<SyntheticDataset>(r.sample_shape, r.loss, r.width, kSyntheticTest, r.seed, 1.0f,
                                                kSyntheticTrain);
    return s;
  }
  s.dir = r.dir.empty() ? default_data_dir(r.name) : r.dir;
  if (r.name == "fashion-mnist" || r.name == "mnist") {
    s.train = load_mnist_like(r.name, s.dir, true);
    s.test = load_mnist_like(r.name, s.dir, false);
    return s;
  }
  if (r.name == "cifar10") {
    s.train = std::make_unique<Cifar10Dataset>(s.dir, true);
    s.test = std::make_unique<Cifar10Dataset>(s.dir, false);
    if (r.augment) {
      // Padding value: a black pixel after normalisation, per channel.
      s.augment = std::make_unique<RandomCropFlip>(
          4, std::vector<float>{-0.4914f / 0.2470f, -0.4822f / 0.2435f, -0.4465f / 0.2616f});
    }
    return s;
  }
  std::string valid;
  for (const auto& n : dataset_names()) valid += (valid.empty() ? "" : ", ") + n;
  DPB_FAIL() << "unknown dataset '" << r.name << "' (valid: " << valid << ")";
}

}  // namespace dpb
