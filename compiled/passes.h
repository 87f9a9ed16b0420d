// The compiled tier's own passes, declared in Passes.td (summary, before and
// after, options and their defaults). Each pass lives in its own file.
#ifndef ATTNKIT_COMPILED_PASSES_H_
#define ATTNKIT_COMPILED_PASSES_H_

#include "compiled/kernel_spec.h"
#include "mlir/Pass/Pass.h"

#include <cstdint>
#include <memory>

namespace attnkit::compiled {

// FlashAttentionOptions {queryTile, kvTile}, createDecomposeAttention(),
// createFlashAttention(), createVectorizeFlash(), createApproximateMath()
// (Passes.td).
#define GEN_PASS_DECL
#include "compiled/Passes.h.inc"

/// registerAttnkitPasses(): every attnkit pass in the global registry, for
/// the tools' command lines (attnkit-opt). Called by tool mains only: the
/// lowering (pipeline.h) builds its pass managers from the create functions.
#define GEN_PASS_REGISTRATION
#include "compiled/Passes.h.inc"

} // namespace attnkit::compiled

#endif // ATTNKIT_COMPILED_PASSES_H_
