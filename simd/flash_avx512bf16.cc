// AVX-512 kernels with vdpbf16ps for bf16 QK^T; compiled with
// -march=x86-64-v4 -mavx512bf16 (Zen 4, Cooper Lake, Sapphire Rapids).
#define ATTNKIT_SIMD_NS avx512bf16
#include "simd/flash_impl.h"

#if !defined(__AVX512BF16__)
#error "flash_avx512bf16.cc must be compiled with -mavx512bf16"
#endif

namespace attnkit::simd::internal {

const KernelOps& Avx512Bf16Ops() {
  return avx512bf16::MakeOps<avx512bf16::XVec<xsimd::avx512bw, true>>(
      Isa::kAvx512Bf16);
}

}  // namespace attnkit::simd::internal
