#include "reports/json_view.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>

#include "engine/core/error.h"
#include "engine/core/text.h"

namespace dpb::reports {

namespace {
constexpr int kMaxDepth = 256;

std::string member_path(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}
}  // namespace

JsonView::JsonView(const nlohmann::json& node, std::string document, std::string path)
    : node_(&node), document_(std::move(document)), path_(std::move(path)) {}

std::string JsonView::where() const { return path_.empty() ? document_ : document_ + ", " + path_; }

void JsonView::fail(std::string_view what) const { DPB_FAIL() << where() << ": " << what; }

std::string JsonView::found() const {
  const auto& n = *node_;
  if (n.is_string()) return "\"" + escape_untrusted(n.get_ref<const std::string&>(), 60) + "\"";
  if (n.is_number() || n.is_boolean() || n.is_null()) return n.dump();
  return std::string("an ") + (n.is_array() ? "array" : "object");
}

void JsonView::fail_choice(const std::string& valid) const {
  fail(fmt::format("expected one of {}, got {}", valid, found()));
}

void JsonView::expect_object() const {
  if (!node_->is_object()) fail("expected an object, got " + found());
}

std::string JsonView::text(size_t max_len) const {
  if (!node_->is_string()) fail("expected a string, got " + found());
  const auto& s = node_->get_ref<const std::string&>();
  if (s.size() > max_len) fail(fmt::format("a string of {} bytes is longer than the {} allowed", s.size(), max_len));
  return s;
}

int64_t JsonView::integer(int64_t lo, int64_t hi) const {
  int64_t v = 0;
  if (node_->is_number_unsigned()) {
    const auto u = node_->get<uint64_t>();
    if (u > static_cast<uint64_t>(hi)) fail(fmt::format("expected an integer in [{}, {}], got {}", lo, hi, found()));
    v = static_cast<int64_t>(u);
  } else if (node_->is_number_integer()) {
    v = node_->get<int64_t>();
  } else {
    fail(fmt::format("expected an integer in [{}, {}], got {}", lo, hi, found()));
  }
  if (v < lo || v > hi) fail(fmt::format("expected an integer in [{}, {}], got {}", lo, hi, found()));
  return v;
}

double JsonView::number(double lo, double hi) const {
  if (!node_->is_number()) fail(fmt::format("expected a number in [{:g}, {:g}], got {}", lo, hi, found()));
  const double v = node_->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi) fail(fmt::format("expected a number in [{:g}, {:g}], got {}", lo, hi, found()));
  return v;
}

bool JsonView::boolean() const {
  if (!node_->is_boolean()) fail("expected true or false, got " + found());
  return node_->get<bool>();
}

std::vector<JsonView> JsonView::items(size_t max_items) const {
  if (!node_->is_array()) fail("expected an array, got " + found());
  if (node_->size() > max_items)
    fail(fmt::format("an array of {} elements is longer than the {} allowed", node_->size(), max_items));
  std::vector<JsonView> out;
  out.reserve(node_->size());
  for (size_t i = 0; i < node_->size(); ++i)
    out.emplace_back((*node_)[i], document_, fmt::format("{}[{}]", path_, i));
  return out;
}

bool JsonView::has(std::string_view key) const {
  if (!node_->is_object()) return false;
  const auto it = node_->find(key);
  return it != node_->end() && !it->is_null();
}

JsonView JsonView::member(std::string_view key) const {
  expect_object();
  const auto it = node_->find(key);
  if (it == node_->end()) DPB_FAIL() << where() << ": the required field '" << key << "' is missing";
  return JsonView(*it, document_, member_path(path_, key));
}

std::optional<JsonView> JsonView::maybe_member(std::string_view key) const {
  expect_object();
  if (!has(key)) return std::nullopt;
  return JsonView(*node_->find(key), document_, member_path(path_, key));
}

std::string JsonView::str(std::string_view key, size_t max_len) const { return member(key).text(max_len); }

std::optional<std::string> JsonView::maybe_str(std::string_view key, size_t max_len) const {
  if (auto m = maybe_member(key)) return m->text(max_len);
  return std::nullopt;
}

int64_t JsonView::integer(std::string_view key, int64_t lo, int64_t hi) const { return member(key).integer(lo, hi); }

std::optional<int64_t> JsonView::maybe_integer(std::string_view key, int64_t lo, int64_t hi) const {
  if (auto m = maybe_member(key)) return m->integer(lo, hi);
  return std::nullopt;
}

double JsonView::number(std::string_view key, double lo, double hi) const { return member(key).number(lo, hi); }

std::optional<double> JsonView::maybe_number(std::string_view key, double lo, double hi) const {
  if (auto m = maybe_member(key)) return m->number(lo, hi);
  return std::nullopt;
}

bool JsonView::boolean(std::string_view key) const { return member(key).boolean(); }

bool JsonView::boolean_or(std::string_view key, bool fallback) const {
  if (auto m = maybe_member(key)) return m->boolean();
  return fallback;
}

std::vector<JsonView> JsonView::items(std::string_view key, size_t max_items) const {
  return member(key).items(max_items);
}

std::vector<JsonView> JsonView::maybe_items(std::string_view key, size_t max_items) const {
  if (auto m = maybe_member(key)) return m->items(max_items);
  return {};
}

nlohmann::json parse_untrusted(std::string_view text, const std::string& document, size_t max_bytes) {
  DPB_CHECK(text.size() <= max_bytes) << document << " is " << text.size() << " bytes, more than the " << max_bytes
                                      << " a document of this kind may have";
  try {
    return nlohmann::json::parse(text.begin(), text.end(),
                                 [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
                                   DPB_CHECK(depth <= kMaxDepth)
                                       << document << " nests deeper than " << kMaxDepth << " levels";
                                   return true;
                                 });
  } catch (const nlohmann::json::exception& e) {
    DPB_FAIL() << document << " is not JSON: " << escape_untrusted(e.what(), 200);
  }
}

nlohmann::json read_json_file(const std::string& path, const std::string& what, size_t max_bytes) {
  const std::string document = what + " '" + escape_untrusted(path) + "'";
  std::ifstream in(path, std::ios::binary);
  DPB_CHECK(in.good()) << "cannot read " << document;
  std::string text;
  char buf[1 << 16];
  while (in.read(buf, sizeof(buf)) || in.gcount() > 0) {
    text.append(buf, static_cast<size_t>(in.gcount()));
    DPB_CHECK(text.size() <= max_bytes) << document << " is larger than the " << max_bytes
                                        << " bytes a document of this kind may have";
  }
  DPB_CHECK(!in.bad()) << "reading " << document << " failed";
  return parse_untrusted(text, document, max_bytes);
}

}  // namespace dpb::reports
