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
  // 1e9 bytes/s, `threads` threads; NaN when not measured (below).
  double read_gbps_all = 0;
  size_t read_buffer_bytes = 0;
};

// Measures for about `seconds` per figure (best of >= 5 trials); the read
// bandwidth only when `read_bandwidth` (it sums ReadBuffer(), whose first
// touch -- the kernel zeroing 1 GiB -- is most of a calibration's cost).
Calibration Calibrate(double seconds, bool read_bandwidth = true);

// The process-wide calibration the kernel benchmarks divide by. The first
// call measures (with or without the read bandwidth); later calls return
// that calibration whatever they pass.
const Calibration& MachineCalibration(bool read_bandwidth = true);

// Bytes of the read-bandwidth buffer: 8x the last-level cache, clamped to
// [256 MiB, 1 GiB], so the sum streams from DRAM, not from L3.
size_t ReadBufferBytes();

// The process's one read-bandwidth buffer: ReadBufferBytes() of 1.0f (*n
// floats), first touched by the static split SumFloats reads it with on
// `threads` threads. Built on first use; the calibration and every benchmark
// that sums it share it.
const float* ReadBuffer(int threads, size_t* n);

std::string CalibrationSummary(const Calibration& c);

}  // namespace attnkit::bench

#endif  // ATTNKIT_BENCH_CALIBRATION_H_
