// The linalg.generic ops attention is made of, built in one place (IREE's
// reduce<Op> / elementwise helpers): attnkit-decompose-attention builds the
// naive chain from them over whole S x S tensors, attnkit-flash-attention
// builds each KV tile from them, so the two forms cannot drift apart.
//
// Shapes: G query heads, M queries, N keys, D head_dim. Scores and
// probabilities are [G, M, N], row statistics [G, M], outputs [G, M, D].
#ifndef ATTNKIT_COMPILED_STRUCTURED_BUILDERS_H_
#define ATTNKIT_COMPILED_STRUCTURED_BUILDERS_H_

#include "compiled/attnkit_dialect.h"

#include "mlir/Dialect/Utils/StructuredOpsUtils.h"
#include "mlir/IR/AffineMap.h"
#include "mlir/IR/Builders.h"

#include <limits>

namespace attnkit::compiled::structured {

using BodyFn = mlir::function_ref<void(mlir::OpBuilder &, mlir::Location,
                                       mlir::ValueRange)>;

inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();
inline constexpr double kLog2e = 1.4426950408889634;
inline constexpr double kLn2 = 0.6931471805599453;

/// (d0..d{numDims-1}) -> (d{results}...).
mlir::AffineMap dims(mlir::MLIRContext *ctx, unsigned numDims,
                     llvm::ArrayRef<unsigned> results);
mlir::Value cstF(mlir::OpBuilder &b, mlir::Location loc, float v);
/// `x` converted to f32: bf16 widened, i8 (a quantized K/V, signed)
/// converted exactly by sitofp; f32 as is.
mlir::Value toF32(mlir::OpBuilder &b, mlir::Location loc, mlir::Value x);
/// A fill of `t` with `value`.
mlir::Value fill(mlir::OpBuilder &b, mlir::Location loc, mlir::Value t,
                 float value);
/// A one-result linalg.generic into `init`.
mlir::Value generic(mlir::OpBuilder &b, mlir::Location loc,
                    mlir::ValueRange ins, mlir::Value init,
                    llvm::ArrayRef<mlir::AffineMap> maps,
                    llvm::ArrayRef<mlir::utils::IteratorType> iterators,
                    BodyFn body);
/// Elementwise over `init`'s rank-r iteration space; every input indexed by
/// the identity map unless its rank is lower (a [G, M] row operand of a
/// [G, M, X] space is indexed by its first two dims).
mlir::Value elementwise(mlir::OpBuilder &b, mlir::Location loc,
                        mlir::ValueRange ins, mlir::Value init, BodyFn body);
/// [G, M] = reduce over the last dim of a [G, M, N] tensor into `init`
/// (already filled with the identity); `combine` gets (element, acc).
mlir::Value reduceRows(mlir::OpBuilder &b, mlir::Location loc, mlir::Value x,
                       mlir::Value init, BodyFn combine);
/// Row max (maximumf: NaN propagates) and row sum.
mlir::Value rowMax(mlir::OpBuilder &b, mlir::Location loc, mlir::Value x,
                   mlir::Value init);
mlir::Value rowSum(mlir::OpBuilder &b, mlir::Location loc, mlir::Value x,
                   mlir::Value init);

/// S[g,i,j] += Q[g,i,d] * K[j,d] (f32 accumulation; K shared by the group
/// through its indexing map).
mlir::Value qkT(mlir::OpBuilder &b, mlir::Location loc, mlir::Value q,
                mlir::Value k, mlir::Value init);
/// O[g,i,d] += P[g,i,j] * V[j,d] (V[d,j] when `vTransposed`), with V's
/// unit-stride dim innermost.
mlir::Value pv(mlir::OpBuilder &b, mlir::Location loc, mlir::Value p,
               mlir::Value v, mlir::Value init, bool vTransposed);

/// x[g,i,j] *= scale[j] in place (outs = `x`): a quantized K/V's per-key
/// scales on the integer dot products (k_scale) or on the probabilities
/// (v_scale), one multiply per score instead of a dequantized K/V row.
mlir::Value scaleKeys(mlir::OpBuilder &b, mlir::Location loc, mlir::Value x,
                      mlir::Value scale);

/// How the modifier's generic scales what it computes.
struct ModifierScaling {
  mlir::Value scale;          // multiplies Q.K^T
  bool log2eOnBias = false;   // bias * log2(e) (log2(e) folded into scale)
  bool log2eOnResult = false; // the modified score * log2(e)
};
/// The score modifier of `op` as a generic over `s` (and the bias tile) into
/// `init`: x = s * scale, then the op's region with i, j as linalg.index 1
/// and 2 (offset them with linalg::offsetIndices for a tile).
mlir::Value scoreModifier(mlir::OpBuilder &b, mlir::Location loc,
                          AttentionOp op, mlir::Value s, mlir::Value bias,
                          mlir::Value init, const ModifierScaling &scaling);
/// Whether the modified score is log2(e)-homogeneous in (x, bias): x and the
/// bias reach the yield only through addf/subf of such values and selects
/// whose other value is one of them or ±inf. Then scaling x and the bias by
/// log2(e) scales the result by it, so log2(e) folds into the scale.
bool modifierIsAdditive(AttentionOp op);

} // namespace attnkit::compiled::structured

#endif // ATTNKIT_COMPILED_STRUCTURED_BUILDERS_H_
