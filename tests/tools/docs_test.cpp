// The documents say what the code does: README's count of dpdoctor's rules is the
// registry's, every section of docs/ARCHITECTURE.md that a comment cites exists (the
// sources cite no document outside the repository), every command in a block marked
// runnable (```sh runnable) in README.md or docs/ runs, and README stays a front door.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <vector>

#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include "diagnostics/dpdoctor/doctor.h"

namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(Docs, ReadmeCountsTheRulesThereAre) {
  const std::string readme = slurp(fs::path(DPB_SOURCE_DIR) / "README.md");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(readme, m, std::regex(R"(`dpdoctor`: (\d+) rules)"))) << "README names no rule count";
  EXPECT_EQ(std::stoul(m[1]), dpb::doctor::rules().size());
}

// Every finding the doctor can write is one its findings schema admits (a sweep that
// lost efficiency under load wrote "scaling-efficiency", which the schema lacked, and
// every reader then refused the report), and the schema names no finding that does not exist.
TEST(Docs, FindingsSchemaNamesEveryRule) {
  const auto schema = nlohmann::json::parse(slurp(fs::path(DPB_SOURCE_DIR) / "reports/schema/dpdoctor.findings-1.schema.json"));
  std::set<std::string> in_schema;
  std::function<void(const nlohmann::json&)> walk = [&](const nlohmann::json& j) {
    if (j.is_object()) {
      if (j.contains("properties") && j["properties"].contains("id") && j["properties"]["id"].contains("enum"))
        for (const auto& v : j["properties"]["id"]["enum"]) in_schema.insert(v.get<std::string>());
      for (const auto& [k, v] : j.items()) walk(v);
    } else if (j.is_array()) {
      for (const auto& v : j) walk(v);
    }
  };
  walk(schema);
  std::set<std::string> emitted{"unexplained-idle"};  // the budget's remainder, not a rule
  for (const auto& r : dpb::doctor::rules()) emitted.insert(r.id);
  EXPECT_EQ(in_schema, emitted);
}

TEST(Docs, CitedArchitectureSectionsExistAndNothingOutsideIsCited) {
  const fs::path root(DPB_SOURCE_DIR);
  const std::string arch = slurp(root / "docs" / "ARCHITECTURE.md");
  std::set<std::string> sections;
  const std::regex heading(R"(\n## (\d+[a-z]?)\. )");
  for (std::sregex_iterator it(arch.begin(), arch.end(), heading), end; it != end; ++it) sections.insert((*it)[1]);
  ASSERT_GE(sections.size(), 8u);
  const std::regex cite(R"(ARCHITECTURE\.md §(\d+[a-z]?))");
  int cited = 0;
  for (const char* dir : {"engine", "reports", "diagnostics", "benchmarks", "tests", "scripts"}) {
    for (const auto& e : fs::recursive_directory_iterator(root / dir)) {
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".h" && ext != ".cpp" && ext != ".cu" && ext != ".py" && ext != ".sh"))
        continue;
      const std::string text = slurp(e.path());
      for (const char* outside : {"DESIGN" ".md", "DESIGN" " §"})  // split, so that this file is not a hit
        EXPECT_EQ(text.find(outside), std::string::npos) << e.path() << " cites a document outside the repository";
      for (std::sregex_iterator it(text.begin(), text.end(), cite), end; it != end; ++it, ++cited)
        EXPECT_TRUE(sections.count((*it)[1])) << e.path() << " cites §" << (*it)[1] << ", which docs/ARCHITECTURE.md lacks";
    }
  }
  EXPECT_GE(cited, 10);
}

// The commands of every ```sh runnable block of README.md and docs/*.md (a line ending
// in a backslash goes on), in the order written.
struct Command {
  std::string file, text;
};
std::vector<Command> runnable_commands(const fs::path& root) {
  std::vector<fs::path> pages{root / "README.md"};
  for (const auto& e : fs::directory_iterator(root / "docs"))
    if (e.path().extension() == ".md") pages.push_back(e.path());
  std::vector<Command> out;
  for (const auto& page : pages) {
    std::istringstream in(slurp(page));
    std::string line, pending;
    bool inside = false;
    while (std::getline(in, line)) {
      if (!inside) {
        inside = line == "```sh runnable";
        continue;
      }
      if (line.rfind("```", 0) == 0) {
        inside = false;
        continue;
      }
      if (const auto hash = line.find("  #"); hash != std::string::npos) line.resize(hash);
      while (!line.empty() && line.back() == ' ') line.pop_back();
      if (!line.empty() && line.back() == '\\') {
        pending += line.substr(0, line.size() - 1);
        continue;
      }
      pending += line;
      if (pending.find_first_not_of(' ') != std::string::npos) out.push_back({page.filename().string(), pending});
      pending.clear();
    }
  }
  return out;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
  return s;
}

// Run from the repository root as a reader would, with this build's binaries and the
// outputs (out/) in a folder of the test's own.
TEST(Docs, EveryRunnableCommandRuns) {
  const fs::path root(DPB_SOURCE_DIR);
  const auto commands = runnable_commands(root);
  ASSERT_GE(commands.size(), 5u) << "README.md shows no runnable example";
  const fs::path out = fs::temp_directory_path() / ("dpb_docs_" + std::to_string(::getpid()));
  fs::create_directories(out);
  for (const Command& c : commands) {
    std::string cmd = c.text;
    cmd = replace_all(cmd, "build/benchmarks/dpbench/dpbench", DPBENCH_BIN);
    cmd = replace_all(cmd, "build/diagnostics/dpdoctor", DPDOCTOR_BIN);
    cmd = replace_all(cmd, "build/reports/dpreport", DPREPORT_BIN);
    cmd = replace_all(cmd, "out/", out.string() + "/");
    const std::string full = "cd '" + root.string() + "' && " + cmd + " > '" + (out / "last.log").string() + "' 2>&1";
    const int status = std::system(full.c_str());
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << c.file << ": `" << c.text << "` failed:\n" << slurp(out / "last.log");
  }
  fs::remove_all(out);
}

// Five minutes for a newcomer: the front door is short, and the manual is behind it.
TEST(Docs, ReadmeIsAFrontDoor) {
  const fs::path root(DPB_SOURCE_DIR);
  const std::string readme = slurp(root / "README.md");
  EXPECT_LE(std::count(readme.begin(), readme.end(), '\n'), 250) << "README.md is over 250 lines";
  for (const char* page : {"dpbench.md", "gpu.md", "dpdoctor.md", "report.md", "simulate.md", "results.md",
                           "development.md", "ARCHITECTURE.md"}) {
    EXPECT_TRUE(fs::exists(root / "docs" / page)) << page;
    EXPECT_NE(readme.find(std::string("docs/") + page), std::string::npos) << "README does not point to " << page;
  }
}

}  // namespace
