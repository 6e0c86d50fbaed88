// The parallel modes' registry (engine/parallel/modes.h) is the one list of modes: every
// mode is in it once and parses back from its name, the JSON schemas of the report and of
// the doctor's findings list exactly its names, and the readers of both take them from it.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "engine/core/error.h"
#include "engine/parallel/modes.h"
#include "reports/schemas.h"
#include "tests/support/process.h"

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

// The options only one mode takes are the registry's: each belongs to one mode, and
// dpbench refuses it under another, naming its mode.
TEST(ModesRegistry, EachModesOwnOptionsAreAnErrorUnderAnotherMode) {
  // A valid value for each (an option added to the registry needs one here).
  const std::map<std::string, std::string> value{
      {"--dp-forward", "scatter"}, {"--dp-input", "tensor"},  {"--bucket-mb", "4"},      {"--split", "fc2"},
      {"--schedule", "gpipe"},     {"--micro-batches", "2"},  {"--fsdp-reshard", "false"}, {"--fsdp-prefetch", "1"}};
  std::set<std::string> seen;
  for (const ModeInfo& m : parallel_modes()) {
    for (const char* flag : m.options) {
      EXPECT_TRUE(seen.insert(flag).second) << flag << " belongs to two modes";
      ASSERT_TRUE(value.count(flag)) << flag << ": no value to try it with";
      const ParallelMode other = m.mode == ParallelMode::single ? ParallelMode::dp : ParallelMode::single;
      const auto r = test::run_command(std::string(DPBENCH_BIN) + " --mode=" + parallel_mode_name(other) +
                                       " --model=mlp --steps=1 " + flag + "=" + value.at(flag));
      EXPECT_NE(r.code, 0) << flag;
      EXPECT_NE(r.err.find(std::string(flag) + " is for --mode=" + m.name), std::string::npos) << r.err;
    }
  }
  EXPECT_EQ(seen.size(), value.size());
}

}  // namespace
}  // namespace dpb
