// Lowering of the attention module stage by stage: attnkit.attention -> naive
// Linalg (a dump) or flash form -> bufferized, loop/vector code -> LLVM
// dialect.
#ifndef ATTNKIT_COMPILED_PIPELINE_H_
#define ATTNKIT_COMPILED_PIPELINE_H_

#include "compiled/passes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LLVM.h"
#include "runtime/enum_table.h"

#include <optional>
#include <string>

namespace attnkit::compiled {

enum class Stage { kAttention, kHeads, kNaive, kFused, kVectorized, kLLVM };

/// The stages by name, as `attnkit-compile --emit=` spells them: the
/// attnkit.attention op as built, an attention block's loop over KV heads
/// (attnkit-split-heads; an attention alone has none), its naive Linalg
/// chain, its flash form, the
/// bufferized loop/vector code, the LLVM dialect.
inline constexpr auto kStageNames = MakeEnumTable<Stage>({
    {Stage::kAttention, "attention"},
    {Stage::kHeads, "heads"},
    {Stage::kNaive, "naive"},
    {Stage::kFused, "fused"},
    {Stage::kVectorized, "vectorized"},
    {Stage::kLLVM, "llvm"},
});
static_assert(kStageNames.RoundTrips());

struct PipelineOptions {
  FlashAttentionOptions flash;
  /// attnkit-vectorize-flash's options (bf16Dot: KernelSpec::bf16Dot).
  VectorizeFlashOptions vectorize;
  /// attnkit-approximate-math's options (avx512: hostHasAvx512Dq() for code
  /// that runs where it is compiled).
  ApproximateMathOptions math;
  /// Print the IR after every pass to stderr (`--print-ir-after-all`).
  bool printIrAfterAll = false;
};

/// Whether this machine's LLVM host features -- what the JIT generates code
/// for, and the AOT objects' -march=native -- include AVX-512F and DQ (the
/// AVX-512 exp2's vscalefps and vreduceps).
bool hostHasAvx512Dq();

/// Lowers `module` (as built by buildAttention or buildAttentionBlock) to
/// `stage`.
mlir::LogicalResult lowerToStage(mlir::ModuleOp module, Stage stage,
                                 const PipelineOptions &options = {});

/// Lowers a module from buildKvAppend to the LLVM dialect.
mlir::LogicalResult lowerAppendToLLVM(mlir::ModuleOp module);

/// Registers `attnkit-lower-to-llvm` (the stages after the flash rewrite as
/// one pipeline) for the tools' command lines; it names our passes, so the
/// tool registers them first (registerAttnkitPasses, passes.h).
void registerAttnkitPipelines();

} // namespace attnkit::compiled

#endif // ATTNKIT_COMPILED_PIPELINE_H_
