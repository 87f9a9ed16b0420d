//===- flash_attention_pass.cc - naive attention -> FlashAttention --------===//
//
// `attnkit-flash-attention` rewrites each attnkit.attention (AttnkitOps.td)
// into the FlashAttention form: a loop over query tiles, and inside it one
// scf.for over KV tiles carrying the running max, the running sum and the
// output accumulator (online softmax). Per KV tile there is exactly one QKᵀ,
// and no S×S tensor exists. The tile ops come from the same builders as the
// naive chain of attnkit-decompose-attention (structured_builders.h).
//
// Before (shapes: G query heads of one GQA group, M queries, N keys, D dims):
//
//   %o, %lse = attnkit.attention q(%q) k(%k) v(%v) scale(%scale) [bias(%b)]
//       -> tensor<Gx?xDxf32>, tensor<Gx?xf32> {
//   ^bb0(%i: index, %j: index, %x: f32 [, %bias: f32]):
//     <modifier: + bias, select(mask(i, j), x, -inf)>
//   }
//
// After:
//
//   %scale2 = arith.mulf %scale, log2(e)            // folded once
//   %r:2 = scf.for %i0 = 0 to M step BQ iter_args(%o, %lse) {
//     %lo, %hi = key range any query of this tile can see (causal / window:
//                the fully masked KV tiles are never visited)
//     %f:3 = scf.for %j0 = %lo to %hi step BK
//              iter_args(%m = -inf, %l = 0, %acc = 0) {
//       %s   = linalg.generic {QKᵀ}  ins(%q_tile, %k_tile)   // the only one
//      [%s   = linalg.generic {s * k_scale[j]} outs(%s)      // i8 K/V only]
//       %s2  = linalg.generic {scale2 + mask, indices offset by (i0, j0)}
//       %mt  = linalg.generic {max over j} ins(%s2)
//       %mn, %ms, %alpha = linalg.generic {max(m, mt); exp2(m - mn)} outs(%m)
//       %p   = linalg.generic {exp2(s2 - mn)}
//       %l'  = linalg.generic {sum over j} ins(%p) outs(l * alpha)
//      [%p   = linalg.generic {p * v_scale[j]} outs(%p)      // i8 K/V only]
//       %a'  = linalg.generic {P·V} ins(%p, %v_tile) outs(acc * alpha)
//       scf.yield %mn, %l', %a'
//     }
//     %o_tile = acc * (1 / l)   (once per tile, 0 for a fully masked row)
//     %lse_tile = (m + log2 l) * ln 2
//     insert_slice both, scf.yield
//   }
//
// The score modifier is the op's region inlined into a generic with its
// linalg.index ops offset to the tile, so any elementwise modifier is kept;
// the KV range is narrowed only when the mask is recognized as `j <= f(i)` /
// `j > g(i)` with f, g non-decreasing in i. The loops and the QKᵀ, modifier,
// P·V (and an i8 K/V's two scale) ops carry their attnkit.flash_role for
// attnkit-vectorize-flash.
//
// Temporary tiles are `extract_slice`s of statically shaped alloc_tensor ops,
// so bufferization allocates fixed-size buffers that buffer-loop-hoisting
// moves out of the loops and promote-buffers-to-stack turns into allocas.
//
//===----------------------------------------------------------------------===//

#include "compiled/passes.h"
#include "compiled/structured_builders.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Utils/Utils.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/StructuredOpsUtils.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Pass/Pass.h"

#include <cmath>
#include <limits>
#include <optional>

using namespace mlir;

