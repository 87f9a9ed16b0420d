// Kernels compiled ahead of time at build time (compiled/CMakeLists.txt:
// attnkit-compile --emit=llvm-ir | clang-22 -O3 -march=native -c), linked
// into the backend and found by the kernel cache before it JITs anything.
// Which ones: compiled/aot_kernels.inc, read here and by CMake.
#ifndef ATTNKIT_COMPILED_AOT_H_
#define ATTNKIT_COMPILED_AOT_H_

#include "compiled/kernel_spec.h"

#include <optional>
#include <span>
#include <string_view>

// The spec and the symbol of one line of aot_kernels.inc. The symbol only has
// to be unique and the same in attnkit-compile (which names the kernel) and
// aot_registry.cc (which takes its address); the kernel cache looks kernels up
// by spec.
#define ATTNKIT_AOT_SPEC(headDim_, dtype_, mask_, group_, queryTile_, dot_,    \
                         headed_, ra_)                                         \
  ::attnkit::compiled::KernelSpec {                                            \
    .headDim = headDim_, .elem = ::attnkit::DType::k##dtype_,                  \
    .mask = ::attnkit::MaskKind::k##mask_, .group = group_,                    \
    .queryTile = queryTile_, .bf16Dot = dot_ != 0, .headed = headed_ != 0,     \
    .readAhead = ra_ != 0                                                      \
  }
#define ATTNKIT_AOT_SYMBOL(headDim_, dtype_, mask_, group_, queryTile_, dot_,  \
                           headed_, ra_)                                       \
  attnkit_aot_d##headDim_##_##dtype_##_##mask_##_g##group_##_q##queryTile_##_dot##dot_##_h##headed_##_r##ra_
#define ATTNKIT_AOT_CAT_(a, b) a##b
#define ATTNKIT_AOT_CAT(a, b) ATTNKIT_AOT_CAT_(a, b)
#define ATTNKIT_AOT_STR_(x) #x
#define ATTNKIT_AOT_STR(x) ATTNKIT_AOT_STR_(x)

namespace attnkit::compiled {

/// One line of aot_kernels.inc.
struct AotListed {
  KernelSpec spec;
  const char *symbol; // the kernel's C interface is `_mlir_ciface_` + this
};

/// Every kernel listed, whether or not this build compiled them. A
/// bf16Dot kernel is in the list (and the build) whatever the build machine's
/// CPU; the kernel cache serves it only on a CPU with AVX512_BF16.
inline constexpr AotListed kAotKernelList[] = {
#define ATTNKIT_AOT_KERNEL(d, t, m, g, q, x, h, r)                             \
  {ATTNKIT_AOT_SPEC(d, t, m, g, q, x, h, r),                                   \
   ATTNKIT_AOT_STR(ATTNKIT_AOT_SYMBOL(d, t, m, g, q, x, h, r))},
#include "compiled/aot_kernels.inc"
#undef ATTNKIT_AOT_KERNEL
};

/// The symbol of `spec` if it is listed.
inline std::optional<std::string_view> aotSymbolFor(const KernelSpec &spec) {
  for (const AotListed &k : kAotKernelList)
    if (k.spec == spec)
      return k.symbol;
  return std::nullopt;
}

struct AotKernel {
  KernelSpec spec;
  void *entry; // the kernel's `_mlir_ciface_` entry point
};

/// Every AOT kernel of this build: kAotKernelList, or empty when
/// ATTNKIT_AOT_KERNELS is off. Defined in aot_registry.cc.
std::span<const AotKernel> aotKernels();

} // namespace attnkit::compiled

#endif // ATTNKIT_COMPILED_AOT_H_
