#pragma once
// Interval arithmetic on [begin, end) spans of nanoseconds: what every busy fraction,
// breakdown and overlap in dpbench and dpdoctor is computed with.
#include <cstdint>
#include <utility>
#include <vector>

namespace dpb::trace {

using Span64 = std::pair<int64_t, int64_t>;  // [begin, end) in ns

// Length of the union of spans clipped to [lo, hi).
int64_t union_ns(std::vector<Span64> spans, int64_t lo, int64_t hi);
// The union of spans clipped to [lo, hi), as disjoint spans in order.
std::vector<Span64> merged(std::vector<Span64> spans, int64_t lo, int64_t hi);
// Total length of disjoint spans.
int64_t total_length(const std::vector<Span64>& disjoint);
// |a ∩ b| for two lists of disjoint spans in order.
int64_t intersection_length(const std::vector<Span64>& a, const std::vector<Span64>& b);
// a ∩ b for two lists of disjoint spans in order.
std::vector<Span64> intersection(const std::vector<Span64>& a, const std::vector<Span64>& b);
// a \ b for two lists of disjoint spans in order.
std::vector<Span64> difference(const std::vector<Span64>& a, const std::vector<Span64>& b);
// a ∪ b for two lists of disjoint spans in order.
std::vector<Span64> unite(const std::vector<Span64>& a, const std::vector<Span64>& b);

}  // namespace dpb::trace
