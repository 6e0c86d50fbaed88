// The model zoo, selectable by name. Parameter names follow PyTorch's module paths
// (torchvision's resnet18, the LeNet-5 of the PyTorch tutorials, nanoGPT's GPT) so
// weights can be exchanged with PyTorch through safetensors checkpoints.
#include <functional>
#include <map>
#include <mutex>

#include "engine/models/gpt2.h"
#include "engine/models/model.h"
#include "engine/nn/basic_block.h"
#include "engine/nn/bottleneck.h"
#include "engine/nn/flatten.h"
#include "engine/nn/global_avg_pool2d.h"
#include "engine/nn/linear.h"
#include "engine/nn/pool2d.h"

namespace dpb {

namespace {

ModelSpec make_spec(std::string name, Shape input, int64_t outputs, LossKind loss, bool has_batchnorm) {
  ModelSpec s;
  s.name = std::move(name);
  s.input = std::move(input);
  s.outputs = outputs;
  s.loss = loss;
  s.has_batchnorm = has_batchnorm;
  return s;
}

Shape image_or(const ModelOptions& o, Shape fallback) { return o.image[0] == 0 ? fallback : o.image; }

// Linear 10 -> 1: the smallest model, regression with MSE (the DataParallel tutorial's seed example).
std::unique_ptr<Model> simple(Generator& gen, const ModelOptions&) {
  auto m = std::make_unique<Model>(make_spec("simple", Shape{10}, 1, LossKind::mse, false));
  m->add("fc", std::make_unique<Linear>(10, 1, true, &gen));
  return m;
}

// 784-512-512-10 on flattened 28x28 images.
std::unique_ptr<Model> mlp(Generator& gen, const ModelOptions& o) {
  const Shape img = image_or(o, Shape{1, 28, 28});
  auto m = std::make_unique<Model>(make_spec("mlp", img, o.classes, LossKind::cross_entropy, false));
  m->add("flatten", std::make_unique<Flatten>());
  m->add("fc1", std::make_unique<Linear>(img.numel(), 512, true, &gen));
  m->add("relu1", std::make_unique<ReLU>(true));
  m->add("fc2", std::make_unique<Linear>(512, 512, true, &gen));
  m->add("relu2", std::make_unique<ReLU>(true));
  m->add("fc3", std::make_unique<Linear>(512, o.classes, true, &gen));
  // Megatron's pair: fc1's outputs cut, fc2's inputs; the 10-class fc3 replicated.
  m->set_tp_plan({{"fc1", TpStyle::colwise}, {"fc2", TpStyle::rowwise}});
  return m;
}

// LeNet-5: conv(6, 5x5) - pool - conv(16, 5x5) - pool - 120 - 84 - classes. A 28x28 input is
// padded by 2 in the first convolution (the classic MNIST variant) so both 28x28 grey and
// 32x32 colour images reach the 16x5x5 feature map.
std::unique_ptr<Model> lenet(Generator& gen, const ModelOptions& o) {
  const Shape img = image_or(o, Shape{1, 28, 28});
  DPB_CHECK(img[1] == img[2] && (img[1] == 28 || img[1] == 32))
      << "lenet takes 28x28 or 32x32 images, got " << img[1] << "x" << img[2];
  const int pad = img[1] == 28 ? 2 : 0;
  auto m = std::make_unique<Model>(make_spec("lenet", img, o.classes, LossKind::cross_entropy, false));
  m->add("conv1", std::make_unique<Conv2d>(img[0], 6, 5, 1, pad, true, &gen));
  m->add("relu1", std::make_unique<ReLU>(true));
  m->add("pool1", MaxPool2d(2, 2));
  m->add("conv2", std::make_unique<Conv2d>(6, 16, 5, 1, 0, true, &gen));
  m->add("relu2", std::make_unique<ReLU>(true));
  m->add("pool2", MaxPool2d(2, 2));
  m->add("flatten", std::make_unique<Flatten>());
  m->add("fc1", std::make_unique<Linear>(16 * 5 * 5, 120, true, &gen));
  m->add("relu3", std::make_unique<ReLU>(true));
  m->add("fc2", std::make_unique<Linear>(120, 84, true, &gen));
  m->add("relu4", std::make_unique<ReLU>(true));
  m->add("fc3", std::make_unique<Linear>(84, o.classes, true, &gen));
  return m;
}

// ResNet-18, CIFAR variant: 3x3 stem with stride 1 and no max-pool; four stages of two
// BasicBlocks (64, 128, 256, 512 channels), global average pool, fully connected.
std::unique_ptr<Model> resnet18(Generator& gen, const ModelOptions& o) {
  const Shape img = image_or(o, Shape{3, 32, 32});
  auto m = std::make_unique<Model>(make_spec("resnet18", img, o.classes, LossKind::cross_entropy, true));
  m->add("conv1", std::make_unique<Conv2d>(img[0], 64, 3, 1, 1, false, &gen));
  m->add("bn1", std::make_unique<BatchNorm2d>(64));
  m->add("relu", std::make_unique<ReLU>(true));
  int64_t in = 64;
  const int64_t widths[] = {64, 128, 256, 512};
  for (int stage = 0; stage < 4; ++stage) {
    auto layer = std::make_unique<Sequential>();
    const int64_t out = widths[stage];
    layer->add("0", std::make_unique<BasicBlock>(in, out, stage == 0 ? 1 : 2, &gen));
    layer->add("1", std::make_unique<BasicBlock>(out, out, 1, &gen));
    m->add("layer" + std::to_string(stage + 1), std::move(layer));
    in = out;
  }
  m->add("avgpool", std::make_unique<GlobalAvgPool2d>());
  m->add("fc", std::make_unique<Linear>(512, o.classes, true, &gen));
  return m;
}

// ResNet-50 and ResNet-101 as torchvision defines them (ImageNet, 224x224 by default):
// 7x7/2 stem, 3x3/2 max-pool, four stages of Bottlenecks (widths 64, 128, 256, 512, x4
// out), global average pool, fully connected. Parameter names are torchvision's.
std::unique_ptr<Model> imagenet_resnet(const char* name, const int (&blocks)[4], Generator& gen,
                                       const ModelOptions& o) {
  const Shape img = image_or(o, Shape{3, 224, 224});
  DPB_CHECK(img[1] >= 32 && img[2] >= 32) << name << " takes images of at least 32x32, got " << img[1] << "x"
                                          << img[2];
  auto m = std::make_unique<Model>(make_spec(name, img, o.classes, LossKind::cross_entropy, true));
  m->add("conv1", std::make_unique<Conv2d>(img[0], 64, 7, 2, 3, false, &gen));
  m->add("bn1", std::make_unique<BatchNorm2d>(64));
  m->add("relu", std::make_unique<ReLU>(true));
  m->add("maxpool", MaxPool2d(3, 2, 1));
  int64_t in = 64;
  const int64_t widths[] = {64, 128, 256, 512};
  for (int stage = 0; stage < 4; ++stage) {
    auto layer = std::make_unique<Sequential>();
    for (int b = 0; b < blocks[stage]; ++b) {
      layer->add(std::to_string(b), std::make_unique<Bottleneck>(in, widths[stage], b == 0 && stage > 0 ? 2 : 1, &gen));
      in = widths[stage] * Bottleneck::expansion;
    }
    m->add("layer" + std::to_string(stage + 1), std::move(layer));
  }
  m->add("avgpool", std::make_unique<GlobalAvgPool2d>());
  m->add("fc", std::make_unique<Linear>(in, o.classes, true, &gen));
  return m;
}

std::unique_ptr<Model> resnet50(Generator& gen, const ModelOptions& o) {
  static const int blocks[4] = {3, 4, 6, 3};
  return imagenet_resnet("resnet50", blocks, gen, o);
}

std::unique_ptr<Model> resnet101(Generator& gen, const ModelOptions& o) {
  static const int blocks[4] = {3, 4, 23, 3};
  return imagenet_resnet("resnet101", blocks, gen, o);
}

// VGG-16 (torchvision's configuration D, 224x224 by default): thirteen 3x3 convolutions
// with ReLU in five stages, each ending in a 2x2 max-pool, then 4096-4096-classes.
// Parameter names are torchvision's (features.0 ... features.28, classifier.0, .3, .6).
// Two differences, neither changing a parameter, a shape at 224x224 or the FLOPs that
// matter: there is no dropout (the engine has no dropout layer), and the classifier
// takes the last feature map as it is (torchvision's adaptive 7x7 average pool is the
// identity at 224x224; a smaller image gives a smaller first classifier layer).
std::unique_ptr<Model> vgg16(Generator& gen, const ModelOptions& o) {
  const Shape img = image_or(o, Shape{3, 224, 224});
  DPB_CHECK(img[1] % 32 == 0 && img[2] % 32 == 0 && img[1] > 0 && img[2] > 0)
      << "vgg16 takes images whose sides are multiples of 32, got " << img[1] << "x" << img[2];
  auto m = std::make_unique<Model>(make_spec("vgg16", img, o.classes, LossKind::cross_entropy, false));
  auto features = std::make_unique<Sequential>();
  const int64_t cfg[] = {64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0};
  int64_t in = img[0];
  int index = 0;
  for (int64_t c : cfg) {
    if (c == 0) {
      features->add(std::to_string(index++), MaxPool2d(2, 2));
      continue;
    }
    features->add(std::to_string(index++), std::make_unique<Conv2d>(in, c, 3, 1, 1, true, &gen));
    features->add(std::to_string(index++), std::make_unique<ReLU>(true));
    in = c;
  }
  m->add("features", std::move(features));
  m->add("flatten", std::make_unique<Flatten>());
  auto classifier = std::make_unique<Sequential>();
  const int64_t flat = 512 * (img[1] / 32) * (img[2] / 32);
  classifier->add("0", std::make_unique<Linear>(flat, 4096, true, &gen));
  classifier->add("1", std::make_unique<ReLU>(true));
  classifier->add("3", std::make_unique<Linear>(4096, 4096, true, &gen));
  classifier->add("4", std::make_unique<ReLU>(true));
  classifier->add("6", std::make_unique<Linear>(4096, o.classes, true, &gen));
  m->add("classifier", std::move(classifier));
  return m;
}

// Linear 5000 -> 10000 -> 5000 with ReLU, MSE regression: ~100 M parameters, the classic
// model to cut across two devices. Cut between the linears, the stages are not even: fc1
// skips its input gradient (two products a pass against fc2's three).
std::unique_ptr<Model> widemlp(Generator& gen, const ModelOptions&) {
  auto m = std::make_unique<Model>(make_spec("widemlp", Shape{5000}, 5000, LossKind::mse, false));
  m->add("fc1", std::make_unique<Linear>(5000, 10000, true, &gen));
  m->add("relu", std::make_unique<ReLU>(true));
  m->add("fc2", std::make_unique<Linear>(10000, 5000, true, &gen));
  m->set_tp_plan({{"fc1", TpStyle::colwise}, {"fc2", TpStyle::rowwise}});
  return m;
}

// The registry: the built-in models, the GPT-2s (engine/models/gpt2.cpp), then any
// register_model() added, in that order.
struct Registry {
  std::mutex mutex;
  std::map<std::string, ModelBuilder> builders;
  std::vector<std::string> names;

