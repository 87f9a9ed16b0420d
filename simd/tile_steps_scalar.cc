// The scalar kernels' building blocks for tests; compiled with
// -march=x86-64, as flash_scalar.cc.
#define ATTNKIT_SIMD_NS scalar
#include "simd/tile_steps.h"

namespace attnkit::simd::internal {

const KernelSteps& ScalarSteps() {
  return scalar::MakeSteps<scalar::SVec>(Isa::kScalar);
}

}  // namespace attnkit::simd::internal
