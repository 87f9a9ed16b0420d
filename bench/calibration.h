// Machine calibration: the FP32 FMA peak and the memory read bandwidth this
// machine actually delivers, measured in the same process as the kernels so
// every kernel figure can be stated as a fraction of it (pct_peak).
#ifndef ATTNKIT_BENCH_CALIBRATION_H_
#define ATTNKIT_BENCH_CALIBRATION_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace attnkit::bench {

// FMA lanes per instruction of the widest vector this build targets (16 with
// AVX-512, 8 with AVX2+FMA, 1 otherwise) and the ISA's name.
int FmaLanes();
const char* FmaIsaName();

// Runs `iterations` rounds of kFmaChains independent FMA chains on each of
// `threads` OpenMP threads. Returns the FLOPs executed (2 per lane per FMA).
double RunFmaChains(int64_t iterations, int threads);

// Sums `n` floats from `data` with `threads` OpenMP threads (static split, so
// each thread streams its own contiguous range). Returns the sum (keep it
// alive, or the compiler drops the loads).
float SumFloats(const float* data, size_t n, int threads);

struct Calibration {
  int threads = 1;            // OpenMP threads of the "all threads" figures
  double fma_gflops_1t = 0;   // one thread
  double fma_gflops_all = 0;  // `threads` threads
  double read_gbps_all = 0;   // 1e9 bytes/s, `threads` threads
  size_t read_buffer_bytes = 0;
};

// Measures for about `seconds` per figure (best of >= 5 trials).
Calibration Calibrate(double seconds);

// The process-wide calibration the kernel benchmarks divide by; measured on
// first use.
const Calibration& MachineCalibration();

// Bytes of the read-bandwidth buffer: 8x the last-level cache, clamped to
// [256 MiB, 1 GiB], so the sum streams from DRAM, not from L3.
size_t ReadBufferBytes();

std::string CalibrationSummary(const Calibration& c);

}  // namespace attnkit::bench

#endif  // ATTNKIT_BENCH_CALIBRATION_H_
