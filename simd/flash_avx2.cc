// AVX2 + FMA kernels; compiled with -march=x86-64-v3.
#define ATTNKIT_SIMD_NS avx2
#include "simd/flash_impl.h"

namespace attnkit::simd::internal {

const KernelOps& Avx2Ops() {
  return avx2::MakeOps<avx2::XVec<xsimd::fma3<xsimd::avx2>, false>>(Isa::kAvx2);
}

template <>
const KernelOps* SelectOps::operator()(xsimd::fma3<xsimd::avx2>) const {
  return &Avx2Ops();
}

}  // namespace attnkit::simd::internal
