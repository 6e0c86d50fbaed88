// The timeline's arithmetic: busy time is the union of a device's non-data intervals,
// clipped to the window; chrome_trace and its JSON round trip.
#include "engine/trace/timeline.h"

#include <gtest/gtest.h>

#include "engine/trace/chrome_trace.h"

namespace dpb::trace {
namespace {

TEST(Timeline, UnionMergesOverlapsAndClipsToTheWindow) {
  EXPECT_EQ(union_ns({}, 0, 100), 0);
  EXPECT_EQ(union_ns({{0, 10}, {5, 20}, {30, 40}}, 0, 100), 30);
  EXPECT_EQ(union_ns({{0, 10}, {5, 20}, {30, 40}}, 8, 35), 17);  // [8,20) + [30,35)
  EXPECT_EQ(union_ns({{10, 20}, {10, 20}, {12, 15}}, 0, 100), 10);
  EXPECT_EQ(union_ns({{50, 60}}, 0, 40), 0);
}

TEST(Timeline, BusyCountsEveryCategoryButDataPerDevice) {
  Timeline t;
  t.record({"forward", Category::compute, 0, "main", 0, 10, {}});
  t.record({"all-reduce", Category::comm, 0, "comm", 5, 15, {}});  // overlaps compute
  t.record({"data wait", Category::data, 0, "main", 15, 40, {}});  // not busy
  t.record({"optimizer", Category::optim, 0, "main", 40, 45, {}});
  t.record({"replica", Category::compute, 1, "replica", 0, 7, {}});
  EXPECT_EQ(t.busy_ns(0, 0, 50), 20);
  EXPECT_EQ(t.busy_ns(1, 0, 50), 7);
  EXPECT_EQ(t.busy_ns(2, 0, 50), 0);
}

TEST(ChromeTrace, ProcessesLanesAndCategories) {
  TraceProcess p;
  p.pid = 1;
  p.name = "cpu:1";
  p.intervals = {{"forward", Category::compute, 1, "replica", 2000, 5000, {{"samples", 8}}}};
  p.steps = {{3, false, 1000, 6000}};
  const auto j = chrome_trace({p}, 1000, {{"tool", "dpbench"}});
  int complete = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] != "X") continue;
    ++complete;
    if (e["name"] == "forward") {
      EXPECT_EQ(e["cat"], "compute");
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 1.0);  // microseconds from the origin
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 3.0);
      EXPECT_EQ(e["args"]["samples"], 8);
      EXPECT_EQ(e["pid"], 1);
    } else {
      EXPECT_EQ(e["cat"], "step");
      EXPECT_EQ(e["name"], "step 3");
    }
  }
  EXPECT_EQ(complete, 2);
  const auto back = intervals_from_json(intervals_json(p.intervals));
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].name, "forward");
  EXPECT_EQ(back[0].cat, Category::compute);
  EXPECT_EQ(back[0].lane, "replica");
  EXPECT_EQ(back[0].end_ns, 5000);
  EXPECT_EQ(back[0].args[0].second, 8);
}

}  // namespace
}  // namespace dpb::trace
