#include "engine/data/transforms.h"

#include <algorithm>

#include "engine/core/error.h"

namespace dpb {

Generator sample_generator(uint64_t seed, int64_t epoch, int64_t index) {
  Generator g(seed ^ 0xa5a5a5a5a5a5ULL);
  for (int i = 0; i < static_cast<int>(epoch % 7); ++i) g.next_u64();
  return Generator(g.next_u64() ^ (static_cast<uint64_t>(epoch) * 0x9e3779b97f4a7c15ULL) ^
                   (static_cast<uint64_t>(index) * 0xbf58476d1ce4e5b9ULL));
}

void RandomCropFlip::apply(float* x, const Shape& s, Generator& gen) const {
  const int64_t C = s[0], H = s[1], W = s[2];
  DPB_CHECK(static_cast<int64_t>(fill_.size()) == C) << "RandomCropFlip: " << fill_.size() << " fill values for "
                                                    << C << " channels";
  const int64_t dy = static_cast<int64_t>(gen.below(static_cast<uint64_t>(2 * pad_ + 1))) - pad_;
  const int64_t dx = static_cast<int64_t>(gen.below(static_cast<uint64_t>(2 * pad_ + 1))) - pad_;
  const bool flip = gen.below(2) == 1;
  std::vector<float> src(x, x + C * H * W);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t i = 0; i < H; ++i)
      for (int64_t j = 0; j < W; ++j) {
        const int64_t si = i + dy, sj0 = j + dx;
        const int64_t sj = flip ? (W - 1 - j) + dx : sj0;
        const bool inside = si >= 0 && si < H && sj >= 0 && sj < W;
        x[(c * H + i) * W + j] = inside ? src[static_cast<size_t>((c * H + si) * W + sj)] : fill_[static_cast<size_t>(c)];
      }
}

}  // namespace dpb