namespace attnkit::compiled {

#define GEN_PASS_DEF_FLASHATTENTION
#include "compiled/Passes.h.inc"

namespace {

using namespace structured;

/// Re-materializes `v`, an index expression inside the modifier region built
/// from the query index, values from above and +/- constants, with the query
/// index replaced by `row`. Fails unless the row enters with a positive sign
/// (the bound is then non-decreasing in the row).
Value materializeBound(OpBuilder &b, Location loc, Value v, Value row,
                       AttentionOp op, int sign = 1) {
  if (!op.getModifier().isAncestor(v.getParentRegion()))
    return v; // defined above the op
  if (v == op.queryIndexArg())
    return sign > 0 ? row : Value();
  Operation *def = v.getDefiningOp();
  if (!def)
    return {};
  if (auto cst = dyn_cast<arith::ConstantOp>(def))
    return arith::ConstantOp::create(b, loc, cst.getValue());
  if (auto add = dyn_cast<arith::AddIOp>(def)) {
    Value l = materializeBound(b, loc, add.getLhs(), row, op, sign);
    Value r = materializeBound(b, loc, add.getRhs(), row, op, sign);
    return (l && r) ? arith::AddIOp::create(b, loc, l, r).getResult() : Value();
  }
  if (auto sub = dyn_cast<arith::SubIOp>(def)) {
    Value l = materializeBound(b, loc, sub.getLhs(), row, op, sign);
    Value r = materializeBound(b, loc, sub.getRhs(), row, op, -sign);
    return (l && r) ? arith::SubIOp::create(b, loc, l, r).getResult() : Value();
  }
  return {};
}

/// Key bounds recognized in the modifier: keys kept are
/// `lowerExcl(i) < j <= upperIncl(i)`; either may be absent.
struct KeyBounds {
  SmallVector<arith::CmpIOp> upper, lower;
};

KeyBounds analyzeMask(AttentionOp op) {
  KeyBounds kb;
  auto isNegInf = [](Value v) {
    FloatAttr attr;
    return matchPattern(v, m_Constant(&attr)) && attr.getValue().isInfinity() &&
           attr.getValue().isNegative();
  };
  auto isKeyIndex = [&](Value v) { return v == op.keyIndexArg(); };
  op.getModifier().walk([&](arith::SelectOp sel) {
    if (!isNegInf(sel.getFalseValue()))
      return;
    SmallVector<Value> conds{sel.getCondition()};
    while (!conds.empty()) {
      Value c = conds.pop_back_val();
      if (auto andOp = c.getDefiningOp<arith::AndIOp>()) {
        conds.push_back(andOp.getLhs());
        conds.push_back(andOp.getRhs());
        continue;
      }
      auto cmp = c.getDefiningOp<arith::CmpIOp>();
      if (!cmp || !isKeyIndex(cmp.getLhs()))
        continue;
      switch (cmp.getPredicate()) {
      case arith::CmpIPredicate::sle:
      case arith::CmpIPredicate::slt:
        kb.upper.push_back(cmp);
        break;
      case arith::CmpIPredicate::sgt:
      case arith::CmpIPredicate::sge:
        kb.lower.push_back(cmp);
        break;
      default:
        break;
      }
    }
  });
  return kb;
}

class FlashRewriter {
public:
  FlashRewriter(AttentionOp op, const FlashAttentionOptions &opts)
      : op_(op), opts_(opts), b_(OpBuilder(op.getOperation())),
        loc_(op.getLoc()) {}
  void rewrite();

private:
  AffineMap map(unsigned numDims, ArrayRef<unsigned> results) {
    return dims(b_.getContext(), numDims, results);
  }
  Value cstF(OpBuilder &b, float v) { return structured::cstF(b, loc_, v); }
  Value cstI(OpBuilder &b, int64_t v) {
    return arith::ConstantIndexOp::create(b, loc_, v);
  }
  /// A tile of dynamic `sizes` (static where the max is the full extent)
  /// carved out of a statically shaped tensor.empty.
  Value tile(OpBuilder &b, ArrayRef<int64_t> maxShape,
             ArrayRef<OpFoldResult> sizes) {
    // alloc_tensor, not tensor.empty: CSE must not merge two tiles into one
    // buffer, and canonicalization must not fold the slice into a dynamic
    // allocation.
    Value empty = bufferization::AllocTensorOp::create(
        b, loc_, RankedTensorType::get(maxShape, b.getF32Type()), ValueRange{});
    SmallVector<OpFoldResult> zeros(maxShape.size(), b.getIndexAttr(0));
    SmallVector<OpFoldResult> ones(maxShape.size(), b.getIndexAttr(1));
    return tensor::ExtractSliceOp::create(b, loc_, empty, zeros, sizes, ones);
  }
  Value fill(OpBuilder &b, Value t, float v) {
    return structured::fill(b, loc_, t, v);
  }
  /// The generic that defines `v`, marked with `role`.
  Value withRole(Value v, FlashRole role) {
    setFlashRole(v.getDefiningOp(), role);
    return v;
  }
  Value modifiedScores(OpBuilder &b, Value s, Value i0, Value j0, Value bq,
                       Value bk);
  std::pair<Value, Value> keyRange(OpBuilder &b, Value i0, Value bq, Value n);

