#include "bench/calibration.h"

#include <immintrin.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "runtime/tensor.h"

namespace attnkit::bench {
namespace {

// Independent accumulator chains per thread. An FMA's result is ready 4 cycles
// after issue and Zen 4 has 2 FMA pipes, so 2 x 4 = 8 FMAs must be in flight
// to keep both pipes busy; with 16 lanes per zmm FMA that is 2 x 16 x 2 = 64
// FP32 FLOP/cycle when the pipes are 512 bits wide (Zen 5, this host's family
// 26) and half that on Zen 4, whose 256-bit pipes double-pump a zmm FMA. 16
// chains give a 2x margin over 8 (a hypervisor, or a core with 5-cycle FMA
// latency as on Skylake/Ice Lake, needs 10) and, with the two constant
// operands, use 18 of the 32 zmm registers, so nothing spills. The AVX2 path
// has only 16 ymm registers: 12 chains + 2 constants.
#if defined(__AVX512F__)
constexpr int kChains = 16;
constexpr int kLanes = 16;
using Vec = __m512;
inline Vec Set1(float x) { return _mm512_set1_ps(x); }
inline Vec Fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline float Lane0(Vec v) { return _mm512_cvtss_f32(v); }
constexpr const char* kIsa = "avx512f";
#elif defined(__FMA__) && defined(__AVX__)
constexpr int kChains = 12;
constexpr int kLanes = 8;
using Vec = __m256;
inline Vec Set1(float x) { return _mm256_set1_ps(x); }
inline Vec Fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline float Lane0(Vec v) { return _mm256_cvtss_f32(v); }
constexpr const char* kIsa = "avx2+fma";
#else
constexpr int kChains = 8;
constexpr int kLanes = 1;
using Vec = float;
inline Vec Set1(float x) { return x; }
inline Vec Fma(Vec a, Vec b, Vec c) { return std::fma(a, b, c); }
inline float Lane0(Vec v) { return v; }
constexpr const char* kIsa = "scalar";
#endif

// acc = acc * m + a converges to a / (1 - m) = 0.1: no overflow, no
// denormals (which would slow the FMAs down), whatever the iteration count.
float FmaChainsOneThread(int64_t iterations) {
  Vec acc[kChains];
  for (int c = 0; c < kChains; ++c)
    acc[c] = Set1(0.01f * static_cast<float>(c));
  const Vec m = Set1(0.999f);
  const Vec a = Set1(1e-4f);
  for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 16
    for (int c = 0; c < kChains; ++c) acc[c] = Fma(acc[c], m, a);
  }
  float s = 0;
  for (int c = 0; c < kChains; ++c) s += Lane0(acc[c]);
  return s;
}

volatile float g_sink;

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
      .count();
}

// Times fn() repeatedly for ~`seconds` (at least 5 trials) and returns the
// best rate (units of fn's return value per second). A peak is the best the
// machine delivered: on a shared machine preemption and other tenants only
// ever subtract, so the median would measure the neighbours, not the core.
template <typename Fn>
double BestRate(Fn fn, double seconds) {
  double best = 0;
  int trials = 0;
  const auto start = std::chrono::steady_clock::now();
  do {
    const auto t0 = std::chrono::steady_clock::now();
    const double amount = fn();
    best = std::max(best, amount / Seconds(t0));
    ++trials;
  } while (Seconds(start) < seconds || trials < 5);
  return best;
}

}  // namespace

int FmaLanes() { return kLanes; }
const char* FmaIsaName() { return kIsa; }

double RunFmaChains(int64_t iterations, int threads) {
  float sum = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sum)
  sum += FmaChainsOneThread(iterations);
  g_sink = sum;
  return 2.0 * kLanes * kChains * static_cast<double>(iterations) * threads;
}

float SumFloats(const float* data, size_t n, int threads) {
  float total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
  {
    const size_t t = static_cast<size_t>(omp_get_thread_num());
    const size_t nt = static_cast<size_t>(omp_get_num_threads());
    // Contiguous per-thread ranges, rounded to whole cache lines.
    const size_t per = (n / nt + 15) / 16 * 16;
    const size_t begin = std::min(n, t * per), end = std::min(n, begin + per);
    // Four vector accumulators hide the add latency, so the loop is bound by
    // loads from memory, not by the dependent adds.
    Vec acc[4] = {Set1(0), Set1(0), Set1(0), Set1(0)};
    size_t i = begin;
#if defined(__AVX512F__)
    for (; i + 4 * kLanes <= end; i += 4 * kLanes) {
      for (int u = 0; u < 4; ++u)
        acc[u] = _mm512_add_ps(acc[u], _mm512_loadu_ps(data + i + u * kLanes));
    }
    // Stored and summed by hand: GCC 12's _mm512_reduce_add_ps trips
    // -Wuninitialized on the intrinsic's deliberately undefined operand.
    alignas(64) float lanes[kLanes];
    _mm512_store_ps(lanes, _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]),
                                         _mm512_add_ps(acc[2], acc[3])));
    float s = 0;
    for (float l : lanes) s += l;
