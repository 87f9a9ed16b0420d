// One benchmark run as the history store, the compare gate and the dashboard
// see it: per benchmark, every repetition's value of every metric.
#ifndef ATTNKIT_BENCH_RUN_DATA_H_
#define ATTNKIT_BENCH_RUN_DATA_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/status.h"
#include "runtime/text.h"

namespace attnkit::bench {

// The wall time per iteration in nanoseconds, whatever time_unit the
// benchmark printed in. The gate's time metric.
inline constexpr std::string_view kTimeMetric = "real_time_ns";
// Counters gated exactly (any increase fails): deterministic per-step counts.
inline constexpr std::string_view kExactMetrics[] = {"allocs_per_step",
                                                     "bytes_copied_per_step"};
bool IsExactMetric(std::string_view metric);

struct RunInfo {
  int64_t id = 0;      // store row id; 0 when not stored
  std::string sha;     // git commit (context.git_sha), "unknown" if absent
  bool dirty = false;  // uncommitted changes in the worktree
  std::string date;    // ISO 8601, from the benchmark context
  std::string host;
  bool quick = false;        // the reduced --quick grid and repetitions
  std::string source;        // file the run came from
  std::string context_json;  // the whole Google Benchmark context object
};

struct BenchmarkSamples {
  // metric -> one value per repetition, in repetition order.
  std::map<std::string, std::vector<double>> metrics;
  std::string error;  // SkipWithError message (a wrong output), if any
};

// The samples of `metric` (one per repetition), or nullptr when the
// benchmark has none.
const std::vector<double>* FindMetric(const BenchmarkSamples& s,
                                      std::string_view metric);
// The median of `metric`'s samples, NaN when it has none.
double MedianMetric(const BenchmarkSamples& s, std::string_view metric);
// `v` with `digits` decimals, "n/a" for NaN (a figure the run lacks).
std::string FixedOrNa(double v, int digits);

struct RunData {
  RunInfo info;
  std::map<std::string, BenchmarkSamples> benchmarks;  // by run_name
};

// Reads Google Benchmark JSON (--benchmark_format=json or _out): iteration
// entries only (aggregates are recomputed from the repetitions); real_time in
// ns as kTimeMetric, cpu_time as cpu_time_ns, every user counter under its
// name. INVALID_ARGUMENT names what is malformed.
StatusOr<RunData> ParseGoogleBenchmarkJson(std::string_view text,
                                           std::string source);
StatusOr<RunData> ReadGoogleBenchmarkJsonFile(const std::string& path);

// A string field of the run's benchmark context ("calib_fma_gflops_1t",
// "compiler", ...), or `fallback` when absent.
std::string ContextValue(const RunInfo& info, std::string_view key,
                         std::string_view fallback = "?");

// The value Google Benchmark (1.7) gives its boolean flag `name` (e.g.
// "benchmark_enable_random_interleaving"): the last --name[=V] in argv,
// else the environment value `env` (its BENCHMARK_... variable; nullptr when
// unset), else false; V read as Google Benchmark reads booleans ("0", "f",
// "n", "false", "no", "off" are false; a bare flag is true). attnkit_bench
// records random interleaving in the context (random_interleaving), because
// the same-run ratios assume it (decode_bandwidth.h), and skips the
// calibration when the run only lists its benchmarks.
bool GoogleBenchmarkBoolFlag(int argc, const char* const* argv,
                             std::string_view name, const char* env);

// What a benchmark shares with its paired twin (decode/ and decode_paired/,
// prefill/ and prefill_paired/): its name without the family (up to the
// first '/'), the /iterations:N of a fixed round count and the /real_time or
// /manual_time suffix -- "<backend>/S:2048/d:128/causal:1/hkv:8".
std::string TwinShape(std::string_view name);

// Google Benchmark JSON for `run` (used by tests and `bench export`): one
// iteration entry per repetition; ParseGoogleBenchmarkJson reads it back.
std::string ToGoogleBenchmarkJson(const RunData& run);

}  // namespace attnkit::bench

#endif  // ATTNKIT_BENCH_RUN_DATA_H_
