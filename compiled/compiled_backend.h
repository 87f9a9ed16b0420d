// Backend 2: attention through MLIR-compiled, JIT'd flash kernels.
#ifndef ATTNKIT_COMPILED_COMPILED_BACKEND_H_
#define ATTNKIT_COMPILED_COMPILED_BACKEND_H_

#include "compiled/jit.h"
#include "compiled/kernel_spec.h"
#include "runtime/backend.h"
#include "runtime/cpu_features.h"

#include <memory>

namespace attnkit::compiled {

/// The specialization a problem needs (lengths never enter it, but for
/// readAhead). A bf16 problem's QKᵀ runs on vdpbf16ps when `bf16Dot` allows
/// it and this CPU has AVX512_BF16; by default where that instruction also
/// outruns f32 FMAs. A decode reads ahead (KernelSpec::readAhead) when its
/// K/V exceed `cacheBytes` (DecodeKvStreamsFromDram; the last-level cache by
/// default): f32 for a kernel of one kv head per call, f32 or bf16 for the
/// headed one.
KernelSpec specFor(const AttentionProblem &p, bool bf16Dot = CpuBf16DotPays(),
                   int64_t cacheBytes = LastLevelCacheBytes());
/// KV heads per call of a headed decode kernel (KernelSpec::headed): all of
/// them unless their per-head state would take more than 256 KiB of stack;
/// specFor picks the headed kernel only for bands of 2 or more.
int64_t headedBand(const AttentionProblem &p);

/// The process-wide kernel cache the backends share.
KernelCache &globalKernelCache();

struct CompiledBackendOptions {
  /// bf16 QKᵀ on vdpbf16ps where the CPU has it (specFor); false keeps the
  /// widened f32 FMAs. By default only where vdpbf16ps outruns the FMAs
  /// (CpuBf16DotPays: not on the Xeon of runtime/cpu_features.h, where the
  /// widened QKᵀ is the faster one); tests set it to run either path.
  bool bf16Dot = CpuBf16DotPays();
  /// specFor's cacheBytes: decodes whose K/V exceed it read their rows
  /// ahead (KernelSpec::readAhead). Tests set 1 to run those kernels on
  /// small shapes.
  int64_t readAheadAboveBytes = LastLevelCacheBytes();
};

std::unique_ptr<Backend> MakeCompiledBackend(CompiledBackendOptions options);
std::unique_ptr<Backend> MakeCompiledBackend();

} // namespace attnkit::compiled

#endif // ATTNKIT_COMPILED_COMPILED_BACKEND_H_
