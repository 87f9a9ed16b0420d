#include "bench/decode_bandwidth.h"

#include <gtest/gtest.h>

#include <cmath>

#include "bench/testing_runs.h"

namespace attnkit::bench {
namespace {

using testing::kSyntheticDecode;

// Skewed as this host's samples are (26..71 GB/s within minutes on a
// 2-core AMD EPYC Zen 5 family 26, GCC 12.2, 2026-11-21): the
// median (40) is far from the mean (47.4). Repetition i of read_bw is not
// paired with repetition i of decode (random interleaving runs them at
// unrelated times), and these are ordered so that the median of per-index
// ratios (28.6%) differs from the ratio of medians (25%).
const std::vector<double> kReadBw = {71, 26, 40, 30, 70};
const std::vector<double> kDecode = {8, 9, 10, 19, 20};  // median 10, mean 13.2
constexpr double kStart = 52;  // a start-of-run calibration, off from 40

RunData DecodeRun(uint64_t seed, int omp_threads = 2) {
  RunData run = testing::SyntheticRun("abcd1234", "2026-02-01", seed, 5);
  testing::SetBandwidthContext(run, omp_threads, kStart);
  testing::SetDecodeBandwidth(run, kSyntheticDecode, kDecode, kStart);
  return run;
}

TEST(DecodeBandwidthTest, RatioOfMediansOfTheSameRun) {
  RunData run = DecodeRun(1);
  testing::AddReadBandwidth(run, 2, kReadBw);
  const DecodeBandwidthReport r = DecodeVsReadBandwidth(run);
  ASSERT_TRUE(r.read_bw.ok()) << r.read_bw.status().ToString();
  EXPECT_EQ(r.read_bw->benchmark, testing::ReadBwName(2));
  EXPECT_EQ(r.read_bw->threads, 2);
  EXPECT_DOUBLE_EQ(r.read_bw->median_gbps, 40);
  EXPECT_DOUBLE_EQ(r.read_bw->min_gbps, 26);
  EXPECT_DOUBLE_EQ(r.read_bw->max_gbps, 71);
  EXPECT_EQ(r.read_bw->repetitions, 5u);
  EXPECT_DOUBLE_EQ(r.calib_read_gbps_start, kStart);
  // Only decode/: decode_step/ reports no GBps and is no decode figure.
  ASSERT_EQ(r.rows.size(), 1u);
  const DecodeBandwidthRow& row = r.rows[0];
  EXPECT_EQ(row.benchmark, kSyntheticDecode);
  EXPECT_EQ(row.repetitions, 5u);
  EXPECT_DOUBLE_EQ(row.median_gbps, 10);
  // 100 * 10 / 40: not the means (27.8), not the median of paired ratios
  // (28.6), not the start-of-run calibration (19.2).
  EXPECT_DOUBLE_EQ(row.pct_read_bw_same_run, 25);
  EXPECT_DOUBLE_EQ(row.pct_peak_start, 100 * 10 / kStart);
  EXPECT_EQ(PctReadBwSameRun(run),
            (std::map<std::string, double>{{kSyntheticDecode, 25.0}}));
}

TEST(DecodeBandwidthTest, DividesByTheDecodeThreadCount) {
  RunData run = DecodeRun(2);
  // Map order puts threads:1 and threads:16 before threads:2.
  testing::AddReadBandwidth(run, 1, {20, 20, 20});
  testing::AddReadBandwidth(run, 2, kReadBw);
  testing::AddReadBandwidth(run, 16, {80, 80, 80});
  EXPECT_DOUBLE_EQ(DecodeVsReadBandwidth(run).rows.at(0).pct_read_bw_same_run,
                   25);
  testing::SetBandwidthContext(run, 1, kStart);
  EXPECT_DOUBLE_EQ(DecodeVsReadBandwidth(run).rows.at(0).pct_read_bw_same_run,
                   50);
  // No omp_threads in the context: decode ran on every thread, the largest
  // registered count (numerically: 16, not the lexicographic last, 2).
  testing::SetBandwidthContext(run, 0, kStart);
  auto bw = SameRunReadBandwidth(run);
  ASSERT_TRUE(bw.ok()) << bw.status().ToString();
  EXPECT_EQ(bw->threads, 16);
  EXPECT_NE(bw->note.find("no omp_threads"), std::string::npos);
  // omp_threads names a count the run has no read_bw for: no figure, rather
  // than another thread count's.
  testing::SetBandwidthContext(run, 4, kStart);
  bw = SameRunReadBandwidth(run);
  EXPECT_EQ(bw.status().code(), StatusCode::kNotFound);
  EXPECT_NE(bw.status().message().find("threads:4"), std::string::npos);
  EXPECT_NE(bw.status().message().find("omp_threads=4"), std::string::npos);
  EXPECT_NE(bw.status().message().find(testing::ReadBwName(16)),
            std::string::npos);
  EXPECT_TRUE(
      std::isnan(DecodeVsReadBandwidth(run).rows.at(0).pct_read_bw_same_run));
}

TEST(DecodeBandwidthTest, EachRunDividesByItsOwnReadBandwidth) {
  RunData a = DecodeRun(3), b = DecodeRun(4);
  testing::AddReadBandwidth(a, 2, kReadBw);       // median 40
  testing::AddReadBandwidth(b, 2, {20, 19, 21});  // median 20
  EXPECT_DOUBLE_EQ(PctReadBwSameRun(a).at(kSyntheticDecode), 25);
  EXPECT_DOUBLE_EQ(PctReadBwSameRun(b).at(kSyntheticDecode), 50);
}

TEST(DecodeBandwidthTest, NoReadBandwidthMeansNoFigure) {
  const RunData run = DecodeRun(5);
  const DecodeBandwidthReport r = DecodeVsReadBandwidth(run);
  EXPECT_EQ(r.read_bw.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.read_bw.status().message().find("filtered out"),
            std::string::npos);
  ASSERT_EQ(r.rows.size(), 1u);
  EXPECT_TRUE(std::isnan(r.rows[0].pct_read_bw_same_run));
  EXPECT_DOUBLE_EQ(r.rows[0].median_gbps, 10);  // the rest is still shown
  EXPECT_TRUE(PctReadBwSameRun(run).empty());
  const std::string text = FormatDecodeBandwidth(r);
  EXPECT_NE(text.find("pct_read_bw_same_run: not available: the run has no "
                      "calibration/read_bw benchmark"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("n/a"), std::string::npos) << text;
  EXPECT_EQ(text.find("25.0"), std::string::npos) << text;
}

TEST(DecodeBandwidthTest, FailedOrEmptyReadBandwidthMeansNoFigure) {
  RunData run = DecodeRun(6);
  run.benchmarks[testing::ReadBwName(2)].error = "out of memory";
  auto bw = SameRunReadBandwidth(run);
  EXPECT_EQ(bw.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(bw.status().message().find("out of memory"), std::string::npos);
  run.benchmarks[testing::ReadBwName(2)] = BenchmarkSamples{};
  bw = SameRunReadBandwidth(run);
  EXPECT_EQ(bw.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(bw.status().message().find("no GBps"), std::string::npos);
  testing::AddReadBandwidth(run, 2, {0, 0, 0});
  bw = SameRunReadBandwidth(run);
  EXPECT_EQ(bw.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(bw.status().message().find("not positive"), std::string::npos);
}

TEST(DecodeBandwidthTest, FormatNamesBothFiguresAndFailedBenchmarks) {
  RunData run = DecodeRun(7);
  testing::AddReadBandwidth(run, 2, kReadBw);
  run.benchmarks["decode/simd/kv_len:512/bf16:1/batch:4/real_time"].error =
      "output mismatch";
  const std::string text = FormatDecodeBandwidth(DecodeVsReadBandwidth(run));
  EXPECT_NE(text.find("calibration/read_bw/threads:2/real_time median 40.00 "
                      "GB/s over 5 repetitions (min..max 26.00..71.00)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("start-of-run calibration (divides pct_peak): 52.00"),
            std::string::npos)
      << text;
  // The decode line: reps, median GB/s, pct_peak (start), same-run figure,
  // paired figure (none: no decode_paired/ twin in this run).
  EXPECT_NE(
      text.find("    5        10.00             19.2                  25.0"
                "                 n/a\n"),
      std::string::npos)
      << text;
  const size_t failed = text.find("batch:4/real_time ");
  ASSERT_NE(failed, std::string::npos) << text;
  EXPECT_EQ(text.find("failed: output mismatch\n", failed),
            text.find('\n', failed) - 23)
      << text;
  EXPECT_EQ(text.find("above 100"), std::string::npos);
  EXPECT_EQ(text.find("warning"), std::string::npos);
  testing::SetDecodeBandwidth(run, kSyntheticDecode, {50, 50, 50}, kStart);
  EXPECT_NE(FormatDecodeBandwidth(DecodeVsReadBandwidth(run)).find("125.0"),
            std::string::npos);
  EXPECT_NE(FormatDecodeBandwidth(DecodeVsReadBandwidth(run)).find("above 100"),
            std::string::npos);
}

TEST(DecodeBandwidthTest, PairedFigureJoinsItsTwinOrStandsAlone) {
  RunData run = DecodeRun(9);
  testing::AddReadBandwidth(run, 2, kReadBw);
  // kSyntheticDecode's twin: same backend and shape, attnkit_bench's name
  // for a fixed-iteration manual-time benchmark.
  BenchmarkSamples& twin =
      run.benchmarks
          ["decode_paired/reference/kv_len:4096/bf16:0/batch:1/"
           "iterations:32/manual_time"];
  twin.metrics["GBps"] = {11, 12, 13};
  twin.metrics[std::string(kPctReadBwPaired)] = {70, 90, 80};
  // Not twins: another backend, another dtype (alone in the run).
  const std::string other_backend =
      "decode_paired/simd/kv_len:4096/bf16:0/batch:1/iterations:32/"
      "manual_time";
  run.benchmarks[other_backend].metrics["GBps"] = {20, 30, 40, 50};
  run.benchmarks[other_backend].metrics[std::string(kPctReadBwPaired)] = {
      60, 61, 62, 63};
  const std::string other_dtype =
      "decode_paired/reference/kv_len:4096/bf16:1/batch:1/iterations:32/"
      "manual_time";
  run.benchmarks[other_dtype].error = "output mismatch";

  const DecodeBandwidthReport r = DecodeVsReadBandwidth(run);
  ASSERT_EQ(r.rows.size(), 3u);
  // The twin adds its figure to the decode/ row; GB/s stay decode/'s.
  EXPECT_EQ(r.rows[0].benchmark, kSyntheticDecode);
  EXPECT_DOUBLE_EQ(r.rows[0].median_gbps, 10);
  EXPECT_DOUBLE_EQ(r.rows[0].pct_read_bw_same_run, 25);
  EXPECT_DOUBLE_EQ(r.rows[0].pct_read_bw_paired, 80);
  EXPECT_EQ(r.rows[0].paired_repetitions, 3u);
  // Map order: bf16:1 of reference, then simd.
  EXPECT_EQ(r.rows[1].benchmark, other_dtype);
  EXPECT_EQ(r.rows[1].error, "output mismatch");
  EXPECT_TRUE(std::isnan(r.rows[1].pct_read_bw_paired));
  EXPECT_EQ(r.rows[2].benchmark, other_backend);
  EXPECT_DOUBLE_EQ(r.rows[2].median_gbps, 35);
  EXPECT_DOUBLE_EQ(r.rows[2].pct_read_bw_same_run, 87.5);
  EXPECT_DOUBLE_EQ(r.rows[2].pct_read_bw_paired, 61.5);
  const std::string text = FormatDecodeBandwidth(r);
  EXPECT_NE(text.find("25.0                80.0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("87.5                61.5\n"), std::string::npos) << text;
  EXPECT_NE(text.find(std::string(kPctReadBwPaired)), std::string::npos);
}

TEST(DecodeBandwidthTest, KvStorageGridJoinsItsPairedTwin) {
  RunData run;
  testing::AddReadBandwidth(run, 2, kReadBw);
  const std::string i8 = "decode_kv/simd/kv_len:16384/hkv:8/kv:2/real_time";
  run.benchmarks[i8].metrics["GBps"] = {30, 32, 34};
  BenchmarkSamples& twin = run.benchmarks
                               ["decode_paired_kv/simd/kv_len:16384/hkv:8/kv:2/"
                                "iterations:32/manual_time"];
  twin.metrics["GBps"] = {31};
  twin.metrics[std::string(kPctReadBwPaired)] = {88, 90, 92};
  // Not its twin: the bf16 row of the same grid.
  BenchmarkSamples& bf16 = run.benchmarks
                               ["decode_paired_kv/simd/kv_len:16384/hkv:8/kv:1/"
                                "iterations:32/manual_time"];
  bf16.metrics["GBps"] = {20};
  bf16.metrics[std::string(kPctReadBwPaired)] = {70};
  const DecodeBandwidthReport r = DecodeVsReadBandwidth(run);
  ASSERT_EQ(r.rows.size(), 2u);
  EXPECT_EQ(r.rows[0].benchmark, i8);
  EXPECT_DOUBLE_EQ(r.rows[0].median_gbps, 32);
  EXPECT_DOUBLE_EQ(r.rows[0].pct_read_bw_paired, 90);
  EXPECT_DOUBLE_EQ(r.rows[1].pct_read_bw_paired, 70);
}

TEST(DecodeBandwidthTest, WarnsWhenRepetitionsWereNotInterleaved) {
  RunData run = DecodeRun(8);
  testing::AddReadBandwidth(run, 2, kReadBw);
  EXPECT_TRUE(DecodeVsReadBandwidth(run).warning.empty());
  testing::SetBandwidthContext(run, 2, kStart, /*interleaved=*/false);
  const DecodeBandwidthReport r = DecodeVsReadBandwidth(run);
  EXPECT_NE(r.warning.find("did not interleave"), std::string::npos);
  // Still computed: the figure is right for what was measured.
  EXPECT_DOUBLE_EQ(r.rows.at(0).pct_read_bw_same_run, 25);
  EXPECT_NE(FormatDecodeBandwidth(r).find("warning: this run did not "
                                          "interleave"),
            std::string::npos);
}

// A decode_paired/ round is the read pass, then exactly one call: a second
// call could reread a K/V that the last-level cache holds.
TEST(RunPairedRoundTest, OneReadThenOneCall) {
  std::string order;
  const StatusOr<PairedRound> r = RunPairedRound(
      [&] {
        order += 'r';
        return Status::Ok();
      },
      [&] {
        order += 'c';
        return Status::Ok();
      });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(order, "rc");
  EXPECT_GE(r->read_s, 0.0);
  EXPECT_GE(r->call_s, 0.0);
}

TEST(RunPairedRoundTest, AnErrorEndsTheRound) {
  int calls = 0;
  StatusOr<PairedRound> r =
      RunPairedRound([] { return Status::Internal("read failed"); },
                     [&] {
                       ++calls;
                       return Status::Ok();
                     });
  EXPECT_EQ(calls, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().ToString().find("read failed"), std::string::npos);
  r = RunPairedRound([] { return Status::Ok(); },
                     [] { return Status::InvalidArgument("kv_len 0"); });
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().ToString().find("kv_len 0"), std::string::npos);
}

TEST(RunPairedRoundTest, PctIsTheCallRateOverThePassRate) {
  // 1 GiB read in 20 ms (53.7 GB/s); 64 MiB decoded in 2 ms (33.6 GB/s).
  const PairedRound r{0.020, 0.002};
  const double read = 1 << 30, call = 64 << 20;
  EXPECT_NEAR(r.Pct(read, call), 100.0 * (call / 0.002) / (read / 0.020), 1e-9);
  EXPECT_NEAR(r.Pct(read, call), 62.5, 1e-9);
}

}  // namespace
}  // namespace attnkit::bench
