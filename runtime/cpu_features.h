// What the CPU this process runs on can execute, for the kernels that pick
// code by instruction set at run time (simd's dispatch, the compiled tier's
// kernel specs and ahead-of-time variants). One place reads CPUID.
#ifndef ATTNKIT_RUNTIME_CPU_FEATURES_H_
#define ATTNKIT_RUNTIME_CPU_FEATURES_H_

namespace attnkit {

/// AVX512_BF16 (vdpbf16ps, vcvtne2ps2bf16): CPUID.(EAX=7,ECX=1):EAX[5].
bool CpuHasAvx512Bf16();

}  // namespace attnkit

#endif  // ATTNKIT_RUNTIME_CPU_FEATURES_H_
