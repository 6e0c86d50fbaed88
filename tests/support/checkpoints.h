#pragma once
// Comparing two checkpoints (safetensors files) tensor by tensor, for the tests that check
// that checkpoints written by sharded or cut ranks are one device's.
#include <string>

namespace dpb::test {

// The largest difference between the two files' tensors of the same name, each as
// ||a - b|| / ||a|| (L2); a tensor missing from `b` or of another shape is a test failure.
double checkpoint_difference(const std::string& a, const std::string& b);

}  // namespace dpb::test
