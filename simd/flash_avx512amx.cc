// AVX-512 kernels whose prefill path takes bf16 QK^T through AMX tiles
// (tdpbf16ps); compiled with -march=x86-64-v4 -mamx-tile -mamx-bf16 (Sapphire
// Rapids and later Xeons). Everything else is the avx512 kernels' code.
#define ATTNKIT_SIMD_NS avx512amx
#include "simd/flash_impl.h"

#if !defined(__AMX_BF16__) || !defined(__AMX_TILE__)
#error "flash_avx512amx.cc must be compiled with -mamx-tile -mamx-bf16"
#endif

namespace attnkit::simd::internal {

const KernelOps& Avx512AmxOps() {
  return avx512amx::MakeOps<avx512amx::XVec<xsimd::avx512bw, false>>(
      Isa::kAvx512Amx);
}

}  // namespace attnkit::simd::internal
