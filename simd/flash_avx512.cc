// AVX-512 (F/CD/DQ/BW/VL) kernels; compiled with -march=x86-64-v4.
#define ATTNKIT_SIMD_NS avx512
#include "runtime/cpu_features.h"
#include "simd/flash_impl.h"

namespace attnkit::simd::internal {

const KernelOps& Avx512Ops() {
  return avx512::MakeOps<avx512::XVec<xsimd::avx512bw, false>>(Isa::kAvx512);
}

// The avx512bf16 kernels differ only in taking bf16 QK^T through vdpbf16ps:
// chosen where that instruction outruns widening to f32 FMAs (on the Xeon of
// CpuBf16DotMacRatio it made a bf16 prefill 1.55x slower than f32).
// SimdOptions::isa still selects them on any CPU that has AVX512_BF16.
// Where AMX tiles are usable (CpuHasAmxBf16: Sapphire Rapids and later
// Xeons, whose vdpbf16ps does not pay) the avx512amx kernels, which differ
// from the avx512 ones only in the prefill path's bf16 QK^T.
template <>
const KernelOps* SelectOps::operator()(xsimd::avx512bw) const {
  if (CpuHasAmxBf16()) return &Avx512AmxOps();
  return CpuBf16DotPays() ? &Avx512Bf16Ops() : &Avx512Ops();
}

}  // namespace attnkit::simd::internal
