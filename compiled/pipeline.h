// Lowering of the attention module stage by stage: naive Linalg -> flash form
// -> bufferized, loop/vector code -> LLVM dialect.
#ifndef ATTNKIT_COMPILED_PIPELINE_H_
#define ATTNKIT_COMPILED_PIPELINE_H_

#include "compiled/passes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LLVM.h"

#include <optional>
#include <string>

namespace attnkit::compiled {

enum class Stage { kNaive, kFused, kVectorized, kLLVM };

std::optional<Stage> parseStage(llvm::StringRef name);

struct PipelineOptions {
  FlashAttentionOptions flash;
  /// Print the IR after every pass to stderr (`--print-ir-after-all`).
  bool printIrAfterAll = false;
};

/// Lowers `module` (as built by buildNaiveAttention) to `stage`.
mlir::LogicalResult lowerToStage(mlir::ModuleOp module, Stage stage,
                                 const PipelineOptions &options = {});

/// Lowers a module from buildKvAppend to the LLVM dialect.
mlir::LogicalResult lowerAppendToLLVM(mlir::ModuleOp module);

} // namespace attnkit::compiled

#endif // ATTNKIT_COMPILED_PIPELINE_H_
