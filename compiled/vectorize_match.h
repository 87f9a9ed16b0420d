// attnkit-vectorize-flash, part 1: finding the fused form. A query-tile
// loop with the query_loop flash role from attnkit-flash-attention, its KV
// loop, tile ops and the memrefs its tensors came from (vectorize_flash_pass.cc
// has the pass and its documentation).
#ifndef ATTNKIT_COMPILED_VECTORIZE_MATCH_H_
#define ATTNKIT_COMPILED_VECTORIZE_MATCH_H_

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <optional>

namespace attnkit::compiled::vectorize {

namespace linalg = mlir::linalg;
namespace scf = mlir::scf;
using mlir::Operation;
using mlir::SmallVector;
using mlir::Value;

/// f32 lanes of a zmm register: the KV tile must be a multiple of it.
constexpr int64_t kLanes = 16;

/// What the vectorizer needs from one fused query-tile loop.
struct FlashLoop {
  scf::ForOp outer, inner;
  linalg::GenericOp modifier;
  // Memrefs; bias may be null, and the scales are null unless K/V are i8
  // (then kScale multiplies the integer dot products, vScale P after the
  // row sum).
  Value q, k, v, bias, kScale, vScale, out, lse;
  SmallVector<Operation *> materializations;
  bool vTransposed = false;
  int64_t g = 0, d = 0, bq = 0, bk = 0;
  /// A decode loop inside a headed kernel's head loop (head_loop role, from
  /// 0 in steps of 1, every memref above a headSlice of the loop's head):
  /// the loop, and the memrefs of all heads the slices come from. The
  /// emitter then walks the heads inside each KV tile (null: one head).
  scf::ForOp heads;
  struct {
    Value q, k, v, bias, kScale, vScale, out, lse;
  } all;
};

/// The fused form behind a query_loop-role loop, or nullopt when the loop
/// is not it (or its modifier uses something the emitter cannot re-emit on
/// vectors).
std::optional<FlashLoop> matchFlashLoop(mlir::scf::ForOp outer);

} // namespace attnkit::compiled::vectorize

#endif // ATTNKIT_COMPILED_VECTORIZE_MATCH_H_
