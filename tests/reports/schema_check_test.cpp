#include "reports/schema_check.h"

#include <gtest/gtest.h>

namespace dpb::reports {
namespace {

const nlohmann::json kSchema = nlohmann::json::parse(R"({
  "type": "object",
  "required": ["mode", "runs"],
  "properties": {
    "mode": {"type": "string", "enum": ["single", "dp"]},
    "runs": {"type": "array", "minItems": 1, "items": {
      "type": "object", "required": ["busy"],
      "properties": {"busy": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
                     "world": {"type": "integer"}}}}
  }
})");

TEST(SchemaCheck, AcceptsAConformingDocument) {
  auto doc = nlohmann::json::parse(R"({"mode": "dp", "runs": [{"busy": 0.5, "world": 2}, {"busy": null}]})");
  EXPECT_TRUE(schema_violations(kSchema, doc).empty());
}

TEST(SchemaCheck, NamesEachViolationByPointer) {
  auto doc = nlohmann::json::parse(R"({"mode": "ddp", "runs": [{"busy": 1.5, "world": 2.5}, {}]})");
  auto v = schema_violations(kSchema, doc);
  ASSERT_EQ(v.size(), 4u);
  EXPECT_EQ(v[0], "/mode: \"ddp\" is not one of [\"single\",\"dp\"]");
  EXPECT_EQ(v[1], "/runs/0/busy: 1.5 is above the maximum 1");
  EXPECT_EQ(v[2], "/runs/0/world: expected integer, found number");
  EXPECT_EQ(v[3], "/runs/1: missing required field 'busy'");
  EXPECT_EQ(schema_violations(kSchema, nlohmann::json::parse(R"({"mode": "dp", "runs": []})"))[0],
            "/runs: 0 items, at least 1 required");
  EXPECT_EQ(schema_violations(kSchema, nlohmann::json::array())[0], "/: expected object, found array");
}

}  // namespace
}  // namespace dpb::reports
