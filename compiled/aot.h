// Kernels compiled ahead of time at build time (compiled/CMakeLists.txt:
// attnkit-compile --emit-llvm-ir | clang-22 -O3 -march=native -c), linked
// into the backend and found by the kernel cache before it JITs anything.
#ifndef ATTNKIT_COMPILED_AOT_H_
#define ATTNKIT_COMPILED_AOT_H_

#include <span>

namespace attnkit::compiled {

struct AotKernel {
  const char *key; // KernelSpec::key()
  void *entry;     // _mlir_ciface_attnkit_aot_<key>
};

/// Every AOT kernel of this build (empty when ATTNKIT_AOT_KERNELS is off).
/// Defined in the generated aot_registry.cc.
std::span<const AotKernel> aotKernels();

} // namespace attnkit::compiled

#endif // ATTNKIT_COMPILED_AOT_H_
