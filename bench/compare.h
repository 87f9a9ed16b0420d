// The regression gate: compares two runs benchmark by benchmark.
//   time   : a regression when the Mann-Whitney U test says the repetitions
//            differ (p < alpha = 0.01) AND the median slowed by >= 5% (the
//            LNT / asv rule: significance alone flags 0.3% drifts on quiet
//            machines, a threshold alone flags noise on busy ones).
//   exact  : allocs_per_step and bytes_copied_per_step are deterministic per
//            step, so any increase is a regression.
//   errors : a benchmark whose output check failed in the new run is a
//            regression whatever its speed.
//   unknown: a benchmark of the base missing from the new run (or a gated
//            metric of it), or measured there by another method (a family
//            whose method changed under the same name, recorded in the run
//            context: decode_paired_method), unless allow_missing; a slowdown
//            of >= 5% that the test cannot judge because the repetitions are
//            too few for p < alpha (3 + 3 can reach only p = 0.1); and a
//            comparison in which no benchmark is in both runs. The gate fails
//            on these too: what it did not test never passes.
//   calibration/ benchmarks measure the host (FMA peak, read bandwidth), which
//   other tenants move by up to 2.7x within minutes (2-core AMD EPYC Zen 5
//   family 26, GCC 12.2, 2026-11-21); `./attnkit bench` runs read_bw in every
//   run as the divisor of pct_read_bw_same_run. Their significant changes are
//   reported (kHost), never gated.
#ifndef ATTNKIT_BENCH_COMPARE_H_
#define ATTNKIT_BENCH_COMPARE_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "bench/run_data.h"
#include "runtime/enum_table.h"

namespace attnkit::bench {

struct CompareOptions {
  double alpha = 0.01;         // Mann-Whitney two-sided significance level
  double min_slowdown = 0.05;  // median ratio new/old >= 1 + this
  bool allow_missing = false;  // base benchmarks absent from new: kGone
};

enum class Verdict {
  kSame,        // no significant or no large-enough change
  kFaster,      // significant and >= min_slowdown faster (or fewer counts)
  kRegression,  // fails the gate
  kNew,         // only in the new run
  kGone,        // only in the base run, with allow_missing (not failing)
  kMissing,     // only in the base run: fails the gate
  kUndecided,   // slower by >= min_slowdown, too few repetitions to test
  kFixed,       // errored in the base run, passes now
  kHost,        // a calibration/ benchmark changed: the host did, not the code
};
inline constexpr auto kVerdictNames = MakeEnumTable<Verdict>({
    {Verdict::kSame, "same"},
    {Verdict::kFaster, "faster"},
    {Verdict::kRegression, "REGRESSION"},
    {Verdict::kNew, "new"},
    {Verdict::kGone, "gone"},
    {Verdict::kMissing, "MISSING"},
    {Verdict::kUndecided, "UNDECIDED"},
    {Verdict::kFixed, "fixed"},
    {Verdict::kHost, "host"},
});
static_assert(kVerdictNames.RoundTrips());
inline std::string_view VerdictName(Verdict v) { return kVerdictNames.Name(v); }

struct CompareRow {
  std::string benchmark;
  std::string metric;    // kTimeMetric, an exact metric, or "output"
  double old_value = 0;  // median (time), max (exact metrics)
  double new_value = 0;
  double ratio = 0;  // new / old; NaN when undefined
  double p = -1;     // Mann-Whitney p (time rows); -1 when not tested
  size_t n_old = 0, n_new = 0;
  Verdict verdict = Verdict::kSame;
  std::string note;  // why, for errors and untestable rows
};

struct CompareReport {
  CompareOptions options;
  std::vector<CompareRow> rows;
  int regressions = 0;  // kRegression rows
  int undecided = 0;    // kUndecided rows
  int missing = 0;      // kMissing rows
  int compared = 0;     // benchmarks in both runs
  // Regressions, or anything the gate could not decide: a missing benchmark,
  // too few repetitions for a slowdown, nothing compared at all.
  bool failed() const {
    return regressions > 0 || undecided > 0 || missing > 0 || compared == 0;
  }
};

CompareReport CompareRuns(const RunData& base, const RunData& next,
                          const CompareOptions& options = {});

// Why benchmark `name` is not comparable between two runs, or "": its family
// changed how it measures under the same names and the runs' contexts record
// different methods (an older run, without the key, used the method from
// before the change). `bench compare` lists such a row with the base's
// missing benchmarks; `bench ab` fails it with the reason.
std::string MethodMismatch(const std::string& name, const RunInfo& base,
                           const RunInfo& next);

// The table people read: benchmark, metric, old, new, ratio, p, verdict, plus
// a header naming both runs, a closing summary line, the missing benchmarks
// and the gate's result. Strings from the runs are TerminalSafe.
std::string FormatCompareTable(const CompareReport& report, const RunInfo& base,
                               const RunInfo& next);

// "1.23 ms", "456 ns", "12.3 MB": a metric value for people.
std::string FormatMetric(std::string_view metric, double v);

}  // namespace attnkit::bench

#endif  // ATTNKIT_BENCH_COMPARE_H_
