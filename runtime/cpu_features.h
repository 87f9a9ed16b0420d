// What the CPU this process runs on can execute, for the kernels that pick
// code by instruction set at run time (simd's dispatch, the compiled tier's
// kernel specs and ahead-of-time variants). One place reads CPUID.
#ifndef ATTNKIT_RUNTIME_CPU_FEATURES_H_
#define ATTNKIT_RUNTIME_CPU_FEATURES_H_

namespace attnkit {

/// AVX512_BF16 (vdpbf16ps, vcvtne2ps2bf16): CPUID.(EAX=7,ECX=1):EAX[5].
bool CpuHasAvx512Bf16();

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

}  // namespace attnkit

#endif  // ATTNKIT_RUNTIME_CPU_FEATURES_H_
