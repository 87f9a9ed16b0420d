// Backend 2: attention through MLIR-compiled, JIT'd flash kernels.
#ifndef ATTNKIT_COMPILED_COMPILED_BACKEND_H_
#define ATTNKIT_COMPILED_COMPILED_BACKEND_H_

#include "compiled/jit.h"
#include "compiled/kernel_spec.h"
#include "runtime/backend.h"

#include <memory>

namespace attnkit::compiled {

/// The specialization a problem needs (lengths never enter it).
KernelSpec specFor(const AttentionProblem &p);

/// The process-wide kernel cache the backends share.
KernelCache &globalKernelCache();

std::unique_ptr<Backend> MakeCompiledBackend();

} // namespace attnkit::compiled

#endif // ATTNKIT_COMPILED_COMPILED_BACKEND_H_