  /// One query tile: rows [i0, i0 + rows) of the G heads, its Q slice and
  /// the end of its key range.
  struct QueryTile {
    Value i0, rows, q, hi;
    OpFoldResult heads, dim;
  };
  /// The online-softmax update of one KV tile: new running max, the max
  /// safe to subtract (0 for rows that saw only -inf) and the rescale.
  struct MaxUpdate {
    Value max, safe, alpha;
  };

  void foldLog2eIntoScale();
  scf::ForOp emitQueryLoop();
  void emitQueryTile(OpBuilder &b, Value i0, Value m, Value n,
                     ValueRange outerArgs);
  void emitKvTile(OpBuilder &b, const QueryTile &t, Value j0,
                  ValueRange running);
  MaxUpdate updateMax(OpBuilder &b, const QueryTile &t, Value s2, Value mOld);
  Value probabilities(OpBuilder &b, const QueryTile &t, Value bk, Value s2,
                      Value mSafe);
  /// x * alpha for every row of `x` ([G, rows] or [G, rows, D]).
  Value rescaled(OpBuilder &b, Value alpha, Value x);
  void writeRows(OpBuilder &b, const QueryTile &t, Value mFin, Value lFin,
                 Value accFin, ValueRange outerArgs);

  /// [G, rows] and [G, rows, keys] tiles of the query tile.
  Value rowTile(OpBuilder &b, const QueryTile &t) {
    return tile(b, {g_, opts_.queryTile}, {t.heads, t.rows});
  }
  Value scoreTile(OpBuilder &b, const QueryTile &t, Value bk) {
    return tile(b, {g_, opts_.queryTile, opts_.kvTile}, {t.heads, t.rows, bk});
  }

