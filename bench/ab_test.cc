#include "bench/ab.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

namespace attnkit::bench {
namespace {

AbRow RowOf(const std::vector<double>& ratios) {
  AbRow row{"x", {}, ""};
  for (double r : ratios) row.rounds.push_back({100.0, 100.0 * r, 50, 40});
  return row;
}

TEST(AbTest, SignTestIsTheExactBinomialTail) {
  EXPECT_DOUBLE_EQ(SignTestP(5, 5), 1.0 / 32);
  EXPECT_DOUBLE_EQ(SignTestP(4, 5), 6.0 / 32);
  EXPECT_DOUBLE_EQ(SignTestP(7, 8), 9.0 / 256);
  EXPECT_DOUBLE_EQ(SignTestP(0, 4), 1.0);
  EXPECT_DOUBLE_EQ(SignTestP(0, 0), 1.0);
}

TEST(AbTest, VerdictNeedsBothTheSizeAndTheSign) {
  // Every round 10% slower: slower.
  EXPECT_EQ(SummarizeAbRow(RowOf({1.1, 1.1, 1.1, 1.1, 1.1}), 0.05).verdict,
            AbVerdict::kSlower);
  // One round of 5 the other way: the sign test does not resolve it.
  EXPECT_EQ(SummarizeAbRow(RowOf({1.1, 1.1, 1.1, 1.1, 0.9}), 0.05).verdict,
            AbVerdict::kSame);
  // 7 of 8 slower resolves.
  EXPECT_EQ(
      SummarizeAbRow(RowOf({1.1, 1.1, 1.1, 1.1, 1.1, 1.1, 1.1, 0.9}), 0.05)
          .verdict,
      AbVerdict::kSlower);
  // Consistently but only 2% slower: under the threshold.
  EXPECT_EQ(SummarizeAbRow(RowOf({1.02, 1.02, 1.02, 1.02, 1.02}), 0.05).verdict,
            AbVerdict::kSame);
  // Faster, mirrored.
  EXPECT_EQ(SummarizeAbRow(RowOf({0.8, 0.8, 0.8, 0.8, 0.8}), 0.05).verdict,
            AbVerdict::kFaster);
  // Fewer than 5 rounds never resolve: a slowdown is undecided (and
  // fails), a speedup is not claimed.
  EXPECT_EQ(SummarizeAbRow(RowOf({2, 2, 2, 2}), 0.05).verdict,
            AbVerdict::kUndecided);
  EXPECT_EQ(SummarizeAbRow(RowOf({0.5, 0.5}), 0.05).verdict, AbVerdict::kSame);
  // An error fails the row whatever its times; so does no round at all.
  AbRow bad = RowOf({1, 1, 1, 1, 1});
  bad.error = "boom";
  EXPECT_EQ(SummarizeAbRow(bad, 0.05).verdict, AbVerdict::kFailed);
  EXPECT_EQ(SummarizeAbRow(RowOf({}), 0.05).verdict, AbVerdict::kFailed);
}

TEST(AbTest, SummaryHasMedianQuartilesAndLimits) {
  const AbRowSummary s =
      SummarizeAbRow(RowOf({1.4, 1.0, 1.2, 1.1, 1.3, 0.9, 1.05, 1.15}), 0.05);
  EXPECT_DOUBLE_EQ(s.ratio, 1.125);
  EXPECT_DOUBLE_EQ(s.q1, 1.05);  // sorted[n / 4]
  EXPECT_DOUBLE_EQ(s.q3, 1.2);   // sorted[n - 1 - n / 4]
  EXPECT_DOUBLE_EQ(s.base_limit, 50);
  EXPECT_DOUBLE_EQ(s.new_limit, 40);
  EXPECT_DOUBLE_EQ(s.best_ratio, 0.9);  // every BASE round took 100
}

TEST(AbTest, BestRatioComparesEachSidesFastestRound) {
  // The host slowed NEW's first round and BASE's second: per-round ratios
  // 1.5 and 0.55 resolve nothing, the fastest runs (110 / 100) do.
  AbRow row{"x", {{100, 150, NAN, NAN}, {200, 110, NAN, NAN}}, ""};
  row.rounds.push_back({NAN, 1, NAN, NAN});  // BASE failed: not a pair
  const AbRowSummary s = SummarizeAbRow(row, 0.05);
  EXPECT_DOUBLE_EQ(s.best_ratio, 1.1);
  EXPECT_DOUBLE_EQ(s.ratio, (0.55 + 1.5) / 2);
  const std::string table = FormatAbTable({row}, 0.05, "b", "n");
  EXPECT_NE(table.find(" best "), std::string::npos) << table;
  EXPECT_NE(table.find("1.100"), std::string::npos) << table;
  EXPECT_TRUE(std::isnan(SummarizeAbRow(RowOf({}), 0.05).best_ratio));
}

TEST(AbTest, ExitStatusFailsOnSlowerFailedOrNothing) {
  EXPECT_EQ(AbExitStatus({}, 0.05), 1);
  EXPECT_EQ(AbExitStatus({RowOf({1, 1, 1, 1, 1})}, 0.05), 0);
  EXPECT_EQ(
      AbExitStatus({RowOf({1, 1, 1, 1, 1}), RowOf({2, 2, 2, 2, 2})}, 0.05), 1);
  AbRow bad = RowOf({1, 1, 1, 1, 1});
  bad.error = "crash";
  EXPECT_EQ(AbExitStatus({bad}, 0.05), 1);
  EXPECT_EQ(AbExitStatus({RowOf({3, 3})}, 0.05), 1);  // undecided
  EXPECT_NE(FormatAbTable({bad}, 0.05, "b", "n").find("error: crash"),
            std::string::npos);
}

TEST(AbTest, ExactNameFilterMatchesOnlyTheName) {
  const std::string name = "prefill/simd/S:2048/d:128/causal:1/real_time";
  const std::string f = ExactNameFilter(name);
  EXPECT_TRUE(std::regex_search(name, std::regex(f)));
  EXPECT_FALSE(std::regex_search(name + "x", std::regex(f)));
  const std::string odd = "a.b(c)[d]+e*f?g|h{1}^$\\";
  EXPECT_TRUE(std::regex_search(odd, std::regex(ExactNameFilter(odd))));
  EXPECT_FALSE(std::regex_search("aXb(c)[d]+e*f?g|h{1}^$\\",
                                 std::regex(ExactNameFilter(odd))));
}

TEST(AbTest, LimitPrefersThePairedShare) {
  BenchmarkSamples s;
  s.metrics["pct_peak"] = {70, 80, 90};
  EXPECT_DOUBLE_EQ(LimitOf(s), 80);
  s.metrics["pct_read_bw_paired"] = {60};
  EXPECT_DOUBLE_EQ(LimitOf(s), 60);
  BenchmarkSamples prefill;
  prefill.metrics["pct_peak"] = {70, 80, 90};
  prefill.metrics["pct_fma_paired"] = {85, 75};
  EXPECT_DOUBLE_EQ(LimitOf(prefill), 80);  // the median of 75 and 85
  prefill.metrics["pct_fma_paired"] = {85, 75, 95};
  EXPECT_DOUBLE_EQ(LimitOf(prefill), 85);
  EXPECT_TRUE(std::isnan(LimitOf(BenchmarkSamples{})));
}

TEST(AbTest, RunCaptureReportsExitStatusAndSignals) {
  auto ok = RunCapture({"/bin/sh", "-c", "echo hi; echo err >&2"});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(*ok, "hi\n");
  auto bad = RunCapture({"/bin/sh", "-c", "echo why >&2; exit 3"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("exit status 3"), std::string::npos);
  EXPECT_NE(bad.status().message().find("why"), std::string::npos);
  auto sig = RunCapture({"/bin/sh", "-c", "kill -SEGV $$"});
  ASSERT_FALSE(sig.ok());
  EXPECT_NE(sig.status().message().find("signal 11"), std::string::npos);
  EXPECT_FALSE(RunCapture({"/nonexistent/bench"}).ok());
}

// A fake attnkit_bench (a shell script in `dir`): lists two benchmarks and
// reports both, 1 ms each, with `context` as its run context.
std::string FakeBench(const std::string& dir, const std::string& name,
                      const std::string& context) {
  const std::string path = dir + "/" + name;
  std::ofstream f(path);
  f << "#!/bin/sh\n"
       "case \"$1\" in --benchmark_list_tests=true)\n"
       "  echo decode_paired/x/iterations:1/manual_time\n"
       "  echo decode/x/real_time; exit 0;;\n"
       "esac\n"
       "cat <<'EOF'\n"
       "{\"context\": "
    << context
    << ", \"benchmarks\": [\n"
       "{\"name\": \"decode_paired/x/iterations:1/manual_time\", "
       "\"run_type\": \"iteration\", \"real_time\": 1, \"time_unit\": "
       "\"ms\"},\n"
       "{\"name\": \"decode/x/real_time\", \"run_type\": \"iteration\", "
       "\"real_time\": 1, \"time_unit\": \"ms\"}]}\n"
       "EOF\n";
  f.close();
  chmod(path.c_str(), 0755);
  return path;
}

// A BASE from before decode_paired/'s method change (no
// decode_paired_method in its context) against a NEW after it: the paired
// row was timed both ways, so its ratio means nothing -- the row fails with
// the reason (it used to pass as "same" or slower without a word). Rows of
// other families, and the paired row between runs of one method, compare.
TEST(AbTest, RowsMeasuredByAnotherMethodFailWithTheReason) {
  char tmpl[] = "/tmp/attnkit_ab_test_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  AbOptions o;
  o.base_bin = FakeBench(dir, "old", "{}");
  o.new_bin =
      FakeBench(dir, "new", R"({"decode_paired_method": "one_cold_call"})");
  o.rounds = 1;
  auto rows = RunAb(o, nullptr);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 2u);
  const AbRow& paired = (*rows)[0];
  EXPECT_EQ(paired.name, "decode_paired/x/iterations:1/manual_time");
  EXPECT_EQ(paired.error,
            "not compared: measured differently (decode_paired_method: base "
            "calls_for_the_read_pass, new one_cold_call)");
  EXPECT_EQ((*rows)[1].error, "");
  EXPECT_EQ(AbExitStatus(*rows, 0.05), 1);
  EXPECT_NE(FormatAbTable(*rows, 0.05, "old", "new").find("not compared"),
            std::string::npos);

  o.base_bin = o.new_bin;
  rows = RunAb(o, nullptr);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  for (const AbRow& r : *rows) EXPECT_EQ(r.error, "") << r.name;
  EXPECT_EQ(AbExitStatus(*rows, 0.05), 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace attnkit::bench