  Registry() {
    for (const auto& [name, build] : std::initializer_list<std::pair<const char*, ModelBuilder>>{
             {"simple", simple}, {"mlp", mlp}, {"lenet", lenet}, {"resnet18", resnet18}, {"resnet50", resnet50},
             {"resnet101", resnet101}, {"vgg16", vgg16}, {"widemlp", widemlp}})
      add(name, build);
    for (const Gpt2Config* c : gpt2_configs())
      add(c->name, [c](Generator& gen, const ModelOptions& o) { return build_gpt2(*c, gen, o); });
  }
  void add(const std::string& name, ModelBuilder build) {
    DPB_CHECK(!name.empty() && build) << "register_model needs a name and a builder";
    DPB_CHECK(!builders.count(name)) << "a model named '" << name << "' is already registered";
    builders.emplace(name, std::move(build));
    names.push_back(name);
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

const std::vector<std::string>& model_names() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return r.names;
}

void register_model(const std::string& name, ModelBuilder build) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.add(name, std::move(build));
}

std::optional<ModelSpec> describe_transformer(const std::string& name, const ModelOptions& options) {
  for (const Gpt2Config* c : gpt2_configs())
    if (name == c->name) return gpt2_spec(*c, options);
  return std::nullopt;
}

std::unique_ptr<Model> build_model(const std::string& name, Generator& gen, const ModelOptions& options) {
  ModelBuilder build;
  std::string valid;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    if (auto it = r.builders.find(name); it != r.builders.end()) build = it->second;
    for (const auto& n : r.names) valid += (valid.empty() ? "" : ", ") + n;
  }
  DPB_CHECK(build) << "unknown model '" << name << "' (valid: " << valid << ")";
  DPB_CHECK(options.classes >= 2) << "a classifier needs at least 2 classes, got " << options.classes;
  auto model = build(gen, options);
  model->set_needs_input_grad(false);
  return model;
}

}  // namespace dpb
