#pragma once
// Deterministic, seedable random numbers (xoshiro256** seeded by splitmix64).
// The whole state is four words, so it can be saved in a checkpoint and restored.
#include <array>
#include <cstdint>
#include <vector>

namespace dpb {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) { seed_with(seed); }
  void seed_with(uint64_t seed);

  uint64_t next_u64();
  // Uniform in [0, 1).
  double uniform();
  float uniform(float lo, float hi) { return lo + static_cast<float>(uniform()) * (hi - lo); }
  // Standard normal (Box-Muller, both values used).
  double normal();
  // The state after n more uniform() or normal() draws, as drawing them would leave it
  // (deferred initialisation draws a shard's values without the rows before it).
  void skip_uniforms(int64_t n);
  void skip_normals(int64_t n);
  // Uniform integer in [0, n).
  uint64_t below(uint64_t n);
  // A new independent stream derived from this one (for per-module / per-worker use).
  Generator fork();

  std::array<uint64_t, 4> state() const { return s_; }
  void set_state(const std::array<uint64_t, 4>& s) {
    s_ = s;
    has_spare_ = false;
  }

 private:
  std::array<uint64_t, 4> s_{};
  bool has_spare_ = false;
  double spare_ = 0.0;
};

// Fisher-Yates permutation of 0..n-1.
std::vector<int64_t> random_permutation(int64_t n, Generator& gen);

}  // namespace dpb
