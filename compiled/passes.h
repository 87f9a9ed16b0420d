// The compiled tier's own passes. Each pass lives in its own file and is
// documented there with a before/after example.
#ifndef ATTNKIT_COMPILED_PASSES_H_
#define ATTNKIT_COMPILED_PASSES_H_

#include <cstdint>
#include <memory>

namespace mlir {
class Pass;
} // namespace mlir

namespace attnkit::compiled {

struct FlashAttentionOptions {
  /// Query rows per tile (per query head of the GQA group).
  int64_t queryTile = 16;
  /// Keys per tile of the online-softmax loop.
  int64_t kvTile = 64;
};

/// `attnkit-flash-attention` (flash_attention_pass.cc).
std::unique_ptr<mlir::Pass>
createFlashAttentionPass(const FlashAttentionOptions &options = {});

/// `attnkit-approximate-math` (math_approximation_pass.cc).
std::unique_ptr<mlir::Pass> createApproximateMathPass();

/// Registers every attnkit pass and pipeline with the global registry (for
/// attnkit-opt and `--attnkit-...` command lines).
void registerCompiledPasses();

} // namespace attnkit::compiled

#endif // ATTNKIT_COMPILED_PASSES_H_
