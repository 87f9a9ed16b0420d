// The avx512 kernels' building blocks for tests; compiled with
// -march=x86-64-v4, as flash_avx512.cc.
#define ATTNKIT_SIMD_NS avx512
#include "simd/tile_steps.h"

namespace attnkit::simd::internal {

const KernelSteps& Avx512Steps() {
  return avx512::MakeSteps<avx512::XVec<xsimd::avx512bw, false>>(Isa::kAvx512);
}

}  // namespace attnkit::simd::internal
