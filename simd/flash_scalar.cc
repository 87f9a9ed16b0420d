// The portable fallback; compiled with -march=x86-64 (baseline).
#define ATTNKIT_SIMD_NS scalar
#include "simd/flash_impl.h"

namespace attnkit::simd::internal {

const KernelOps& ScalarOps() {
  return scalar::MakeOps<scalar::SVec>(Isa::kScalar);
}

template <>
const KernelOps* SelectOps::operator()(ScalarArch) const {
  return &ScalarOps();
}

}  // namespace attnkit::simd::internal
