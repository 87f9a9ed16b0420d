#include "bench/prefill_paired.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace attnkit::bench {
namespace {

constexpr char kPaired[] =
    "prefill_paired/simd/S:2048/d:128/causal:1/hkv:8/iterations:4/"
    "manual_time";
constexpr char kTwin[] = "prefill/simd/S:2048/d:128/causal:1/hkv:8/real_time";

BenchmarkSamples Paired(std::vector<double> pct) {
  BenchmarkSamples s;
  s.metrics[std::string(kTimeMetric)] = std::vector<double>(pct.size(), 1e8);
  s.metrics["GFLOPS"] = std::vector<double>(pct.size(), 250);
  s.metrics["fma_GFLOPS"] = std::vector<double>(pct.size(), 330);
  s.metrics[std::string(kPctFmaPaired)] = std::move(pct);
  return s;
}

TEST(PrefillPairedTest, RowsCarryTheTwinsStartOfRunFigure) {
  RunData run;
  run.benchmarks[kPaired] = Paired({70, 80, 75});
  run.benchmarks[kTwin].metrics["pct_peak"] = {60, 64, 62};
  // Another shape's prefill/ is no twin; a bf16 pair is matched within its
  // own families.
  run.benchmarks["prefill/simd/S:2048/d:128/causal:0/hkv:8/real_time"]
      .metrics["pct_peak"] = {99};
  run.benchmarks
      ["prefill_bf16_paired/simd/S:2048/causal:0/iterations:4/"
       "manual_time"] = Paired({90});
  run.benchmarks["prefill_bf16/simd/S:2048/causal:0/real_time"]
      .metrics["pct_peak"] = {71};
  const std::vector<PrefillPairedRow> rows = PrefillVsPairedFma(run);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].benchmark,
            "prefill_bf16_paired/simd/S:2048/causal:0/iterations:4/"
            "manual_time");
  EXPECT_DOUBLE_EQ(rows[0].pct_fma_paired, 90);
  EXPECT_DOUBLE_EQ(rows[0].twin_pct_peak, 71);
  EXPECT_EQ(rows[1].benchmark, kPaired);
  EXPECT_EQ(rows[1].repetitions, 3u);
  EXPECT_DOUBLE_EQ(rows[1].pct_fma_paired, 75);
  EXPECT_DOUBLE_EQ(rows[1].twin_pct_peak, 62);
  EXPECT_DOUBLE_EQ(rows[1].fma_gflops, 330);
  const std::string text = FormatPrefillPaired(rows);
  EXPECT_NE(text.find(kPaired), std::string::npos) << text;
  EXPECT_NE(text.find("62.0            75.0"), std::string::npos) << text;
}

TEST(PrefillPairedTest, MissingTwinOrFigureIsNotAvailableAndErrorsShow) {
  RunData run;
  run.benchmarks[kPaired] = Paired({});
  run.benchmarks[kPaired].error = "output check failed: out[0] differs";
  run.benchmarks
      ["prefill_paired/compiled/S:2048/d:128/causal:1/hkv:8/"
       "iterations:4/manual_time"] = Paired({77});
  const std::vector<PrefillPairedRow> rows = PrefillVsPairedFma(run);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_TRUE(std::isnan(rows[0].twin_pct_peak));
  EXPECT_TRUE(std::isnan(rows[1].pct_fma_paired));
  const std::string text = FormatPrefillPaired(rows);
  EXPECT_NE(text.find("n/a            77.0"), std::string::npos) << text;
  EXPECT_NE(text.find("failed: output check failed: out[0] differs"),
            std::string::npos)
      << text;
  EXPECT_EQ(FormatPrefillPaired({}), "");
}

}  // namespace
}  // namespace attnkit::bench
