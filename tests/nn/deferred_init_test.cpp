// Deferred (meta-device) initialisation: a model built under init::DeferredInit holds
// no memory for the parameters it draws, every range of their values drawn later is the
// values a normal build gives (the normal draws' pairs crossed at odd offsets, and the
// spare one tensor leaves to the next), and a deferred model drawn whole is the model.
#include "engine/nn/init.h"

#include <gtest/gtest.h>

#include "engine/models/model.h"

namespace dpb {
namespace {

TEST(DeferredInit, AnyRangeIsTheDrawsOfANormalBuild) {
  for (bool normal : {false, true}) {
    // Three tensors of odd sizes one after another from one generator: the second and
    // third start on a normal draw's spare.
    const std::vector<int64_t> sizes{7, 13, 10};
    Generator built(5), deferred(5);
    std::vector<Tensor> want, got;
    {
      for (int64_t n : sizes) {
        Tensor t = Tensor::empty({n});
        normal ? init::normal(t, 0.5f, built) : init::uniform(t, 0.5f, built);
        want.push_back(t);
      }
      init::DeferredInit scope;
      for (int64_t n : sizes) {
        Tensor t = Tensor::empty({n});
        normal ? init::normal(t, 0.5f, deferred) : init::uniform(t, 0.5f, deferred);
        ASSERT_NE(t.deferred_values(), nullptr);
        EXPECT_TRUE(t.storage_released());
        got.push_back(t);
      }
    }
    // The generators are left alike: what is built after draws the same.
    EXPECT_EQ(built.next_u64(), deferred.next_u64());
    EXPECT_FALSE(init::DeferredInit::active());
    for (size_t k = 0; k < sizes.size(); ++k) {
      const auto all = want[k].to_vector();
      for (int64_t first = 0; first < sizes[k]; ++first)
        for (int64_t count = 0; first + count <= sizes[k]; count += 3) {
          Tensor out = Tensor::empty({count});
          init::draw(*got[k].deferred_values(), first, count, out);
          if (count == 0) continue;
          EXPECT_EQ(out.to_vector(), std::vector<float>(all.begin() + first, all.begin() + first + count))
              << (normal ? "normal" : "uniform") << " tensor " << k << " from " << first << ", " << count;
        }
    }
  }
}

TEST(DeferredInit, AModelDrawnWholeIsTheModelBuiltWhole) {
  for (const char* name : {"mlp", "lenet", "gpt2-tiny"}) {
    Generator a(9), b(9);
    auto built = build_model(name, a);
    std::unique_ptr<Model> deferred;
    {
      init::DeferredInit scope;
      deferred = build_model(name, b);
    }
    size_t drawn_later = 0;
    for (auto* p : deferred->parameters()) drawn_later += p->data().deferred_values() != nullptr;
    EXPECT_GT(drawn_later, 0u) << name;
    EXPECT_THROW(deferred->parameters().front()->data().to_vector(), Error) << name << ": values not drawn yet";
    init::materialize(*deferred);
    const auto want = built->named_parameters(), got = deferred->named_parameters();
    ASSERT_EQ(want.size(), got.size());
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_EQ(got[i].second->data().to_vector(), want[i].second->data().to_vector()) << name << " " << want[i].first;
  }
}

}  // namespace
}  // namespace dpb
