// The documents say what the code does: README's count of dpdoctor's rules is the
// registry's, and every section of docs/ARCHITECTURE.md that a comment cites exists
// (the sources cite no document outside the repository).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

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

}  // namespace
