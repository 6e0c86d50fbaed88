#pragma once
// Shared by the files that turn the report model into JSON and back (model_json.cpp,
// config_json.cpp, mode_json.cpp, findings.cpp): how figures are written and the bounds
// they are read in.
#include <nlohmann/json.hpp>

#include <cmath>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/parallel/modes.h"
#include "engine/trace/breakdown.h"
#include "reports/json_view.h"

namespace dpb::reports {

struct RunConfig;
struct Environment;
struct SweepPoint;
struct DpStats;
struct StageStats;
struct TpStats;
struct FsdpStats;
struct PipelineStats;

namespace json_util {

inline constexpr double kBig = 1e300;                // any finite figure
inline constexpr int64_t kCount = int64_t{1} << 50;  // counts of samples, steps, bytes
inline constexpr int kMaxWorld = 1 << 20;            // devices or ranks
inline constexpr size_t kName = 256;                 // ids, names, hosts

// A measured figure: null when not measured or not finite.
inline nlohmann::json num(const std::optional<double>& v) {
  return v && std::isfinite(*v) ? nlohmann::json(*v) : nlohmann::json(nullptr);
}
// Figures, each measured or null.
inline nlohmann::json nums(const std::vector<std::optional<double>>& v) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& x : v) a.push_back(num(x));
  return a;
}
inline std::vector<std::optional<double>> maybe_nums(const JsonView& j, std::string_view key, double lo = -kBig,
                                                     double hi = kBig) {
  std::vector<std::optional<double>> out;
  for (const auto& v : j.maybe_items(key))
    out.push_back(v.is_null() ? std::optional<double>() : std::optional<double>(v.number(lo, hi)));
  return out;
}
inline nlohmann::json opt_text(const std::optional<std::string>& s) {
  return s ? nlohmann::json(*s) : nlohmann::json(nullptr);
}

inline const std::initializer_list<std::pair<std::string_view, PipelineSchedule>> kSchedules{
    {"naive", PipelineSchedule::naive}, {"gpipe", PipelineSchedule::gpipe}, {"1f1b", PipelineSchedule::one_f_one_b}};
inline const std::initializer_list<std::pair<std::string_view, trace::TimelineSource>> kSources{
    {"host", trace::TimelineSource::host},
    {"cuda-events", trace::TimelineSource::cuda_events},
    {"cupti", trace::TimelineSource::cupti}};

std::vector<std::string> strings(const JsonView& j, std::string_view key, size_t max_items = 1 << 16);
std::vector<int64_t> integers(const JsonView& j, std::string_view key, int64_t lo, int64_t hi);

nlohmann::json env_json(const Environment& e);
Environment env_from(const JsonView& j);
nlohmann::json config_json(const RunConfig& c, bool sweep);
RunConfig config_from(const JsonView& j);
nlohmann::json sweep_json(const std::vector<SweepPoint>& sweep);
SweepPoint sweep_point_from(const JsonView& j);

// The parallel modes' sections of a run (mode_json.cpp).
nlohmann::json dp_json(const DpStats& d);
DpStats dp_from(const JsonView& j);
nlohmann::json stages_json(const std::vector<StageStats>& stages);
StageStats stage_from(const JsonView& j);
nlohmann::json tp_json(const TpStats& t);
TpStats tp_from(const JsonView& j);
nlohmann::json fsdp_json(const FsdpStats& f);
FsdpStats fsdp_from(const JsonView& j);
nlohmann::json pipeline_json(const PipelineStats& p);
PipelineStats pipeline_from(const JsonView& j);

}  // namespace json_util
}  // namespace dpb::reports
