// The avx2 kernels' building blocks for tests; compiled with
// -march=x86-64-v3, as flash_avx2.cc.
#define ATTNKIT_SIMD_NS avx2
#include "simd/tile_steps.h"

namespace attnkit::simd::internal {

const KernelSteps& Avx2Steps() {
  return avx2::MakeSteps<avx2::XVec<xsimd::fma3<xsimd::avx2>, false>>(
      Isa::kAvx2);
}

}  // namespace attnkit::simd::internal