#elif defined(__FMA__) && defined(__AVX__)
    for (; i + 4 * kLanes <= end; i += 4 * kLanes) {
      for (int u = 0; u < 4; ++u)
        acc[u] = _mm256_add_ps(acc[u], _mm256_loadu_ps(data + i + u * kLanes));
    }
    alignas(32) float lanes[kLanes];
    _mm256_store_ps(lanes, _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]),
                                         _mm256_add_ps(acc[2], acc[3])));
    float s = 0;
    for (float l : lanes) s += l;
#else
    float s = acc[0] + acc[1] + acc[2] + acc[3];
#endif
    for (; i < end; ++i) s += data[i];
    total += s;
  }
  return total;
}

size_t ReadBufferBytes() {
  long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (llc <= 0) llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
  const size_t eight_llc = llc > 0 ? 8 * static_cast<size_t>(llc) : 0;
  // Clamped to [256 MiB, 1 GiB]: some hypervisors report a last-level cache
  // of hundreds of MiB, and a multi-GiB buffer buys no accuracy.
  return std::clamp<size_t>(eight_llc, size_t{256} << 20, size_t{1} << 30);
}

const float* ReadBuffer(int threads, size_t* n) {
  static AlignedBuffer buf;
  const size_t bytes = ReadBufferBytes();
  *n = bytes / sizeof(float);
  if (buf.size() != bytes) {
    buf = AlignedBuffer(bytes);
    float* data = static_cast<float*>(buf.data());
    const size_t count = *n;
    // First touch by the same static split the sum uses (page placement on
    // a NUMA machine follows the toucher).
#pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t i = 0; i < count; ++i) data[i] = 1.0f;
  }
  return static_cast<const float*>(buf.data());
}

Calibration Calibrate(double seconds, bool read_bandwidth) {
  Calibration c;
  c.threads = omp_get_max_threads();
  // A fixed amount of work per call, the same per thread at any thread
  // count: 2^21 rounds x 16 chains = 32M FMAs, ~4 ms at 2 zmm FMAs/cycle and
  // 4 GHz -- long against a thread wake-up, short against a time slice.
  constexpr int64_t kRounds = int64_t{1} << 21;
  c.fma_gflops_1t =
      BestRate([] { return RunFmaChains(kRounds, 1); }, seconds) / 1e9;
  c.fma_gflops_all =
      BestRate([&] { return RunFmaChains(kRounds, c.threads); }, seconds) / 1e9;
  if (!read_bandwidth) {
    c.read_gbps_all = std::nan("");
    return c;
  }
  size_t n = 0;
  const float* data = ReadBuffer(c.threads, &n);
  c.read_buffer_bytes = n * sizeof(float);
  c.read_gbps_all = BestRate(
                        [&] {
                          g_sink = SumFloats(data, n, c.threads);
                          return static_cast<double>(n * sizeof(float));
                        },
                        seconds) /
                    1e9;
  return c;
}

const Calibration& MachineCalibration(bool read_bandwidth) {
  static const Calibration c = Calibrate(0.3, read_bandwidth);
  return c;
}

std::string CalibrationSummary(const Calibration& c) {
  char read[128];
  if (std::isnan(c.read_gbps_all)) {
    std::snprintf(read, sizeof(read),
                  "not measured (no selected benchmark is memory-bound)");
  } else {
    std::snprintf(read, sizeof(read), "%.1f GB/s (%zu MiB buffer, %d threads)",
                  c.read_gbps_all, c.read_buffer_bytes >> 20, c.threads);
  }
  char buf[320];
  std::snprintf(buf, sizeof(buf),
                "FMA peak (%s, %d lanes, %d chains): %.1f GFLOPS on 1 thread, "
                "%.1f GFLOPS on %d threads; read bandwidth: %s",
                kIsa, kLanes, kChains, c.fma_gflops_1t, c.fma_gflops_all,
                c.threads, read);
  return buf;
}

}  // namespace attnkit::bench
