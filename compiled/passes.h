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

/// Markers the flash rewrite leaves on the loops and tile ops it creates, so
/// the vectorizer (vectorize_flash_pass.cc) can find the structure again.
inline constexpr const char *kFlashQueryLoopAttr = "attnkit.flash.query_loop";
inline constexpr const char *kFlashKvLoopAttr = "attnkit.flash.kv_loop";
inline constexpr const char *kFlashQkAttr = "attnkit.flash.qk";
inline constexpr const char *kFlashModifierAttr = "attnkit.flash.modifier";
inline constexpr const char *kFlashPvAttr = "attnkit.flash.pv";

/// `attnkit-flash-attention` (flash_attention_pass.cc).
std::unique_ptr<mlir::Pass>
createFlashAttentionPass(const FlashAttentionOptions &options = {});

/// `attnkit-vectorize-flash` (vectorize_flash_pass.cc).
std::unique_ptr<mlir::Pass> createVectorizeFlashPass();

/// `attnkit-approximate-math` (math_approximation_pass.cc).
std::unique_ptr<mlir::Pass> createApproximateMathPass();

/// Registers every attnkit pass and pipeline with the global registry (for
/// attnkit-opt and `--attnkit-...` command lines).
void registerCompiledPasses();

} // namespace attnkit::compiled

#endif // ATTNKIT_COMPILED_PASSES_H_
