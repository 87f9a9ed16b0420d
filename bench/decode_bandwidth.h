// Decode figures as a fraction of the read bandwidth measured in the SAME run.
//
// Why: the memory read bandwidth of this shared host (2-core AMD EPYC Zen 5
// family 26, GCC 12.2, 2026-11-21) swings between 26 and 71 GB/s within minutes
// (other tenants), so the one-off calibration taken at start-up (the `pct_peak`
// counter, `calib_read_gbps_all`) can be off by 1.5x for a benchmark measured
// minutes later. `calibration/read_bw/threads:N` is an ordinary benchmark of
// the run: with random interleaving its repetitions are spread over the whole
// run like the decode ones, so
//   pct_read_bw_same_run = 100 * median(decode GBps) / median(read_bw GBps)
// compares two figures that sampled the same tenant load. Medians, not means:
// one repetition taken while a neighbour streams memory drags a mean by 20%.
// The divisor is the read_bw instance at the decode benchmarks' thread count
// (context `omp_threads`: decode kernels run on every OpenMP thread).
#ifndef ATTNKIT_BENCH_DECODE_BANDWIDTH_H_
#define ATTNKIT_BENCH_DECODE_BANDWIDTH_H_

#include <chrono>
#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "bench/run_data.h"
#include "runtime/status.h"

namespace attnkit::bench {

// The figures' names wherever they are shown (summary, dashboard).
inline constexpr std::string_view kPctReadBwSameRun = "pct_read_bw_same_run";
// The counter of the decode_paired/ benchmarks (bench/attention_bench.cc):
// per round, decode GB/s over the GB/s of a read pass run just before it;
// the median over rounds. Tighter than pct_read_bw_same_run, whose two
// medians come from different moments of the run.
inline constexpr std::string_view kPctReadBwPaired = "pct_read_bw_paired";
inline constexpr std::string_view kReadBwPrefix = "calibration/read_bw/";

// One round of a decode_paired/ benchmark: `read()` -- a pass over the
// read_bw buffer, several times the last-level cache, which evicts the KV
// cache -- then ONE `call()`, each timed; the round's figure is
//   100 * (call_bytes / call_s) / (read_bytes / read_s).
// One call, because only the first call after the pass streams its K/V from
// DRAM, as a decode step does (the other layers' K/V evict a layer's between
// steps). A last-level cache that holds the K/V serves the calls after it:
// on an Intel Xeon under KVM with a 260 MiB L3 (GCC 12.2, 2026-11-28), simd
// decode at kv 16k, Hkv 8, 2 threads: bf16 (64 MiB of K/V) 3.63 ms for the
// first call after a 1 GiB read pass, 2.53 ms for the sixth; f32 (128 MiB)
// 6.19 -> 5.60 ms. Rounds that called for as long as the pass took counted
// those rereads as read bandwidth (101% of the pass for one bf16 kernel).
// `read` and `call` return Status; the first error ends the round.
// The run-context key that records this method, and its value (bench
// compare does not compare decode_paired/ rows across methods; runs from
// before it have no key).
inline constexpr std::string_view kDecodePairedMethodKey =
    "decode_paired_method";
inline constexpr std::string_view kDecodePairedMethod = "one_cold_call";
struct PairedRound {
  double read_s = 0;
  double call_s = 0;
  double Pct(double read_bytes, double call_bytes) const {
    return 100.0 * (call_bytes / call_s) / (read_bytes / read_s);
  }
};
template <class Read, class Call>
StatusOr<PairedRound> RunPairedRound(Read&& read, Call&& call) {
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](Clock::duration d) {
    return std::chrono::duration<double>(d).count();
  };
  PairedRound r;
  const Clock::time_point r0 = Clock::now();
  ATTNKIT_RETURN_IF_ERROR(read());
  const Clock::time_point c0 = Clock::now();
  ATTNKIT_RETURN_IF_ERROR(call());
  const Clock::time_point c1 = Clock::now();
  r.read_s = seconds(c0 - r0);
  r.call_s = seconds(c1 - c0);
  return r;
}

// The run's own read-bandwidth benchmark, the ratio's divisor.
struct ReadBandwidth {
  std::string benchmark;  // e.g. calibration/read_bw/threads:2/real_time
  int threads = 0;
  double median_gbps = 0;
  double min_gbps = 0, max_gbps = 0;
  size_t repetitions = 0;
  std::string note;  // how it was chosen, when not by context omp_threads
};

// The read_bw benchmark of `run` at the decode benchmarks' thread count.
// NOT_FOUND when the run has none (filtered out) or none at that count;
// FAILED_PRECONDITION when it errored or reports no positive GBps. The
// message says which, for people.
StatusOr<ReadBandwidth> SameRunReadBandwidth(const RunData& run);

struct DecodeBandwidthRow {
  std::string benchmark;
  size_t repetitions = 0;
  double median_gbps = 0;     // NaN when the benchmark errored
  double pct_peak_start = 0;  // median pct_peak (start-of-run); NaN if none
  double pct_read_bw_same_run = 0;  // NaN when the run has no divisor
  // Median over repetitions of the decode_paired/ twin's pct_read_bw_paired
  // (same backend and shape); NaN when the run has none.
  double pct_read_bw_paired = 0;
  size_t paired_repetitions = 0;
  std::string error;  // SkipWithError message, if any
};

struct DecodeBandwidthReport {
  StatusOr<ReadBandwidth> read_bw = Status::NotFound("not computed");
  double calib_read_gbps_start = 0;  // context calib_read_gbps_all; NaN if none
  std::vector<DecodeBandwidthRow> rows;  // every decode/ benchmark, by name
  // Non-empty when the run's context says its repetitions were NOT
  // interleaved (read_bw's then ran back to back, in a window of seconds):
  // the warning to show beside the ratio. Runs that predate the
  // random_interleaving context key get none.
  std::string warning;
};

// Every decode/ benchmark of `run` (not decode_step/) with its median GBps
// against the same run's read bandwidth, and its decode_paired/ twin's
// figure. A decode_paired/ benchmark without a decode/ twin in the run
// (filtered out) gets a row of its own.
DecodeBandwidthReport DecodeVsReadBandwidth(const RunData& run);

// pct_read_bw_same_run of each decode benchmark of `run`; empty when the run
// has no usable read_bw benchmark.
std::map<std::string, double> PctReadBwSameRun(const RunData& run);

// The text `attnkit bench summary` prints: the divisor (or why there is
// none), then one line per decode benchmark with both figures.
std::string FormatDecodeBandwidth(const DecodeBandwidthReport& report);

}  // namespace attnkit::bench

#endif  // ATTNKIT_BENCH_DECODE_BANDWIDTH_H_
