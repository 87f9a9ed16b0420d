#include "compiled/aot.h"

#if ATTNKIT_AOT_KERNELS_BUILT
// Only the addresses are taken; the real signature is AttentionFn (jit.h),
// HeadedAttentionFn for the headed ones.
extern "C" {
#define ATTNKIT_AOT_KERNEL(d, t, m, g, q, x, h, r)                             \
  void ATTNKIT_AOT_CAT(_mlir_ciface_,                                          \
                       ATTNKIT_AOT_SYMBOL(d, t, m, g, q, x, h, r))(void);
#include "compiled/aot_kernels.inc"
#undef ATTNKIT_AOT_KERNEL
}
#endif

namespace attnkit::compiled {

std::span<const AotKernel> aotKernels() {
#if ATTNKIT_AOT_KERNELS_BUILT
  static const AotKernel kernels[] = {
#define ATTNKIT_AOT_KERNEL(d, t, m, g, q, x, h, r)                             \
  {ATTNKIT_AOT_SPEC(d, t, m, g, q, x, h, r),                                   \
   reinterpret_cast<void *>(&ATTNKIT_AOT_CAT(                                  \
       _mlir_ciface_, ATTNKIT_AOT_SYMBOL(d, t, m, g, q, x, h, r)))},
#include "compiled/aot_kernels.inc"
#undef ATTNKIT_AOT_KERNEL
  };
  return kernels;
#else
  return {};
#endif
}

} // namespace attnkit::compiled
