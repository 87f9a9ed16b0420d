// Which ISAs' building blocks this CPU can run (as OpsFor in dispatch.cc).
#include "simd/kernel.h"

namespace attnkit::simd::internal {

const KernelSteps* StepsFor(Isa isa) {
  if (OpsFor(isa) == nullptr) return nullptr;
  switch (isa) {
    case Isa::kScalar:
      return &ScalarSteps();
    case Isa::kAvx2:
      return &Avx2Steps();
    case Isa::kAvx512:
      return &Avx512Steps();
    case Isa::kAvx512Bf16:
      return &Avx512Bf16Steps();
    case Isa::kAvx512Amx:
      return &Avx512AmxSteps();
  }
  return nullptr;
}

}  // namespace attnkit::simd::internal
