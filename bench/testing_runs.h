// Synthetic benchmark runs for the tests of the store, the gate and the
// dashboard: nothing is timed; repetitions are drawn from a seeded
// distribution so a planted change is known exactly.
#ifndef ATTNKIT_BENCH_TESTING_RUNS_H_
#define ATTNKIT_BENCH_TESTING_RUNS_H_

#include <cmath>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/run_data.h"
#include "runtime/random.h"

namespace attnkit::bench::testing {

struct Plant {
  std::map<std::string, double> slowdown;     // benchmark -> time factor
  std::map<std::string, double> extra_alloc;  // benchmark -> added per step
  std::map<std::string, double> extra_bytes;  // benchmark -> added per step
  std::map<std::string, std::string> error;   // benchmark -> error message
};

// Names of the synthetic suite; decode_step ones carry the exact counters.
inline const char* const kSyntheticBenchmarks[] = {
    "prefill/reference/S:128/d:64/causal:0/hkv:8/real_time",
    "prefill/reference/S:2048/d:128/causal:1/hkv:8/real_time",
    "decode/reference/kv_len:4096/bf16:0/batch:1/real_time",
    "decode_step/reference/len:512/inplace:0/real_time",
    "decode_step/reference/len:512/inplace:1/real_time",
};

// A run of every synthetic benchmark with `reps` repetitions whose times are
// base * (1 + 1.5% noise) (the noise of a quiet machine), times the planted
// slowdown. `seed` draws the noise: two seeds give two honest reruns.
inline RunData SyntheticRun(const std::string& sha, const std::string& date,
                            uint64_t seed, int reps = 9,
                            const Plant& plant = {}) {
  RunData run;
  run.info.sha = sha;
  run.info.date = date;
  run.info.host = "testhost";
  run.info.source = "synthetic-" + sha;
  Rng rng(seed);
  double base_ns = 1.0e5;
  for (const char* name : kSyntheticBenchmarks) {
    base_ns *= 3.7;
    BenchmarkSamples s;
    if (auto e = plant.error.find(name); e != plant.error.end()) {
      s.error = e->second;
      run.benchmarks[name] = s;
      continue;
    }
    double factor = 1;
    if (auto f = plant.slowdown.find(name); f != plant.slowdown.end()) {
      factor = f->second;
    }
    const std::string n = name;
    const bool step = n.rfind("decode_step/", 0) == 0;
    for (int r = 0; r < reps; ++r) {
      const double t = base_ns * factor * (1 + 0.015 * std::fabs(rng.Normal()));
      s.metrics[std::string(kTimeMetric)].push_back(t);
      s.metrics["GFLOPS"].push_back(1e3 / t * 1e3);
      if (step) {
        double allocs = n.find("inplace:1") != std::string::npos ? 0 : 2;
        double bytes =
            n.find("inplace:1") != std::string::npos ? 8192 : 4202496;
        if (auto a = plant.extra_alloc.find(name); a != plant.extra_alloc.end())
          allocs += a->second;
        if (auto b = plant.extra_bytes.find(name); b != plant.extra_bytes.end())
          bytes += b->second;
        s.metrics["allocs_per_step"].push_back(allocs);
        s.metrics["bytes_copied_per_step"].push_back(bytes);
      }
    }
    run.benchmarks[name] = s;
  }
  return run;
}

// The synthetic decode benchmark, and the name attnkit_bench gives its
// read-bandwidth calibration at `threads` threads.
inline constexpr const char* kSyntheticDecode =
    "decode/reference/kv_len:4096/bf16:0/batch:1/real_time";
inline std::string ReadBwName(int threads) {
  return "calibration/read_bw/threads:" + std::to_string(threads) +
         "/real_time";
}

// The context attnkit_bench writes: the OpenMP thread count the decode
// benchmarks run on, and the one-off start-of-run read bandwidth that their
// pct_peak counter divides by, and whether repetitions were interleaved.
// omp_threads <= 0 leaves it out.
inline void SetBandwidthContext(RunData& run, int omp_threads,
                                double start_gbps, bool interleaved = true) {
  // Google Benchmark writes custom context values as strings.
  nlohmann::ordered_json ctx = {
      {"calib_read_gbps_all", std::to_string(start_gbps)},
      {"random_interleaving", interleaved ? "1" : "0"}};
  if (omp_threads > 0) ctx["omp_threads"] = std::to_string(omp_threads);
  run.info.context_json = ctx.dump();
}

// Adds calibration/read_bw/threads:N with one GBps value per repetition (and
// the time a 1 GiB sweep takes at that rate).
inline void AddReadBandwidth(RunData& run, int threads,
                             const std::vector<double>& gbps) {
  BenchmarkSamples& s = run.benchmarks[ReadBwName(threads)];
  for (double g : gbps) {
    s.metrics[std::string(kTimeMetric)].push_back(1.073741824e9 / g);
    s.metrics["GBps"].push_back(g);
  }
}

// Gives decode benchmark `bench` one GBps value per repetition and the
// pct_peak counter attnkit_bench derives from it: against the start-of-run
// calibration `start_gbps`.
inline void SetDecodeBandwidth(RunData& run, const std::string& bench,
                               const std::vector<double>& gbps,
                               double start_gbps) {
  BenchmarkSamples& s = run.benchmarks[bench];
  s.metrics["GBps"] = gbps;
  s.metrics["pct_peak"].clear();
  for (double g : gbps) s.metrics["pct_peak"].push_back(100 * g / start_gbps);
}

}  // namespace attnkit::bench::testing

#endif  // ATTNKIT_BENCH_TESTING_RUNS_H_
