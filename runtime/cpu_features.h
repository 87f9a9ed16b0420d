// What the CPU this process runs on can execute, for the kernels that pick
// code by instruction set at run time (simd's dispatch, the compiled tier's
// kernel specs and ahead-of-time variants). One place reads CPUID.
#ifndef ATTNKIT_RUNTIME_CPU_FEATURES_H_
#define ATTNKIT_RUNTIME_CPU_FEATURES_H_

#include <cstdint>

namespace attnkit {

/// AVX512_BF16 (vdpbf16ps, vcvtne2ps2bf16): CPUID.(EAX=7,ECX=1):EAX[5].
bool CpuHasAvx512Bf16();

/// AMX with bf16 tiles usable by this process: AMX-TILE and AMX-BF16
/// (CPUID.(EAX=7,ECX=0):EDX[24] and [22]), the OS saving the tile state
/// (XCR0 bits 17 and 18), and Linux granting the tile data to the process
/// (arch_prctl ARCH_REQ_XCOMP_PERM, asked once per process on the first
/// call; without the grant the first tile instruction raises SIGILL). False
/// on CPUs without AMX (every AMD core to date) and where the kernel refuses.
bool CpuHasAmxBf16();

/// Multiply-adds per cycle of vdpbf16ps (two per lane) over those of f32
/// vfmadd (one per lane), measured once per process on 16 independent
/// chains of each (best of several short runs, ~0.1 ms in all); 0 without
/// AVX512_BF16. Having the instruction does not make it fast: Zen 4 runs
/// one zmm vdpbf16ps per cycle next to one zmm FMA (2.0), while the Xeon
/// (family 6, model 207) this was written on runs one every ~4 cycles next
/// to two FMAs per cycle (0.5), so its bf16 QK^T is faster widened to f32.
double CpuBf16DotMacRatio();

/// Whether QK^T of bf16 Q and K should take vdpbf16ps (the kernels' default
/// choice): AVX512_BF16 and a ratio above 1.25. The two cores measured so
/// far sit at 0.5 and 2.0, far from the threshold, so timing noise cannot
/// flip the choice between runs.
bool CpuBf16DotPays();

/// Bytes of the last-level data cache of the CPU this process starts on:
/// the highest-level data or unified cache in the kernel's
/// /sys/devices/system/cpu/cpu0/cache, else the C library's L3 (or L2)
/// figure; 0 when neither says. Read once per process. The kernel's figure
/// comes first because glibc's can be the whole host's: 384 MiB on a
/// 2-core Zen 5 guest whose kernel reports the 32 MiB it shares (GCC 12.2,
/// glibc 2.36, 2026-11-28). Decides whether a decode call's K/V can still
/// be cached from an earlier call (DecodeKvStreamsFromDram,
/// runtime/split_kv.h).
int64_t LastLevelCacheBytes();

/// Bytes of cache that only this process's cores use: cpu0's level-2
/// cache (sysfs, else the C library's figure) times the CPUs the process
/// may run on (its affinity mask) over the CPUs sharing that cache; 0 when
/// nothing says. Read once per process. What a call can count on finding
/// again in a later call: a shared last-level cache may be far larger
/// (300 MiB listed on a 2-core Xeon guest) and is everyone's. Decides
/// whether decode QK^T prefetches its K rows (DecodePrefetchesKeys,
/// runtime/split_kv.h).
int64_t PrivateCacheBytes();

/// Bytes of one core's L1 data cache (cpu0's level-1 data cache in sysfs,
/// else the C library's figure; 0 when neither says). Read once per
/// process. Sizes the simd prefill tile (PrefillTileKeysFor, simd/kernel.h).
int64_t L1DataCacheBytes();

}  // namespace attnkit

#endif  // ATTNKIT_RUNTIME_CPU_FEATURES_H_
