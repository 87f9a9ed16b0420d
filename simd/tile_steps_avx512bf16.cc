// The avx512bf16 kernels' building blocks for tests; compiled with
// -march=x86-64-v4 -mavx512bf16, as flash_avx512bf16.cc.
#define ATTNKIT_SIMD_NS avx512bf16
#include "simd/tile_steps.h"

#if !defined(__AVX512BF16__)
#error "tile_steps_avx512bf16.cc must be compiled with -mavx512bf16"
#endif

namespace attnkit::simd::internal {

const KernelSteps& Avx512Bf16Steps() {
  return avx512bf16::MakeSteps<avx512bf16::XVec<xsimd::avx512bw, true>>(
      Isa::kAvx512Bf16);
}

}  // namespace attnkit::simd::internal
