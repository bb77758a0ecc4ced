// The demo job's summary (trainer_integration/demo_report.h): quantiles, the generation steps
// counted as served during transfers, the verdict on reads, and what the summary says.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "trainer_integration/demo_report.h"

namespace {

using wsync_demo::DemoSummary;
using wsync_demo::Interval;
using wsync_demo::RolloutReport;

bool contains(const std::vector<std::string>& lines, const std::string& text) {
  for (const std::string& line : lines) {
    if (line.find(text) != std::string::npos) return true;
  }
  return false;
}

TEST(DemoReport, PercentileIsTheNearestRank) {
  const std::vector<double> v{5, 1, 3, 2, 4};
  EXPECT_EQ(wsync_demo::percentile(v, 0.5), 3);
  EXPECT_EQ(wsync_demo::percentile(v, 0.9), 5);
  EXPECT_EQ(wsync_demo::percentile(v, 0.2), 1);
  EXPECT_EQ(wsync_demo::percentile(v, 0.0), 1);
  EXPECT_EQ(wsync_demo::percentile({}, 0.5), 0);
  EXPECT_EQ(wsync_demo::percentile({0.2, 0.1}, 0.5), 0.1);
}

TEST(DemoReport, StepsCountWhenTheyOverlapATransfer) {
  const std::vector<Interval> windows{{1, 2}, {5, 6}};
  EXPECT_EQ(wsync_demo::stepsInWindows(windows, {{0, 0.5}}), 0);
  EXPECT_EQ(wsync_demo::stepsInWindows(windows, {{0.5, 1}}), 1);  // touches the start
  EXPECT_EQ(wsync_demo::stepsInWindows(windows, {{1.5, 1.6}}), 1);
  EXPECT_EQ(wsync_demo::stepsInWindows(windows, {{2.5, 4.9}}), 0);  // between the two
  EXPECT_EQ(wsync_demo::stepsInWindows(windows, {{4.9, 5.1}}), 1);
  EXPECT_EQ(wsync_demo::stepsInWindows(windows, {{6.5, 7}}), 0);
  EXPECT_EQ(wsync_demo::stepsInWindows(windows, {{0, 10}}), 1);  // spans both: one step
  EXPECT_EQ(wsync_demo::stepsInWindows({}, {{0, 10}}), 0);
}

DemoSummary hostSummary() {
  DemoSummary s;
  s.memory_detail = "no usable GPU found";
  s.trainers = 2;
  s.rollout_ranks = 4;
  s.replicas = 2;
  s.versions = 3;
  s.bytes_per_version = 1000000000;
  s.sync_s = {0.3, 0.1, 0.2};
  s.limit_gbps = 10;
  s.limit_bytes = 1000000000;
  s.paced = true;
  s.sample_elements = 4096;
  s.processes_on_node = 6;
  s.cores_on_node = 16;
  s.load_average = 1;
  RolloutReport r;
  r.steps = 100;
  r.steps_during_transfers = 40;
  r.versions_verified = 3;
  r.acquire_p99_ns = 1500;
  s.rollouts = {r, r, r, r};
  s.rollouts[3].acquire_p99_ns = 2500;
  return s;
}

TEST(DemoReport, SummaryGivesTheMedianAgainstTheLimitAndTheReads) {
  const DemoSummary s = hostSummary();
  EXPECT_DOUBLE_EQ(s.gbpsAtMedian(), 5);
  EXPECT_DOUBLE_EQ(s.ratioToLimit(), 0.5);
  EXPECT_TRUE(s.readsOk());
  const auto lines = wsync_demo::summaryLines(s);
  EXPECT_TRUE(contains(lines, "median 200.00 ms, p90 300.00 ms")) << lines[1];
  EXPECT_TRUE(contains(lines, "5.00 GB/s at the median = 0.50 x memcpy"));
  EXPECT_TRUE(contains(lines,
                       "160 of 400 generation steps were served while transfers were in "
                       "flight (600.00 ms in all); taking a version: p99 2.5 us on the worst"));
  EXPECT_TRUE(contains(lines, "OK: 3 of 3 versions verified bit for bit on each of 4 rollout"));
  EXPECT_TRUE(contains(lines, "0 torn or wrong reads"));
  EXPECT_FALSE(contains(lines, "expect < 1 x memcpy"));  // a core per process, an idle node
  const std::string json = wsync_demo::summaryJson(s);
  EXPECT_EQ(json.front(), '{');
  EXPECT_EQ(json.back(), '}');
  EXPECT_EQ(json.find('\n'), std::string::npos);
  EXPECT_NE(json.find("\"sync_median_s\":0.2,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"ratio_to_limit\":0.5,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"steps_during_transfers\":160,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"torn_or_wrong_reads\":0,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"acquire_p99_s\":2.5e-06,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"reads_ok\":true"), std::string::npos) << json;
}

TEST(DemoReport, ATornReadOrAnUnverifiedVersionFailsTheReads) {
  DemoSummary torn = hostSummary();
  torn.rollouts[2].torn_or_wrong_reads = 1;
  EXPECT_FALSE(torn.readsOk());
  EXPECT_TRUE(contains(wsync_demo::summaryLines(torn), "FAILED: 3 of 3 versions"));
  EXPECT_NE(wsync_demo::summaryJson(torn).find("\"reads_ok\":false"), std::string::npos);
  DemoSummary unverified = hostSummary();
  unverified.rollouts[1].versions_verified = 2;
  EXPECT_FALSE(unverified.readsOk());
  EXPECT_TRUE(contains(wsync_demo::summaryLines(unverified), "FAILED: 2 of 3 versions"));
  DemoSummary none = hostSummary();
  none.rollouts.clear();
  EXPECT_FALSE(none.readsOk());
  EXPECT_NE(wsync_demo::summaryJson(none).find("\"torn_or_wrong_reads\":null"), std::string::npos);
}

TEST(DemoReport, TheNoteSaysWhatSharedCoresDoToTheHostRatio) {
  DemoSummary s = hostSummary();
  s.cores_on_node = 2;
  EXPECT_TRUE(contains(wsync_demo::summaryLines(s), "expect < 1 x memcpy"));
  s.device = true;  // copies on the GPU: the cores do not bound them
  EXPECT_FALSE(contains(wsync_demo::summaryLines(s), "expect < 1 x memcpy"));
  EXPECT_TRUE(contains(wsync_demo::summaryLines(s), "x device-to-device copy"));
  // 1 GB at 10 GB/s is 100 ms of the median 200 ms: no hint; at 100 GB/s, 10 ms: the hint.
  EXPECT_FALSE(contains(wsync_demo::summaryLines(s), "larger versions"));
  s.limit_gbps = 100;
  EXPECT_TRUE(contains(wsync_demo::summaryLines(s), "Copying the bytes at the limit would take"));
}

}  // namespace