  AttentionOp op_;
  const FlashAttentionOptions &opts_;
  IRRewriter b_;
  Location loc_;
  int64_t g_ = 0, d_ = 0;
  ModifierScaling scaling_; // scale * log2(e), or log2(e) on the result
};

/// The score modifier for one tile, its indices offset to the tile, in the
/// base-2 domain of exp2 (log2(e) folded into the scale and the bias, or
/// applied to the result).
Value FlashRewriter::modifiedScores(OpBuilder &b, Value s, Value i0, Value j0,
                                    Value bq, Value bk) {
  Value biasTile;
  if (Value bias = op_.getBias()) {
    SmallVector<OpFoldResult> off{b.getIndexAttr(0), i0, j0};
    SmallVector<OpFoldResult> sz{b.getIndexAttr(g_), bq, bk};
    SmallVector<OpFoldResult> st(3, b.getIndexAttr(1));
    biasTile = tensor::ExtractSliceOp::create(b, loc_, bias, off, sz, st);
  }
  Value init = tile(b, {g_, opts_.queryTile, opts_.kvTile},
                    {b.getIndexAttr(g_), bq, bk});
  Value scores =
      withRole(scoreModifier(b, loc_, op_, s, biasTile, init, scaling_),
               FlashRole::Modifier);
  IRRewriter rw(b);
  linalg::offsetIndices(rw, cast<linalg::LinalgOp>(scores.getDefiningOp()),
                        {OpFoldResult(b.getIndexAttr(0)), i0, j0});
  return scores;
}

/// [lo, hi): the keys any query of rows [i0, i0 + bq) may see.
std::pair<Value, Value> FlashRewriter::keyRange(OpBuilder &b, Value i0,
                                                Value bq, Value n) {
  Value zero = cstI(b, 0), one = cstI(b, 1);
  Value lo = zero, hi = n;
  KeyBounds kb = analyzeMask(op_);
  // The upper bounds are those of the tile's last row; marked, so that the
  // vectorizer can evaluate them for a vector of rows of the tile instead.
  Value lastRow = arith::SubIOp::create(
      b, loc_, arith::AddIOp::create(b, loc_, i0, bq), one);
  if (!kb.upper.empty())
    setFlashRole(lastRow.getDefiningOp(), FlashRole::LastRow);
  for (arith::CmpIOp cmp : kb.upper) {
    Value bound = materializeBound(b, loc_, cmp.getRhs(), lastRow, op_);
    if (!bound)
      continue;
    if (cmp.getPredicate() == arith::CmpIPredicate::sle)
      bound = arith::AddIOp::create(b, loc_, bound, one);
    hi = arith::MinSIOp::create(b, loc_, hi, bound);
  }
  for (arith::CmpIOp cmp : kb.lower) {
    Value bound = materializeBound(b, loc_, cmp.getRhs(), i0, op_);
    if (!bound)
      continue;
    if (cmp.getPredicate() == arith::CmpIPredicate::sgt)
      bound = arith::AddIOp::create(b, loc_, bound, one);
    lo = arith::MaxSIOp::create(b, loc_, lo, bound);
  }
  hi = arith::MaxSIOp::create(b, loc_, hi, zero);
  return {lo, hi};
}

void FlashRewriter::rewrite() {
  g_ = op_.groupSize();
  d_ = op_.headDim();
  foldLog2eIntoScale();
  scf::ForOp outer = emitQueryLoop();
  b_.replaceOp(op_, outer.getResults());
}

void FlashRewriter::foldLog2eIntoScale() {
  // exp2 needs scores in log2 units. When the modifier is additive in the
  // score and the bias, multiplying the scale (once, here) and the bias by
  // log2(e) does it; otherwise each modified score is multiplied.
  if (modifierIsAdditive(op_)) {
    scaling_.scale = arith::MulFOp::create(
        b_, loc_, op_.getScale(), cstF(b_, static_cast<float>(kLog2e)));
    scaling_.log2eOnBias = true;
  } else {
    scaling_.scale = op_.getScale();
    scaling_.log2eOnResult = true;
  }
}

scf::ForOp FlashRewriter::emitQueryLoop() {
  Value q = op_.getQuery(), k = op_.getKey(), v = op_.getValue();
  Type f32 = b_.getF32Type();
  Value m = tensor::DimOp::create(b_, loc_, q, 1);
  Value n = op_.getVTransposed()
                ? tensor::DimOp::create(b_, loc_, v, 1).getResult()
                : tensor::DimOp::create(b_, loc_, k, 0).getResult();
  Value outInit = tensor::EmptyOp::create(
      b_, loc_,
      ArrayRef<OpFoldResult>{b_.getIndexAttr(g_), m, b_.getIndexAttr(d_)}, f32);
  Value lseInit = tensor::EmptyOp::create(
      b_, loc_, ArrayRef<OpFoldResult>{b_.getIndexAttr(g_), m}, f32);
  auto outer = scf::ForOp::create(
      b_, loc_, cstI(b_, 0), m, cstI(b_, opts_.queryTile),
      ValueRange{outInit, lseInit},
      [&](OpBuilder &b, Location loc, Value i0, ValueRange outerArgs) {
        emitQueryTile(b, i0, m, n, outerArgs);
      });
  setFlashRole(outer, FlashRole::QueryLoop);
  return outer;
}

void FlashRewriter::emitQueryTile(OpBuilder &b, Value i0, Value m, Value n,
                                  ValueRange outerArgs) {
  QueryTile t;
  t.i0 = i0;
  t.rows = arith::MinSIOp::create(b, loc_, cstI(b, opts_.queryTile),
                                  arith::SubIOp::create(b, loc_, m, i0));
  t.heads = b.getIndexAttr(g_);
  t.dim = b.getIndexAttr(d_);
  t.q = tensor::ExtractSliceOp::create(
      b, loc_, op_.getQuery(),
      ArrayRef<OpFoldResult>{b.getIndexAttr(0), i0, b.getIndexAttr(0)},
      ArrayRef<OpFoldResult>{t.heads, t.rows, t.dim},
      ArrayRef<OpFoldResult>(SmallVector<OpFoldResult>(3, b.getIndexAttr(1))));
  auto [lo, hi] = keyRange(b, i0, t.rows, n);
  t.hi = hi;
  Value mInit = fill(b, rowTile(b, t), kNegInf);
  Value lInit = fill(b, rowTile(b, t), 0.0f);
  Value accInit = fill(
      b, tile(b, {g_, opts_.queryTile, d_}, {t.heads, t.rows, t.dim}), 0.0f);
  auto inner = scf::ForOp::create(
      b, loc_, lo, hi, cstI(b, opts_.kvTile), ValueRange{mInit, lInit, accInit},
      [&](OpBuilder &b, Location loc, Value j0, ValueRange running) {
        emitKvTile(b, t, j0, running);
      });
  setFlashRole(inner, FlashRole::KvLoop);
  writeRows(b, t, inner.getResult(0), inner.getResult(1), inner.getResult(2),
            outerArgs);
}

void FlashRewriter::emitKvTile(OpBuilder &b, const QueryTile &t, Value j0,
                               ValueRange running) {
  Value k = op_.getKey(), v = op_.getValue();
  const bool vt = op_.getVTransposed();
  Value mOld = running[0], lOld = running[1], accOld = running[2];
  Value bk = arith::MinSIOp::create(b, loc_, cstI(b, opts_.kvTile),
                                    arith::SubIOp::create(b, loc_, t.hi, j0));
  SmallVector<OpFoldResult> ones2(2, b.getIndexAttr(1));
  auto rowsOf = [&](Value x, bool transposed) {
    SmallVector<OpFoldResult> off{j0, b.getIndexAttr(0)}, size{bk, t.dim};
    if (transposed) {
      std::swap(off[0], off[1]);
      std::swap(size[0], size[1]);
    }
    return tensor::ExtractSliceOp::create(b, loc_, x, off, size, ones2)
        .getResult();
  };
  Value kTile = rowsOf(k, false);
  Value vTile = rowsOf(v, vt);
  // An i8 K/V: the tile's keys' scales.
  auto scalesOf = [&](Value scales) {
    return tensor::ExtractSliceOp::create(
               b, loc_, scales, ArrayRef<OpFoldResult>{j0},
               ArrayRef<OpFoldResult>{bk},
               ArrayRef<OpFoldResult>{b.getIndexAttr(1)})
        .getResult();
  };

  // The one QKᵀ of this tile (of the integer rows, for i8: times the keys'
  // scales next), then the score modifier.
  Value sInit = fill(b, scoreTile(b, t, bk), 0.0f);
  Value s = withRole(qkT(b, loc_, t.q, kTile, sInit), FlashRole::Qk);
  if (Value kScale = op_.getKeyScale())
    s = withRole(scaleKeys(b, loc_, s, scalesOf(kScale)), FlashRole::KeyScale);
  Value s2 = modifiedScores(b, s, t.i0, j0, t.rows, bk);

  const MaxUpdate upd = updateMax(b, t, s2, mOld);
  Value p = probabilities(b, t, bk, s2, upd.safe);
  // l = l * alpha + rowsum(P); acc = acc * alpha + P·V, with P times the
  // values' scales (i8) after l took the row sum: the integer V rows then
  // give the dequantized values' weighted sum.
  Value lNew = rowSum(b, loc_, p, rescaled(b, upd.alpha, lOld));
  if (Value vScale = op_.getValueScale())
    p = withRole(scaleKeys(b, loc_, p, scalesOf(vScale)),
                 FlashRole::ValueScale);
  Value accNew = withRole(
      pv(b, loc_, p, vTile, rescaled(b, upd.alpha, accOld), vt), FlashRole::Pv);
  scf::YieldOp::create(b, loc_, ValueRange{upd.max, lNew, accNew});
}

Value FlashRewriter::rescaled(OpBuilder &b, Value alpha, Value x) {
  return elementwise(
      b, loc_, ValueRange{alpha}, x,
      [](OpBuilder &b, Location loc, ValueRange a) {
        linalg::YieldOp::create(
            b, loc, arith::MulFOp::create(b, loc, a[1], a[0]).getResult());
      });
}

FlashRewriter::MaxUpdate FlashRewriter::updateMax(OpBuilder &b,
                                                  const QueryTile &t, Value s2,
                                                  Value mOld) {
  // Row max of the tile, then the new running max, the safe max (0 while
  // the row has seen only -inf) and the rescale factor.
  Value mTile = rowMax(b, loc_, s2, fill(b, rowTile(b, t), kNegInf));
  Value safeInit = rowTile(b, t);
  Value alphaInit = rowTile(b, t);
  auto upd = linalg::GenericOp::create(
      b, loc_,
      TypeRange{mOld.getType(), safeInit.getType(), alphaInit.getType()},
      ValueRange{mTile}, ValueRange{mOld, safeInit, alphaInit},
      SmallVector<AffineMap>(4, map(2, {0, 1})),
      SmallVector<utils::IteratorType>(2, utils::IteratorType::parallel),
      [&](OpBuilder &b, Location loc, ValueRange a) {
        Value mn = arith::MaximumFOp::create(b, loc, a[1], a[0]);
        Value isNinf = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ,
                                             mn, cstF(b, kNegInf));
        Value ms = arith::SelectOp::create(b, loc, isNinf, cstF(b, 0.0f), mn);
        Value alpha = math::Exp2Op::create(
            b, loc, arith::SubFOp::create(b, loc, a[1], ms));
        linalg::YieldOp::create(b, loc, ValueRange{mn, ms, alpha});
      });
  return {upd.getResult(0), upd.getResult(1), upd.getResult(2)};
}

Value FlashRewriter::probabilities(OpBuilder &b, const QueryTile &t, Value bk,
                                   Value s2, Value mSafe) {
  // P = exp2(S' - m): scores already carry log2(e).
  return elementwise(
      b, loc_, ValueRange{s2, mSafe}, scoreTile(b, t, bk),
      [](OpBuilder &b, Location loc, ValueRange a) {
        linalg::YieldOp::create(
            b, loc,
            math::Exp2Op::create(b, loc,
                                 arith::SubFOp::create(b, loc, a[0], a[1]))
                .getResult());
      });
}

void FlashRewriter::writeRows(OpBuilder &b, const QueryTile &t, Value mFin,
                              Value lFin, Value accFin, ValueRange outerArgs) {
  // 1/l once per row (0 for a fully masked row), then one multiply per
  // output element.
  Value inv = elementwise(
      b, loc_, ValueRange{lFin}, rowTile(b, t),
      [&](OpBuilder &b, Location loc, ValueRange a) {
        Value zero = cstF(b, 0.0f);
        Value isZero = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ,
                                             a[0], zero);
        Value r = arith::DivFOp::create(b, loc, cstF(b, 1.0f), a[0]);
        linalg::YieldOp::create(
            b, loc,
            arith::SelectOp::create(b, loc, isZero, zero, r).getResult());
      });
  // Both results are written straight into slices of the outputs (no copy
  // out of the tile buffers).
  SmallVector<OpFoldResult> ones3(3, b.getIndexAttr(1)),
      ones2(2, b.getIndexAttr(1));
  SmallVector<OpFoldResult> oOff{b.getIndexAttr(0), t.i0, b.getIndexAttr(0)};
  SmallVector<OpFoldResult> oSize{t.heads, t.rows, t.dim};
  SmallVector<OpFoldResult> lOff{b.getIndexAttr(0), t.i0};
  SmallVector<OpFoldResult> lSize{t.heads, t.rows};
  Value oDest =
      tensor::ExtractSliceOp::create(b, loc_, outerArgs[0], oOff, oSize, ones3);
  Value lDest =
      tensor::ExtractSliceOp::create(b, loc_, outerArgs[1], lOff, lSize, ones2);
  Value oTile = elementwise(
      b, loc_, ValueRange{inv, accFin}, oDest,
      [](OpBuilder &b, Location loc, ValueRange a) {
        linalg::YieldOp::create(
            b, loc, arith::MulFOp::create(b, loc, a[1], a[0]).getResult());
      });
  // LSE in natural log: (m + log2 l) * ln 2, -inf for an empty row.
  Value lseTile = elementwise(
      b, loc_, ValueRange{mFin, lFin}, lDest,
      [&](OpBuilder &b, Location loc, ValueRange a) {
        Value zero = cstF(b, 0.0f);
        Value isZero = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ,
                                             a[1], zero);
        Value sum = arith::AddFOp::create(b, loc, a[0],
                                          math::Log2Op::create(b, loc, a[1]));
        Value nat = arith::MulFOp::create(b, loc, sum,
                                          cstF(b, static_cast<float>(kLn2)));
        linalg::YieldOp::create(
            b, loc,
            arith::SelectOp::create(b, loc, isZero, cstF(b, kNegInf), nat)
                .getResult());
      });
  Value outNew = tensor::InsertSliceOp::create(b, loc_, oTile, outerArgs[0],
                                               oOff, oSize, ones3);
  Value lseNew = tensor::InsertSliceOp::create(b, loc_, lseTile, outerArgs[1],
                                               lOff, lSize, ones2);
  scf::YieldOp::create(b, loc_, ValueRange{outNew, lseNew});
}

class FlashAttentionPass : public impl::FlashAttentionBase<FlashAttentionPass> {
public:
  using FlashAttentionBase::FlashAttentionBase;

  void runOnOperation() override {
    if (getOperation().isExternal())
      return;
    if (queryTile <= 0 || kvTile <= 0) {
      getOperation().emitError("tile sizes must be positive (query-tile=")
          << queryTile.getValue() << ", kv-tile=" << kvTile.getValue() << ")";
      return signalPassFailure();
    }
    SmallVector<AttentionOp> ops;
    // Ops with a KV-head dimension wait for attnkit-split-heads.
    getOperation().walk([&](AttentionOp op) {
      if (!op.hasHeadDim())
        ops.push_back(op);
    });
    FlashAttentionOptions opts{queryTile, kvTile};
    for (AttentionOp op : ops)
      FlashRewriter(op, opts).rewrite();
  }
};

} // namespace

} // namespace attnkit::compiled
