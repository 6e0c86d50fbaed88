#include "engine/models/model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "engine/core/rng.h"

namespace dpb {
namespace {

TEST(Models, ParameterCountsMatchPyTorch) {
  // Counts of the equivalent torch.nn modules (torchvision-style resnet18 CIFAR variant).
  const std::vector<std::pair<std::string, int64_t>> expected{
      {"simple", 11}, {"mlp", 669706}, {"lenet", 61706}, {"resnet18", 11173962}};
  for (const auto& [name, count] : expected) {
    Generator g(0);
    EXPECT_EQ(build_model(name, g)->parameter_count(), count) << name;
  }
  // torchvision.models.resnet50(), resnet101(), vgg16() with their 1000 classes.
  ModelOptions imagenet;
  imagenet.classes = 1000;
  const std::vector<std::pair<std::string, int64_t>> torchvision{
      {"resnet50", 25557032}, {"resnet101", 44549160}, {"vgg16", 138357544}};
  for (const auto& [name, count] : torchvision) {
    Generator g(0);
    EXPECT_EQ(build_model(name, g, imagenet)->parameter_count(), count) << name;
  }
}

TEST(Models, TorchvisionParameterNamesAndFlops) {
  ModelOptions imagenet;
  imagenet.classes = 1000;
  Generator g(0);
  auto r = build_model("resnet50", g, imagenet);
  std::set<std::string> names;
  for (auto& [n, p] : r->named_parameters()) names.insert(n);
  for (const char* n : {"conv1.weight", "layer1.0.downsample.0.weight", "layer1.0.conv3.weight",
                        "layer3.5.bn2.bias", "layer4.2.bn3.weight", "fc.bias"})
    EXPECT_TRUE(names.count(n)) << n;
  EXPECT_EQ(r->named_parameters().size(), 161u);
  // fvcore/torchvision: 4.09 and 7.80 GMACs; ours adds BatchNorm, ReLU and the residual adds.
  EXPECT_NEAR(static_cast<double>(r->flops_per_sample()) / 2e9, 4.09, 0.1);
  EXPECT_NEAR(static_cast<double>(build_model("resnet101", g, imagenet)->flops_per_sample()) / 2e9, 7.80, 0.15);
  auto v = build_model("vgg16", g, imagenet);
  EXPECT_EQ(v->named_parameters()[0].first, "features.0.weight");
  EXPECT_EQ(v->named_parameters()[25].first, "features.28.bias");
  EXPECT_EQ(v->named_parameters().back().first, "classifier.6.bias");
  EXPECT_NEAR(static_cast<double>(v->flops_per_sample()) / 2e9, 15.47, 0.1);
  // Small images train too (the tests' equivalence runs use them).
  ModelOptions small;
  small.image = Shape{3, 32, 32};
  EXPECT_EQ(build_model("resnet50", g, small)->forward(Tensor::zeros({2, 3, 32, 32})).shape(), (Shape{2, 10}));
  EXPECT_EQ(build_model("vgg16", g, small)->forward(Tensor::zeros({1, 3, 32, 32})).shape(), (Shape{1, 10}));
}

TEST(Models, PyTorchParameterNames) {
  Generator g(0);
  auto r = build_model("resnet18", g);
  auto names = r->named_parameters();
  EXPECT_EQ(names.front().first, "conv1.weight");
  EXPECT_EQ(names.back().first, "fc.bias");
  bool has_downsample = false, has_block = false;
  for (auto& [n, p] : names) {
    has_downsample |= n == "layer2.0.downsample.0.weight";
    has_block |= n == "layer1.0.conv1.weight";
  }
  EXPECT_TRUE(has_downsample);
  EXPECT_TRUE(has_block);
  auto buffers = r->named_buffers();
  EXPECT_EQ(buffers.front().first, "bn1.running_mean");
  auto l = build_model("lenet", g);
  EXPECT_EQ(l->named_parameters()[0].first, "conv1.weight");
  EXPECT_EQ(l->named_parameters()[9].first, "fc3.bias");
}

TEST(Models, LenetTakesGreyAndColourImages) {
  Generator g(0);
  ModelOptions colour;
  colour.image = Shape{3, 32, 32};
  auto l = build_model("lenet", g, colour);
  EXPECT_EQ(l->spec().input, (Shape{3, 32, 32}));
  Tensor y = l->forward(Tensor::zeros({2, 3, 32, 32}));
  EXPECT_EQ(y.shape(), (Shape{2, 10}));
  auto grey = build_model("lenet", g);
  EXPECT_EQ(grey->forward(Tensor::zeros({2, 1, 28, 28})).shape(), (Shape{2, 10}));
}

TEST(Models, WrongInputShapeIsAClearError) {
  Generator g(0);
  auto m = build_model("lenet", g);
  try {
    m->forward(Tensor::zeros({2, 3, 32, 32}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model 'lenet' expects input (N, 1, 28, 28)"), std::string::npos)
        << e.what();
  }
}

TEST(Models, UnknownNameListsValidOnes) {
  Generator g(0);
  try {
    build_model("resnet152", g);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("valid: simple, mlp, lenet, resnet18, resnet50, resnet101, vgg16, widemlp"), std::string::npos)
        << e.what();
  }
}

TEST(Models, ForwardFlopsOfResnet18) {
  Generator g(0);
  auto r = build_model("resnet18", g);
  // ~0.56 GMACs per 32x32 image for the CIFAR ResNet-18.
  EXPECT_NEAR(static_cast<double>(r->flops_per_sample()) / 2e9, 0.556, 0.01);
}

// DDP's reducer listens to these hooks: each parameter fires once per backward, as soon
// as its gradient is complete, so the last layers' parameters fire first.
TEST(Models, GradReadyHooksFireOncePerParameterInReverseLayerOrder) {
  Generator g(0);
  auto m = build_model("resnet18", g);
  auto named = m->named_parameters();
  std::vector<std::string> order;
  for (auto& [name, p] : named) {
    const std::string n = name;
    p->add_grad_ready_hook([&order, n, p = p](Parameter& q) {
      EXPECT_EQ(&q, p);
      EXPECT_FALSE(q.grad_is_zero()) << n << " fired before its gradient was written";
      order.push_back(n);
    });
  }
  Tensor x = Tensor::full({2, 3, 32, 32}, 0.5f);
  Tensor y = m->forward(x);
  m->backward(Tensor::full(y.shape(), 0.1f));
  ASSERT_EQ(order.size(), named.size());
  std::set<std::string> distinct(order.begin(), order.end());
  EXPECT_EQ(distinct.size(), named.size()) << "each parameter fires exactly once";
  auto pos = [&](const std::string& n) { return std::find(order.begin(), order.end(), n) - order.begin(); };
  EXPECT_LT(pos("fc.weight"), pos("layer4.1.conv2.weight"));
  EXPECT_LT(pos("layer4.0.conv1.weight"), pos("layer1.0.conv1.weight"));
  EXPECT_EQ(order.back(), "conv1.weight");
}

TEST(Models, ReplicateCopiesValuesToAnotherDevice) {
  Generator g(0);
  auto m = build_model("mlp", g);
  auto r = m->replicate(Device::cpu(1));
  auto a = m->named_parameters(), b = r->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(b[i].second->data().device(), Device::cpu(1));
    EXPECT_EQ(a[i].second->data().to_vector(), b[i].second->data().to_vector());
  }
}

}  // namespace
}  // namespace dpb
