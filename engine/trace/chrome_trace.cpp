#include "engine/trace/chrome_trace.h"

#include <map>
#include <set>

namespace dpb::trace {

namespace {

double us(int64_t ns, int64_t origin) { return static_cast<double>(ns - origin) * 1e-3; }

Category category_of(const std::string& name) {
  for (auto c : {Category::compute, Category::comm, Category::copy, Category::data,
                 Category::optim})
    if (name == category_name(c)) return c;
  return Category::compute;
}

}  // namespace

nlohmann::json chrome_trace(const std::vector<TraceProcess>& processes, int64_t origin_ns,
                            const nlohmann::json& metadata) {
  nlohmann::json events = nlohmann::json::array();
  for (const auto& p : processes) {
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", p.pid}, {"args", {{"name", p.name}}}});
    events.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", p.pid}, {"args", {{"sort_index", p.pid}}}});
    // Lanes in order of first appearance; "steps" first when there are steps.
    std::map<std::string, int> lanes;
    auto lane_id = [&](const std::string& lane) {
      auto it = lanes.find(lane);
      if (it != lanes.end()) return it->second;
      const int id = static_cast<int>(lanes.size());
      lanes.emplace(lane, id);
      events.push_back(
          {{"name", "thread_name"}, {"ph", "M"}, {"pid", p.pid}, {"tid", id}, {"args", {{"name", lane}}}});
      events.push_back(
          {{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", p.pid}, {"tid", id}, {"args", {{"sort_index", id}}}});
      return id;
    };
    if (!p.steps.empty()) {
      const int tid = lane_id("steps");
      for (const auto& s : p.steps)
        events.push_back({{"name", (s.warmup ? "warm-up step " : "step ") + std::to_string(s.step)},
                          {"cat", "step"},
                          {"ph", "X"},
                          {"pid", p.pid},
                          {"tid", tid},
                          {"ts", us(s.begin_ns, origin_ns)},
                          {"dur", us(s.end_ns, s.begin_ns)},
                          {"args", {{"step", s.step}, {"warmup", s.warmup}}}});
    }
    // Flows: from each launch (argument "launch") to the device work it queued (the same
    // value as "correlation"), where both are in this process.
    std::set<int64_t> launches, launched;
    for (const auto& i : p.intervals)
      for (const auto& [k, v] : i.args) {
        if (k == "launch") launches.insert(v);
        if (k == "correlation") launched.insert(v);
      }
    for (const auto& i : p.intervals) {
      nlohmann::json args = nlohmann::json::object();
      for (const auto& [k, v] : i.args) args[k] = v;
      const int tid = lane_id(i.lane);
      events.push_back({{"name", i.name},
                        {"cat", category_name(i.cat)},
                        {"ph", "X"},
                        {"pid", p.pid},
                        {"tid", tid},
                        {"ts", us(i.begin_ns, origin_ns)},
                        {"dur", us(i.end_ns, i.begin_ns)},
                        {"args", args}});
      for (const auto& [k, v] : i.args) {
        const bool out = k == "launch" && launched.count(v), in = k == "correlation" && launches.count(v);
        if (!out && !in) continue;
        nlohmann::json flow = {{"name", "launch"},         {"cat", "launch"},   {"ph", out ? "s" : "f"},
                               {"id", (static_cast<int64_t>(p.pid) << 40) + v}, {"pid", p.pid},
                               {"tid", tid},               {"ts", us(i.begin_ns, origin_ns)}};
        if (in) flow["bp"] = "e";
        events.push_back(std::move(flow));
      }
    }
  }
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}, {"otherData", metadata}};
}

nlohmann::json intervals_json(const std::vector<Interval>& intervals) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& i : intervals) {
    nlohmann::json args = nlohmann::json::array();
    for (const auto& [k, v] : i.args) args.push_back({k, v});
    rows.push_back({i.name, category_name(i.cat), i.device, i.lane, i.begin_ns, i.end_ns, args});
  }
  return rows;
}

std::vector<Interval> intervals_from_json(const nlohmann::json& j) {
  std::vector<Interval> out;
  for (const auto& r : j) {
    Interval i;
    i.name = r.at(0).get<std::string>();
    i.cat = category_of(r.at(1).get<std::string>());
    i.device = r.at(2).get<int>();
    i.lane = r.at(3).get<std::string>();
    i.begin_ns = r.at(4).get<int64_t>();
    i.end_ns = r.at(5).get<int64_t>();
    for (const auto& a : r.at(6)) i.args.emplace_back(a.at(0).get<std::string>(), a.at(1).get<int64_t>());
    out.push_back(std::move(i));
  }
  return out;
}

}  // namespace dpb::trace
