#pragma once
// Reading untrusted JSON (reports from other machines, CI artifacts, link models):
// a JsonView is one node of a parsed document and where it is in it
// ("runs[0].ranks[1].rank"). Every accessor checks the type and the bounds the caller
// gives and throws one dpb::Error that names the document, the field, what was expected
// and what was found (untrusted text escaped), so a bad value never reaches the code
// that uses it. Absent and null optional members read as std::nullopt.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dpb::reports {

class JsonView {
 public:
  static constexpr size_t kMaxItems = size_t{1} << 22;  // elements of one array
  static constexpr size_t kMaxText = size_t{1} << 16;   // bytes of one string

  // `document` names the whole document in messages ("report 'run.json'").
  JsonView(const nlohmann::json& node, std::string document, std::string path = "");

  const nlohmann::json& raw() const { return *node_; }
  const std::string& path() const { return path_; }
  // "report 'x.json', runs[0].steps" (the document alone at the root).
  std::string where() const;
  [[noreturn]] void fail(std::string_view what) const;

  bool is_null() const { return node_->is_null(); }
  // The node itself as a value.
  std::string text(size_t max_len = kMaxText) const;
  int64_t integer(int64_t lo, int64_t hi) const;
  double number(double lo, double hi) const;  // finite, within [lo, hi]
  bool boolean() const;
  std::vector<JsonView> items(size_t max_items = kMaxItems) const;  // an array's elements
  void expect_object() const;

  // Members of an object: `key` must be present (and not null) unless read as maybe_*.
  bool has(std::string_view key) const;  // present and not null
  JsonView member(std::string_view key) const;
  std::optional<JsonView> maybe_member(std::string_view key) const;
  std::string str(std::string_view key, size_t max_len = kMaxText) const;
  std::optional<std::string> maybe_str(std::string_view key, size_t max_len = kMaxText) const;
  int64_t integer(std::string_view key, int64_t lo, int64_t hi) const;
  std::optional<int64_t> maybe_integer(std::string_view key, int64_t lo, int64_t hi) const;
  double number(std::string_view key, double lo, double hi) const;
  std::optional<double> maybe_number(std::string_view key, double lo, double hi) const;
  bool boolean(std::string_view key) const;
  bool boolean_or(std::string_view key, bool fallback) const;
  std::vector<JsonView> items(std::string_view key, size_t max_items = kMaxItems) const;
  std::vector<JsonView> maybe_items(std::string_view key, size_t max_items = kMaxItems) const;  // absent: empty

  // One of the named values, e.g. choice(key, {{"single", Mode::single}, ...}), or from a
  // table (a registry's choices).
  template <typename E>
  E choice(std::string_view key, std::initializer_list<std::pair<std::string_view, E>> options) const {
    return choice_in<E>(key, options);
  }
  template <typename E>
  E choice(std::string_view key, const std::vector<std::pair<std::string_view, E>>& options) const {
    return choice_in<E>(key, options);
  }
  template <typename E>
  std::optional<E> maybe_choice(std::string_view key,
                                std::initializer_list<std::pair<std::string_view, E>> options) const {
    if (!has(key)) return std::nullopt;
    return choice_in<E>(key, options);
  }
  template <typename E>
  std::optional<E> maybe_choice(std::string_view key,
                                const std::vector<std::pair<std::string_view, E>>& options) const {
    if (!has(key)) return std::nullopt;
    return choice_in<E>(key, options);
  }

 private:
  template <typename E, typename Options>
  E choice_in(std::string_view key, const Options& options) const {
    const std::string s = str(key, 64);
    for (const auto& [name, value] : options)
      if (s == name) return value;
    std::string valid;
    for (const auto& o : options) valid += (valid.empty() ? "" : ", ") + std::string(o.first);
    member(key).fail_choice(valid);
  }
  [[noreturn]] void fail_choice(const std::string& valid) const;
  std::string found() const;  // what the node holds, for messages

  const nlohmann::json* node_;
  std::string document_, path_;
};

// Parses `text` as JSON, naming `document` in the error when it is not JSON. The text
// must be at most `max_bytes` long and nest at most 256 levels.
nlohmann::json parse_untrusted(std::string_view text, const std::string& document, size_t max_bytes);
// Reads and parses a file (at most `max_bytes`).
nlohmann::json read_json_file(const std::string& path, const std::string& what, size_t max_bytes);

}  // namespace dpb::reports
