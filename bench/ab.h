// Interleaved A/B of two benchmark binaries (`./attnkit bench ab`): the
// before -> after ratio of each benchmark from one run, on a host whose
// speed moves with its other tenants.
//
// `bench compare` gates two runs made at different times; on a shared host
// the read bandwidth swings 30-77 GB/s within minutes and an unchanged
// kernel can read 0.75-1.2x between runs. Here the two binaries run each
// benchmark in turn, round after round (BASE first when round + row is
// even, NEW first otherwise), each run a fresh process, so both halves of a
// round's pair see the same host, and the verdict is taken on the per-round
// ratios NEW / BASE: their median, quartiles and a sign test.
#ifndef ATTNKIT_BENCH_AB_H_
#define ATTNKIT_BENCH_AB_H_

#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "bench/run_data.h"
#include "runtime/status.h"

namespace attnkit::bench {

// One round of one benchmark: each binary's wall time per iteration, and its
// % of the same process's limit (pct_read_bw_paired for decode_paired/,
// pct_fma_paired for prefill_paired/, else pct_peak; NAN when the benchmark
// reports none).
struct AbRound {
  double base_ns = NAN, new_ns = NAN;
  double base_limit = NAN, new_limit = NAN;
};

struct AbRow {
  std::string name;
  std::vector<AbRound> rounds;
  std::string error;  // a run that failed or a wrong output: the row fails
};

enum class AbVerdict { kFaster, kSame, kSlower, kUndecided, kFailed };

struct AbRowSummary {
  double ratio = NAN, q1 = NAN, q3 = NAN;  // NEW / BASE time per round
  // NEW's fastest round / BASE's fastest round (rounds where both timed).
  // A tenant only ever slows a run down, so on a host whose rounds swing by
  // more than the change, the two fastest runs resolve what the per-round
  // ratios cannot (two builds of one source: min ratio within ~2%, per-round
  // ratios 0.56-1.6; bench/README.md). Information: the verdict stays on
  // the per-round ratios.
  double best_ratio = NAN;
  double base_limit = NAN, new_limit = NAN;  // medians
  int slower_rounds = 0, timed_rounds = 0;   // NEW slower in k of n
  double p_slower = 1, p_faster = 1;         // one-sided sign tests
  AbVerdict verdict = AbVerdict::kFailed;
};

// The significance level of a verdict's sign test.
inline constexpr double kAbSignificance = 0.05;

// Slower: the median ratio is >= 1 + threshold and NEW was slower in more
// rounds than chance explains (one-sided sign test over the rounds, p <=
// kAbSignificance: at least 5 of 5 rounds, 7 of 8, 8 of 9). One slow
// spell of the host moves a round or two, not the sign test. Undecided: a
// median >= 1 + threshold over rounds too few for any sign test to resolve
// (< 5; as `compare`, a slowdown measured too few times is not a pass).
// Faster, mirrored (never undecided); else the same within what the rounds
// resolve ("~"). Failed: an error, or no round.
AbRowSummary SummarizeAbRow(const AbRow& row, double threshold);

// P(X >= k) for X ~ Binomial(n, 1/2): the one-sided sign test of k rounds
// out of n going one way. 1 when n <= 0.
double SignTestP(int k, int n);

// Whether BASE runs first in `round` for row `row` (alternating both ways,
// so neither binary always follows the other).
inline bool AbBaseFirst(int round, int row) { return (round + row) % 2 == 0; }

// A --benchmark_filter that selects exactly `name`: ^name$ with every
// regex metacharacter escaped.
std::string ExactNameFilter(std::string_view name);

// The limit metric of a benchmark's samples: a paired figure
// (pct_read_bw_paired, pct_fma_paired), else pct_peak; NAN when none.
double LimitOf(const BenchmarkSamples& s);

// The table: per row the median ratio [quartiles], the verdict, both sides'
// % of limit; then a line per verdict count. Exit status of `bench ab`:
// 1 if any row is slower, undecided or failed, or there is none; else 0.
std::string FormatAbTable(const std::vector<AbRow>& rows, double threshold,
                          const std::string& base_label,
                          const std::string& new_label);
int AbExitStatus(const std::vector<AbRow>& rows, double threshold);

// ---- running the binaries

// Runs argv (argv[0] a path) with stdin from /dev/null; returns its stdout.
// Its stderr goes to *err (when not null). A non-zero exit or a signal is an
// error naming the command and its status.
StatusOr<std::string> RunCapture(const std::vector<std::string>& argv,
                                 std::string* err = nullptr);

// The benchmarks of `bin` matching `filter` (empty: all), in its order.
StatusOr<std::vector<std::string>> ListBenchmarks(const std::string& bin,
                                                  const std::string& filter);

struct AbOptions {
  std::string base_bin, new_bin;
  std::string filter;
  int rounds = 8;
  double min_time = 0.2;  // seconds per benchmark run
  double threshold = 0.05;
};

// The whole A/B: the benchmarks of NEW matching the filter that BASE has
// too (missing ones in *only_new), every round of every row. Progress goes
// to stderr. A binary that cannot list its benchmarks is an error; a run
// that fails marks its row failed and the A/B goes on, and so does a row the
// two binaries measure by different methods (MethodMismatch, compare.h: a
// BASE from before a change of method under the same names).
StatusOr<std::vector<AbRow>> RunAb(const AbOptions& o,
                                   std::vector<std::string>* only_new);

}  // namespace attnkit::bench

#endif  // ATTNKIT_BENCH_AB_H_
