#include "engine/trace/intervals.h"

#include <algorithm>

namespace dpb::trace {

std::vector<Span64> merged(std::vector<Span64> spans, int64_t lo, int64_t hi) {
  for (auto& [a, b] : spans) {
    a = std::max(a, lo);
    b = std::min(b, hi);
  }
  spans.erase(std::remove_if(spans.begin(), spans.end(), [](const Span64& p) { return p.second <= p.first; }),
              spans.end());
  std::sort(spans.begin(), spans.end());
  std::vector<Span64> out;
  for (const auto& s : spans) {
    if (!out.empty() && s.first <= out.back().second) out.back().second = std::max(out.back().second, s.second);
    else out.push_back(s);
  }
  return out;
}

int64_t total_length(const std::vector<Span64>& disjoint) {
  int64_t total = 0;
  for (const auto& [a, b] : disjoint) total += b - a;
  return total;
}

int64_t union_ns(std::vector<Span64> spans, int64_t lo, int64_t hi) { return total_length(merged(std::move(spans), lo, hi)); }

int64_t intersection_length(const std::vector<Span64>& a, const std::vector<Span64>& b) {
  int64_t total = 0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const int64_t lo = std::max(a[i].first, b[j].first), hi = std::min(a[i].second, b[j].second);
    if (hi > lo) total += hi - lo;
    if (a[i].second < b[j].second) ++i;
    else ++j;
  }
  return total;
}

std::vector<Span64> intersection(const std::vector<Span64>& a, const std::vector<Span64>& b) {
  std::vector<Span64> out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const int64_t lo = std::max(a[i].first, b[j].first), hi = std::min(a[i].second, b[j].second);
    if (hi > lo) out.emplace_back(lo, hi);
    if (a[i].second < b[j].second) ++i;
    else ++j;
  }
  return out;
}

std::vector<Span64> difference(const std::vector<Span64>& a, const std::vector<Span64>& b) {
  std::vector<Span64> out;
  size_t j = 0;
  for (auto [lo, hi] : a) {
    while (j < b.size() && b[j].second <= lo) ++j;
    size_t k = j;
    while (lo < hi) {
      if (k >= b.size() || b[k].first >= hi) {
        out.emplace_back(lo, hi);
        break;
      }
      if (b[k].first > lo) out.emplace_back(lo, b[k].first);
      lo = std::max(lo, b[k].second);
      ++k;
    }
  }
  return out;
}

std::vector<Span64> unite(const std::vector<Span64>& a, const std::vector<Span64>& b) {
  std::vector<Span64> all(a);
  all.insert(all.end(), b.begin(), b.end());
  if (all.empty()) return all;
  int64_t lo = all.front().first, hi = all.front().second;
  for (const auto& s : all) {
    lo = std::min(lo, s.first);
    hi = std::max(hi, s.second);
  }
  return merged(std::move(all), lo, hi);
}

}  // namespace dpb::trace
