// The house reads in one direction (docs/ARCHITECTURE.md §1): engine <- reports <- diagnostics <-
// benchmarks; inside the engine a lower layer never includes a higher one; inside
// dpbench control flows cli -> launch -> rank -> benchmark -> report; inside dpdoctor the
// rules know the evidence, not the doctor that runs them. And no source file outside
// the tests grows past 600 lines. Read from the source tree itself.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

const fs::path kRoot = DPB_SOURCE_DIR;

bool is_source(const fs::path& p) {
  const auto e = p.extension().string();
  return e == ".h" || e == ".cpp" || e == ".cu" || e == ".cuh";
}

std::vector<std::string> sources() {
  std::vector<std::string> out;
  for (const char* top : {"engine", "reports", "diagnostics", "benchmarks"})
    for (const auto& f : fs::recursive_directory_iterator(kRoot / top))
      if (f.is_regular_file() && is_source(f.path())) out.push_back(fs::relative(f.path(), kRoot).string());
  return out;
}

std::vector<std::string> project_includes(const std::string& file) {
  std::ifstream in(kRoot / file);
  static const std::regex inc(R"re(^\s*#\s*include\s+"((engine|reports|diagnostics|benchmarks)/[^"]+)")re");
  std::vector<std::string> out;
  std::smatch m;
  for (std::string line; std::getline(in, line);)
    if (std::regex_search(line, m, inc)) out.push_back(m[1]);
  return out;
}

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

// The component a file belongs to and its rank: an include must go to a strictly lower
// rank, or stay within the component (foo.cpp including foo.h, or its own folder).
struct Place {
  std::string component;
  int rank;
};

std::optional<Place> place(const std::string& file) {
  static const std::vector<std::pair<std::string, int>> engine{
      {"core", 0}, {"trace", 1}, {"tensor", 2}, {"backend", 3}, {"comm", 4}, {"nn", 5},
      {"models", 6}, {"optim", 6}, {"data", 7}, {"parallel", 8}, {"train", 9}};
  // dpbench: files by name (without extension), cli -> launch -> rank -> benchmark ...
  static const std::map<std::string, int> dpbench{
      {"collectives/spec", 0}, {"options", 1},     {"setup", 2},   {"metrics", 2},   {"collectives/runner", 3},
      {"gather", 3},           {"summary", 3},     {"device_timing", 3},              {"trace_export", 4},
      {"layer_profile", 4},    {"what_if", 4},     {"verify", 5},
      {"benchmark", 5},        {"rank", 6},        {"sweep", 6},   {"prove", 6},   {"predict", 6},   {"launch", 7},
      {"cli", 8},              {"main", 9}};
  static const std::map<std::string, int> dpdoctor{
      {"json_stream", 0}, {"evidence", 0}, {"kineto_reader", 1}, {"rules", 1}, {"pricing", 2}, {"trace_jobs", 2},
      {"torch_trace", 3},  {"doctor", 4},   {"main", 5}};
  const fs::path p(file);
  const std::string stem = (p.parent_path() / p.stem()).string();
  if (starts_with(file, "engine/")) {
    const std::string dir = file.substr(7, file.find('/', 7) - 7);
    for (const auto& [name, rank] : engine)
      if (dir == name) return Place{"engine/" + name, rank};
    return std::nullopt;
  }
  if (starts_with(file, "reports/")) return Place{"reports", 20};
  if (starts_with(file, "diagnostics/dpdoctor/rules/")) return Place{"dpdoctor/rules", 30 + dpdoctor.at("rules")};
  if (starts_with(file, "diagnostics/dpdoctor/")) {
    const std::string name = stem.substr(std::string("diagnostics/dpdoctor/").size());
    if (!dpdoctor.count(name)) return std::nullopt;
    return Place{"dpdoctor/" + name, 30 + dpdoctor.at(name)};
  }
  // The simulator knows the engine, the report and dpdoctor's trace reader (a profile from
  // a PyTorch trace), nothing of dpbench, which uses it.
  if (starts_with(file, "benchmarks/simulate/")) return Place{"simulate", 35};
  if (starts_with(file, "benchmarks/dpbench/")) {
    std::string name = stem.substr(std::string("benchmarks/dpbench/").size());
    if (starts_with(name, "collectives/") && name != "collectives/runner" && name != "collectives/spec")
      name = "collectives/runner";  // one file per collective: the runner's level
    if (!dpbench.count(name)) return std::nullopt;
    return Place{"dpbench/" + name, 40 + dpbench.at(name)};
  }
  if (starts_with(file, "benchmarks/")) return Place{"benchmarks", 60};
  return std::nullopt;
}

TEST(Layering, EveryIncludeGoesDownTheHouse) {
  int checked = 0;
  for (const auto& file : sources()) {
    const auto from = place(file);
    ASSERT_TRUE(from) << file << " is in no layer: add it to this test's map";
    for (const auto& inc : project_includes(file)) {
      if (starts_with(inc, "dpb/")) continue;  // generated headers
      const auto to = place(inc);
      ASSERT_TRUE(to) << file << " includes " << inc << ", which is in no layer";
      ++checked;
      if (to->component == from->component) continue;
      EXPECT_LT(to->rank, from->rank) << file << " (" << from->component << ") includes " << inc << " ("
                                      << to->component << "): an import that runs back up the house";
    }
  }
  EXPECT_GT(checked, 300);  // the walk found the sources
}

TEST(Layering, TheMapKeepsTheLayersInOrder) {
  // The ranks the check above compares: a backend sits above the tensors it serves, and
  // the launcher above the options it runs.
  const auto tensor = place("engine/tensor/tensor.cpp"), cuda = place("engine/backend/cuda/runtime.h");
  ASSERT_TRUE(tensor && cuda);
  EXPECT_FALSE(cuda->rank < tensor->rank);
  const auto options = place("benchmarks/dpbench/options.h"), launch = place("benchmarks/dpbench/launch.h");
  EXPECT_FALSE(launch->rank < options->rank);
}

TEST(Layering, NoSourceFileOutsideTheTestsPassesSixHundredLines) {
  for (const auto& file : sources()) {
    std::ifstream in(kRoot / file);
    int lines = 0;
    for (std::string line; std::getline(in, line);) ++lines;
    EXPECT_LE(lines, 600) << file << " has " << lines << " lines: it is probably two things";
  }
}

}  // namespace
