#include "bench/compare.h"

#include <gtest/gtest.h>

#include <cmath>

#include "bench/testing_runs.h"
#include "runtime/enum_table_testing.h"

namespace attnkit::bench {
namespace {

using testing::Plant;
using testing::SyntheticRun;

constexpr const char* kPrefill =
    "prefill/reference/S:2048/d:128/causal:1/hkv:8/real_time";
constexpr const char* kConcat =
    "decode_step/reference/len:512/inplace:0/real_time";
constexpr const char* kInplace =
    "decode_step/reference/len:512/inplace:1/real_time";

std::vector<const CompareRow*> Regressions(const CompareReport& r) {
  std::vector<const CompareRow*> out;
  for (const CompareRow& row : r.rows) {
    if (row.verdict == Verdict::kRegression) out.push_back(&row);
  }
  return out;
}

TEST(CompareTest, IdenticalRerunPasses) {
  // Same distribution, different noise: an honest rerun, for many seeds.
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const CompareReport r = CompareRuns(SyntheticRun("a", "d1", 2 * seed),
                                        SyntheticRun("b", "d2", 2 * seed + 1));
    EXPECT_FALSE(r.failed()) << FormatCompareTable(r, {}, {});
    EXPECT_EQ(r.regressions, 0);
  }
}

TEST(CompareTest, FlagsPlanted20PercentSlowdown) {
  Plant slow;
  slow.slowdown[kPrefill] = 1.20;
  const CompareReport r = CompareRuns(SyntheticRun("a", "d1", 1),
                                      SyntheticRun("b", "d2", 2, 9, slow));
  ASSERT_TRUE(r.failed());
  const auto regs = Regressions(r);
  ASSERT_EQ(regs.size(), 1u) << FormatCompareTable(r, {}, {});
  EXPECT_EQ(regs[0]->benchmark, kPrefill);
  EXPECT_EQ(regs[0]->metric, kTimeMetric);
  EXPECT_NEAR(regs[0]->ratio, 1.20, 0.03);
  EXPECT_LT(regs[0]->p, 0.01);
  EXPECT_EQ(regs[0]->n_old, 9u);
  const std::string table = FormatCompareTable(r, {}, {});
  EXPECT_NE(table.find("REGRESSION"), std::string::npos);
  EXPECT_NE(table.find("1 regressions"), std::string::npos);
}

TEST(CompareTest, SmallSlowdownsPass) {
  // 3% slower is significant at n = 9 but under the 5% threshold.
  Plant small;
  small.slowdown[kPrefill] = 1.03;
  CompareReport r = CompareRuns(SyntheticRun("a", "d1", 1),
                                SyntheticRun("b", "d2", 2, 9, small));
  EXPECT_FALSE(r.failed());
  // The threshold is an option: at 2% the 3% slowdown fails.
  r = CompareRuns(SyntheticRun("a", "d1", 1),
                  SyntheticRun("b", "d2", 2, 9, small), {0.01, 0.02});
  EXPECT_TRUE(r.failed());
  // 3 + 3 repetitions of an unchanged build (1.5% noise): nothing slower by
  // the threshold, so nothing to decide; passes.
  r = CompareRuns(SyntheticRun("a", "d1", 1, 3), SyntheticRun("b", "d2", 2, 3));
  EXPECT_FALSE(r.failed()) << FormatCompareTable(r, {}, {});
}

// Issue 16: a 100x slowdown with 2 repetitions was reported `same` (p can
// never reach 0.01 with so few). A slowdown of >= the threshold that the
// repetitions cannot decide is UNDECIDED, and fails the gate.
TEST(CompareTest, SlowdownsTooFewRepetitionsCanDecideFailTheGate) {
  Plant slow;
  slow.slowdown[kPrefill] = 100;
  for (int reps : {1, 2, 3, 4}) {
    CompareReport r = CompareRuns(SyntheticRun("a", "d1", 1, reps),
                                  SyntheticRun("b", "d2", 2, reps, slow));
    const std::string table = FormatCompareTable(r, {}, {});
    EXPECT_TRUE(r.failed()) << reps << "\n" << table;
    EXPECT_EQ(r.undecided, 1) << table;
    EXPECT_EQ(r.regressions, 0) << table;
    for (const CompareRow& row : r.rows) {
      if (row.benchmark != kPrefill || row.metric != kTimeMetric) continue;
      EXPECT_EQ(row.verdict, Verdict::kUndecided);
      EXPECT_NE(row.note.find("too few repetitions to decide"),
                std::string::npos);
    }
    EXPECT_NE(table.find("UNDECIDED"), std::string::npos) << table;
    EXPECT_NE(table.find("gate: FAILED"), std::string::npos) << table;
  }
  // 5 + 5 can reach p = 0.0079 < 0.01: decided, a regression.
  CompareReport r = CompareRuns(SyntheticRun("a", "d1", 1, 5),
                                SyntheticRun("b", "d2", 2, 5, slow));
  EXPECT_EQ(r.regressions, 1);
  EXPECT_EQ(r.undecided, 0);
  // Unequal counts: 9 old against 1 new.
  r = CompareRuns(SyntheticRun("a", "d1", 1, 9),
                  SyntheticRun("b", "d2", 2, 1, slow));
  EXPECT_EQ(r.undecided, 1);
  // A base time of 0 and a new one above: an infinite slowdown, not NaN.
  RunData zero = SyntheticRun("a", "d1", 1, 9);
  for (double& t : zero.benchmarks[kPrefill].metrics[std::string(kTimeMetric)])
    t = 0;
  r = CompareRuns(zero, SyntheticRun("b", "d2", 2, 9));
  EXPECT_EQ(r.regressions, 1) << FormatCompareTable(r, {}, {});
}

TEST(CompareTest, FlagsPlantedExtraAllocationExactly) {
  Plant alloc;
  alloc.extra_alloc[kInplace] = 1;  // 0 -> 1 allocation per step
  const CompareReport r = CompareRuns(SyntheticRun("a", "d1", 1),
                                      SyntheticRun("b", "d2", 2, 9, alloc));
  const auto regs = Regressions(r);
  ASSERT_EQ(regs.size(), 1u) << FormatCompareTable(r, {}, {});
  EXPECT_EQ(regs[0]->benchmark, kInplace);
  EXPECT_EQ(regs[0]->metric, "allocs_per_step");
  EXPECT_EQ(regs[0]->old_value, 0);
  EXPECT_EQ(regs[0]->new_value, 1);
  // Even with one repetition: the exact gate needs no statistics.
  const CompareReport one = CompareRuns(SyntheticRun("a", "d1", 1, 1),
                                        SyntheticRun("b", "d2", 2, 1, alloc));
  EXPECT_TRUE(one.failed());
}

TEST(CompareTest, FlagsExtraBytesCopiedAndPassesFewer) {
  Plant more;
  more.extra_bytes[kConcat] = 64;
  CompareReport r = CompareRuns(SyntheticRun("a", "d1", 1),
                                SyntheticRun("b", "d2", 2, 9, more));
  auto regs = Regressions(r);
  ASSERT_EQ(regs.size(), 1u);
  EXPECT_EQ(regs[0]->metric, "bytes_copied_per_step");
  // Fewer bytes (and fewer allocations) is an improvement, not a failure.
  Plant fewer;
  fewer.extra_bytes[kConcat] = -4194304;
  fewer.extra_alloc[kConcat] = -2;
  r = CompareRuns(SyntheticRun("a", "d1", 1),
                  SyntheticRun("b", "d2", 2, 9, fewer));
  EXPECT_FALSE(r.failed());
  int faster = 0;
  for (const CompareRow& row : r.rows) {
    if (row.benchmark == kConcat && row.verdict == Verdict::kFaster) ++faster;
  }
  EXPECT_EQ(faster, 2);
}

TEST(CompareTest, FlagsSpeedupsAsFaster) {
  Plant fast;
  fast.slowdown[kPrefill] = 0.7;
  const CompareReport r = CompareRuns(SyntheticRun("a", "d1", 1),
                                      SyntheticRun("b", "d2", 2, 9, fast));
  EXPECT_FALSE(r.failed());
  bool seen = false;
  for (const CompareRow& row : r.rows) {
    if (row.benchmark == kPrefill && row.metric == kTimeMetric) {
      EXPECT_EQ(row.verdict, Verdict::kFaster);
      seen = true;
    }
  }
  EXPECT_TRUE(seen);
}

TEST(CompareTest, FailedOutputCheckIsARegression) {
  Plant broken;
  broken.error[kPrefill] = "output mismatch at [b=0,h=1,i=0,d=0]";
  CompareReport r = CompareRuns(SyntheticRun("a", "d1", 1),
                                SyntheticRun("b", "d2", 2, 9, broken));
  auto regs = Regressions(r);
  ASSERT_EQ(regs.size(), 1u);
  EXPECT_EQ(regs[0]->metric, "output");
  EXPECT_NE(FormatCompareTable(r, {}, {}).find("output mismatch"),
            std::string::npos);
  // Fixed in the new run: reported, passes.
  r = CompareRuns(SyntheticRun("a", "d1", 1, 9, broken),
                  SyntheticRun("b", "d2", 2));
  EXPECT_FALSE(r.failed());
}

// Issue 16: a benchmark of the base absent from the new run was `gone` and
// passed, so a run that lost half its benchmarks was green. It is MISSING
// and fails, unless allow_missing; new benchmarks never fail.
TEST(CompareTest, MissingBenchmarksFailUnlessAllowed) {
  RunData base = SyntheticRun("a", "d1", 1);
  RunData next = SyntheticRun("b", "d2", 2);
  base.benchmarks.erase(kPrefill);
  next.benchmarks.erase(kConcat);
  CompareReport r = CompareRuns(base, next);
  std::string table = FormatCompareTable(r, {}, {});
  EXPECT_TRUE(r.failed()) << table;
  EXPECT_EQ(r.missing, 1) << table;
  EXPECT_EQ(r.regressions, 0);
  int missing = 0, added = 0;
  for (const CompareRow& row : r.rows) {
    if (row.verdict == Verdict::kMissing) {
      ++missing;
      EXPECT_EQ(row.benchmark, kConcat);
    }
    if (row.verdict == Verdict::kNew) ++added;
  }
  EXPECT_EQ(missing, 1);
  EXPECT_EQ(added, 1);
  EXPECT_NE(table.find("missing from the new run (--allow-missing accepts "
                       "them):\n  " +
                       std::string(kConcat) + "\n"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("gate: FAILED"), std::string::npos);

  CompareOptions allow;
  allow.allow_missing = true;
  r = CompareRuns(base, next, allow);
  table = FormatCompareTable(r, {}, {});
  EXPECT_FALSE(r.failed()) << table;
  EXPECT_EQ(r.missing, 0);
  EXPECT_NE(table.find("gone"), std::string::npos);
  EXPECT_NE(table.find("gate: passed"), std::string::npos);

  // A gated counter gone from a benchmark still present is missing too.
  next = SyntheticRun("b", "d2", 2);
  next.benchmarks[kInplace].metrics.erase("allocs_per_step");
  r = CompareRuns(SyntheticRun("a", "d1", 1), next);
  EXPECT_EQ(r.missing, 1);
  EXPECT_NE(FormatCompareTable(r, {}, {}).find("  " + std::string(kInplace) +
                                               " (allocs_per_step)\n"),
            std::string::npos);
  EXPECT_FALSE(CompareRuns(SyntheticRun("a", "d1", 1), next, allow).failed());
}

// decode_paired/ rows measured by another method (the context records it;
// a run without the key predates the one-cold-call rounds) are not compared:
// listed as missing, with the reason, unless allow_missing. Same method: a
// comparison as usual.
TEST(CompareTest, RowsMeasuredByAnotherMethodAreNotCompared) {
  constexpr const char* kPaired =
      "decode_paired/simd/kv_len:16384/bf16:1/batch:1/iterations:32/"
      "manual_time";
  RunData base = SyntheticRun("a", "d1", 1);
  RunData next = SyntheticRun("b", "d2", 2);
  base.benchmarks[kPaired] = base.benchmarks[kPrefill];
  Plant slow;
  slow.slowdown[kPrefill] = 1.4;  // the cold calls take longer
  next.benchmarks[kPaired] =
      SyntheticRun("b", "d2", 2, 9, slow).benchmarks[kPrefill];
  next.info.context_json = R"({"decode_paired_method": "one_cold_call"})";
  CompareReport r = CompareRuns(base, next);
  std::string table = FormatCompareTable(r, {}, {});
  EXPECT_TRUE(r.failed()) << table;
  EXPECT_EQ(r.regressions, 0) << table;
  EXPECT_EQ(r.missing, 1) << table;
  EXPECT_NE(table.find(std::string(kPaired) +
                       ": measured differently (decode_paired_method: base "
                       "calls_for_the_read_pass, new one_cold_call)"),
            std::string::npos)
      << table;
  CompareOptions allow;
  allow.allow_missing = true;
  EXPECT_FALSE(CompareRuns(base, next, allow).failed());

  // Both runs by the new method: the slowdown is a regression again.
  base.info.context_json = next.info.context_json;
  r = CompareRuns(base, next);
  ASSERT_EQ(Regressions(r).size(), 1u) << FormatCompareTable(r, {}, {});
  EXPECT_EQ(Regressions(r)[0]->benchmark, kPaired);
}

// Every benchmark vanished (a filter that matched nothing, the wrong file):
// nothing was compared, so nothing passed -- even with allow_missing.
TEST(CompareTest, NothingComparedFails) {
  CompareOptions allow;
  allow.allow_missing = true;
  RunData base = SyntheticRun("a", "d1", 1);
  RunData other;
  other.benchmarks["something/else/real_time"] =
      base.benchmarks.begin()->second;
  for (const RunData& next : {RunData{}, other}) {
    for (const CompareOptions& o : {CompareOptions{}, allow}) {
      CompareReport r = CompareRuns(base, next, o);
      const std::string table = FormatCompareTable(r, {}, {});
      EXPECT_TRUE(r.failed()) << table;
      EXPECT_EQ(r.compared, 0);
      EXPECT_NE(table.find("nothing was compared"), std::string::npos) << table;
    }
  }
  EXPECT_TRUE(CompareRuns(RunData{}, RunData{}).failed());
}

// Names, notes and run fields come from files: the table prints their
// control characters escaped, never raw.
TEST(CompareTest, TableEscapesControlCharacters) {
  RunData base = SyntheticRun("a", "d1", 1);
  const std::string evil = "evil\x1b[2J\x1b]0;pwned\x07/real_time";
  base.benchmarks[evil] = base.benchmarks.begin()->second;
  Plant broken;
  broken.error[kPrefill] = "mismatch\x1b[31m";
  RunData next = SyntheticRun("b", "d2", 2, 9, broken);
  next.benchmarks[evil] = base.benchmarks[evil];
  RunInfo info;
  info.host = "h\x1b[1m";
  info.sha = "\x9b";
  const std::string table =
      FormatCompareTable(CompareRuns(base, next), info, info);
  EXPECT_EQ(table.find('\x1b'), std::string::npos) << table;
  EXPECT_EQ(table.find('\x07'), std::string::npos) << table;
  EXPECT_NE(table.find("evil\\x1b[2J\\x1b]0;pwned\\x07/real_time"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("mismatch\\x1b[31m"), std::string::npos);
  EXPECT_NE(table.find("h\\x1b[1m"), std::string::npos);
  EXPECT_NE(table.find("\\x9b"), std::string::npos);
}

// The read bandwidth halving between two runs (a neighbour streaming memory)
// is the host, not the commit: reported, never a regression; the same
// slowdown of a kernel still fails.
TEST(CompareTest, CalibrationChangesAreReportedNotGated) {
  RunData base = SyntheticRun("a", "d1", 1), next = SyntheticRun("b", "d2", 2);
  std::vector<double> fast, slow;
  for (int r = 0; r < 9; ++r) {
    fast.push_back(40 + 0.3 * r);
    slow.push_back(20 + 0.3 * r);
  }
  testing::AddReadBandwidth(base, 2, fast);
  testing::AddReadBandwidth(next, 2, slow);
  CompareReport r = CompareRuns(base, next);
  EXPECT_FALSE(r.failed()) << FormatCompareTable(r, {}, {});
  const CompareRow* row = nullptr;
  for (const CompareRow& x : r.rows) {
    if (x.benchmark == testing::ReadBwName(2)) row = &x;
  }
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(row->verdict, Verdict::kHost);
  EXPECT_GT(row->ratio, 1.9);
  EXPECT_LT(row->p, 0.01);
  EXPECT_NE(FormatCompareTable(r, {}, {}).find("not gated"), std::string::npos);
  // An unchanged calibration stays "same".
  next = SyntheticRun("b", "d2", 2);
  testing::AddReadBandwidth(next, 2, fast);
  for (const CompareRow& x : CompareRuns(base, next).rows) {
    if (x.benchmark == testing::ReadBwName(2)) {
      EXPECT_EQ(x.verdict, Verdict::kSame);
    }
  }
  Plant slow_kernel;
  slow_kernel.slowdown[kPrefill] = 2;
  next = SyntheticRun("b", "d2", 2, 9, slow_kernel);
  testing::AddReadBandwidth(next, 2, slow);
  r = CompareRuns(base, next);
  ASSERT_EQ(Regressions(r).size(), 1u);
  EXPECT_EQ(Regressions(r)[0]->benchmark, kPrefill);
}

TEST(CompareTest, TableWarnsAcrossHosts) {
  RunInfo a, b;
  a.host = "x";
  b.host = "y";
  const std::string t = FormatCompareTable(
      CompareRuns(SyntheticRun("a", "d1", 1), SyntheticRun("b", "d2", 2)), a,
      b);
  EXPECT_NE(t.find("different hosts"), std::string::npos);
}

TEST(FormatMetricTest, Units) {
  EXPECT_EQ(FormatMetric(kTimeMetric, 1.5e6), "1.5 ms");
  EXPECT_EQ(FormatMetric(kTimeMetric, 950), "950 ns");
  EXPECT_EQ(FormatMetric("bytes_copied_per_step", 4202496), "4.202 MB");
  EXPECT_EQ(FormatMetric("allocs_per_step", 67), "67");
}

TEST(CompareTest, VerdictTableRoundTrips) {
  attnkit::testing::ExpectRoundTrip(kVerdictNames, "Verdict");
}

}  // namespace
}  // namespace attnkit::bench
