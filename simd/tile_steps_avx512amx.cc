// The avx512amx kernels' building blocks for tests; compiled with
// -march=x86-64-v4 -mamx-tile -mamx-bf16, as flash_avx512amx.cc.
#define ATTNKIT_SIMD_NS avx512amx
#include "simd/tile_steps.h"

#if !defined(__AMX_BF16__) || !defined(__AMX_TILE__)
#error "tile_steps_avx512amx.cc must be compiled with -mamx-tile -mamx-bf16"
#endif

namespace attnkit::simd::internal {

const KernelSteps& Avx512AmxSteps() {
  return avx512amx::MakeSteps<avx512amx::XVec<xsimd::avx512bw, false>>(
      Isa::kAvx512Amx);
}

}  // namespace attnkit::simd::internal
