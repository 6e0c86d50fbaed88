#include <gtest/gtest.h>

#include "engine/data/cifar10.h"
#include "engine/data/idx.h"
#include "tests/data/data_files.h"

namespace dpb {
namespace {

using testing::fresh_dir;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(IdxDataset, ReadsGzippedAndPlainFiles) {
  for (bool gz : {true, false}) {
    auto d = fresh_dir(gz ? "idx_gz" : "idx_plain");
    testing::write_idx(d, "train", 5, 4, 3, gz);
    testing::write_idx(d, "t10k", 2, 4, 3, gz);
    auto train = load_mnist_like("mnist", d, true);
    auto test = load_mnist_like("mnist", d, false);
    EXPECT_EQ(train->size(), 5);
    EXPECT_EQ(test->size(), 2);
    EXPECT_EQ(train->sample_shape(), (Shape{1, 4, 3}));
    std::vector<float> x(12);
    int32_t label = -1;
    train->get(3, x.data(), &label, nullptr);
    EXPECT_EQ(label, 3);
    // pixel (3, 1, 2) = 6 -> (6/255 - mean) / std
    EXPECT_NEAR(x[1 * 3 + 2], (6.0f / 255.0f - 0.1307f) / 0.3081f, 1e-6);
    std::filesystem::remove_all(d);
  }
}

TEST(IdxDataset, BadFilesNameTheFileAndTheProblem) {
  auto d = fresh_dir("idx_bad");
  EXPECT_NE(error_of([&] { load_mnist_like("fashion-mnist", d, true); }).find("neither"), std::string::npos);
  testing::write_idx(d, "train", 5, 4, 3, false);
  const std::string images = d.string() + "/train-images-idx3-ubyte";
  std::filesystem::resize_file(images, 16 + 5 * 12 - 7);
  auto e = error_of([&] { load_mnist_like("mnist", d, true); });
  EXPECT_NE(e.find("train-images-idx3-ubyte' is truncated"), std::string::npos) << e;
  EXPECT_NE(e.find("found 69 bytes"), std::string::npos) << e;
  testing::write_bytes(images, {0, 0, 8, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, false);
  e = error_of([&] { load_mnist_like("mnist", d, true); });
  EXPECT_NE(e.find("not an IDX image file: magic 0x00000801, expected 0x00000803"), std::string::npos) << e;
  testing::write_bytes(d.string() + "/train-images-idx3-ubyte.gz", {0x1f, 0x8b, 8, 0, 1, 2, 3}, false);
  e = error_of([&] { load_mnist_like("mnist", d, true); });
  EXPECT_NE(e.find("train-images-idx3-ubyte.gz"), std::string::npos) << e;
  std::filesystem::remove_all(d);
}

TEST(Cifar10Dataset, ReadsBinaryBatches) {
  auto d = fresh_dir("cifar");
  for (int i = 1; i <= 5; ++i) testing::write_cifar_batch(d.string() + "/data_batch_" + std::to_string(i) + ".bin", 4, (i - 1) * 4);
  testing::write_cifar_batch(d.string() + "/test_batch.bin", 3, 100);
  Cifar10Dataset train(d, true), test(d, false);
  EXPECT_EQ(train.size(), 20);
  EXPECT_EQ(test.size(), 3);
  std::vector<float> x(3072);
  int32_t label = -1;
  train.get(7, x.data(), &label, nullptr);
  EXPECT_EQ(label, (7 * 3) % 10);
  // green channel (c = 1) pixel 5 of record 7 = (7 + 1024 + 5) % 256
  EXPECT_NEAR(x[1024 + 5], (static_cast<float>((7 + 1029) % 256) / 255.0f - 0.4822f) / 0.2435f, 1e-5);
  std::filesystem::resize_file(d.string() + "/test_batch.bin", 3 * 3073 - 10);
  auto e = error_of([&] { Cifar10Dataset t(d, false); });
  EXPECT_NE(e.find("test_batch.bin' is truncated or corrupt"), std::string::npos) << e;
  std::filesystem::remove(d.string() + "/data_batch_4.bin");
  e = error_of([&] { Cifar10Dataset t(d, true); });
  EXPECT_NE(e.find("data_batch_4.bin' does not exist"), std::string::npos) << e;
  std::filesystem::remove_all(d);
}

TEST(FashionMnist, InstalledCopyLoadsWhenPresent) {
  if (!std::filesystem::exists(std::string(kFashionMnistDir) + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  auto test = load_mnist_like("fashion-mnist", kFashionMnistDir, false);
  EXPECT_EQ(test->size(), 10000);
  EXPECT_EQ(test->sample_shape(), (Shape{1, 28, 28}));
}

}  // namespace
}  // namespace dpb
