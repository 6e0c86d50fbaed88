// The parallel modes' registry (engine/parallel/modes.h) is the one list of modes: every
// mode is in it once and parses back from its name, the JSON schemas of the report and of
// the doctor's findings list exactly its names, and the readers of both take them from it.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "engine/core/error.h"
#include "engine/parallel/modes.h"
#include "reports/schemas.h"

namespace dpb {
namespace {

// Every "enum" array in `schema` that lists "ddp": the places a mode is written.
void mode_enums(const nlohmann::json& node, std::vector<std::vector<std::string>>& out) {
  if (node.is_object()) {
    for (const auto& [key, value] : node.items()) {
      if (key == "enum" && value.is_array()) {
        std::vector<std::string> names;
        for (const auto& v : value)
          if (v.is_string()) names.push_back(v.get<std::string>());
        if (std::find(names.begin(), names.end(), "ddp") != names.end()) out.push_back(names);
      }
      mode_enums(value, out);
    }
  } else if (node.is_array()) {
    for (const auto& v : node) mode_enums(v, out);
  }
}

TEST(ModesRegistry, EveryModeOnceByNameAndBack) {
  std::set<ParallelMode> seen;
  std::set<std::string> names;
  for (const ModeInfo& m : parallel_modes()) {
    EXPECT_TRUE(seen.insert(m.mode).second) << m.name;
    EXPECT_TRUE(names.insert(m.name).second) << m.name;
    EXPECT_EQ(parse_parallel_mode(m.name), m.mode);
    EXPECT_STREQ(parallel_mode_name(m.mode), m.name);
    EXPECT_EQ(&mode_info(m.mode), &m);
    EXPECT_FALSE(std::string(m.help).empty()) << m.name;
    // What a data-parallel rank does with its gradients is one thing or the other.
    if (m.distributed && m.splits_batch) {
      EXPECT_NE(m.all_reduces_gradients, m.shards_state) << m.name;
    }
    EXPECT_FALSE(m.distributed && m.multi_device_process) << m.name;
  }
  for (ParallelMode m : {ParallelMode::single, ParallelMode::dp, ParallelMode::ddp, ParallelMode::pipeline,
                         ParallelMode::fsdp, ParallelMode::tp})
    EXPECT_EQ(seen.count(m), 1u) << static_cast<int>(m);
  try {
    parse_parallel_mode("zero3");
    ADD_FAILURE() << "an unknown mode parsed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("valid: single, dp, ddp, mp, fsdp, tp"), std::string::npos) << e.what();
  }
}

TEST(ModesRegistry, TheSchemasListExactlyItsNames) {
  const std::vector<std::string> want = parallel_mode_names();
  for (const auto* schema : {&reports::report_schema(), &reports::findings_schema()}) {
    std::vector<std::vector<std::string>> enums;
    mode_enums(*schema, enums);
    ASSERT_FALSE(enums.empty()) << (*schema)["$id"];
    for (const auto& e : enums) EXPECT_EQ(e, want) << (*schema)["$id"];
  }
}

}  // namespace
}  // namespace dpb
