// AVX-512 (F/CD/DQ/BW/VL) kernels; compiled with -march=x86-64-v4.
#define ATTNKIT_SIMD_NS avx512
#include "runtime/cpu_features.h"
#include "simd/flash_impl.h"

namespace attnkit::simd::internal {

const KernelOps& Avx512Ops() {
  return avx512::MakeOps<avx512::XVec<xsimd::avx512bw, false>>(Isa::kAvx512);
}

template <>
const KernelOps* SelectOps::operator()(xsimd::avx512bw) const {
  return CpuHasAvx512Bf16() ? &Avx512Bf16Ops() : &Avx512Ops();
}

}  // namespace attnkit::simd::internal
