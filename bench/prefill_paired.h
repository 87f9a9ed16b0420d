// Prefill against the FMA loop of the same rounds: the prefill_paired/ and
// prefill_bf16_paired/ benchmarks (bench/attention_bench.cc) beside their
// prefill/ and prefill_bf16/ twins' start-of-run figure, for the summary.
#ifndef ATTNKIT_BENCH_PREFILL_PAIRED_H_
#define ATTNKIT_BENCH_PREFILL_PAIRED_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "bench/run_data.h"

namespace attnkit::bench {

// The counter of the paired prefill benchmarks: per round, the call's
// GFLOPS over the GFLOPS of calibration/fma's chains run on all threads just
// before it; the median over rounds.
inline constexpr std::string_view kPctFmaPaired = "pct_fma_paired";

struct PrefillPairedRow {
  std::string benchmark;  // the paired benchmark's name
  size_t repetitions = 0;
  double median_gflops = 0;   // NaN when the benchmark errored
  double fma_gflops = 0;      // median of its fma_GFLOPS; NaN if none
  double pct_fma_paired = 0;  // median over repetitions; NaN if none
  // The median pct_peak of the twin (same backend and shape, against the
  // start-of-run calibration); NaN when the run has no twin.
  double twin_pct_peak = 0;
  std::string error;  // SkipWithError message, if any
};

// Every paired prefill benchmark of `run`, by name.
std::vector<PrefillPairedRow> PrefillVsPairedFma(const RunData& run);

// The summary's table of those rows; "" when there are none.
std::string FormatPrefillPaired(const std::vector<PrefillPairedRow>& rows);

}  // namespace attnkit::bench

#endif  // ATTNKIT_BENCH_PREFILL_PAIRED_H_
