//===- flash_attention_pass.cc - naive attention -> FlashAttention --------===//
//
// `attnkit-flash-attention` recognizes the naive attention chain of six
// linalg.generic ops on tensors (what ir_builder.cc emits: scores, mask,
// softmax and P·V each materialized) and rewrites it into the FlashAttention
// form: a loop over query tiles, and inside it one scf.for over KV tiles
// carrying the running max, the running sum and the output accumulator (online
// softmax). Per KV tile there is exactly one QKᵀ, and no S×S tensor is left.
//
// Before (shapes: G query heads of one GQA group, M queries, N keys, D dims):
//
//   %s   = linalg.generic {QKᵀ}        ins(%q, %k)   -> tensor<Gx?x?xf32>
//   %s2  = linalg.generic {scale+mask} ins(%s)       -> tensor<Gx?x?xf32>
//   %m   = linalg.generic {max over j} ins(%s2)      -> tensor<Gx?xf32>
//   %e   = linalg.generic {exp(s - m)} ins(%s2, %m)  -> tensor<Gx?x?xf32>
//   %l   = linalg.generic {sum over j} ins(%e)       -> tensor<Gx?xf32>
//   %p   = linalg.generic {e / l}      ins(%e, %l)   -> tensor<Gx?x?xf32>
//   %o   = linalg.generic {P·V}        ins(%p, %v)   -> tensor<Gx?xDxf32>
//   %lse = linalg.generic {m + log l}  ins(%m, %l)   -> tensor<Gx?xf32>
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
//       %s2  = linalg.generic {scale2 + mask, indices offset by (i0, j0)}
//       %mt  = linalg.generic {max over j} ins(%s2)
//       %mn, %ms, %alpha = linalg.generic {max(m, mt); exp2(m - mn)} outs(%m)
//       %p   = linalg.generic {exp2(s2 - mn)}
//       %l'  = linalg.generic {sum over j} ins(%p) outs(l * alpha)
//       %a'  = linalg.generic {P·V} ins(%p, %v_tile) outs(acc * alpha)
//       scf.yield %mn, %l', %a'
//     }
//     %o_tile = acc * (1 / l)   (once per tile, 0 for a fully masked row)
//     %lse_tile = (m + log2 l) * ln 2
//     insert_slice both, scf.yield
//   }
//
// The score modifier (scale, bias, mask) is cloned from the naive op with its
// linalg.index ops offset, so any elementwise modifier is kept; the KV range
// is narrowed only when the mask is recognized as `j <= f(i)` / `j > g(i)`
// with f, g non-decreasing in i.
//
// Temporary tiles are `extract_slice`s of statically shaped alloc_tensor ops,
// so bufferization allocates fixed-size buffers that buffer-loop-hoisting
// moves out of the loops and promote-buffers-to-stack turns into allocas.
//
//===----------------------------------------------------------------------===//

#include "compiled/passes.h"

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

using utils::IteratorType;
constexpr IteratorType kPar = IteratorType::parallel;

template <typename OpTy> bool bodyHas(linalg::GenericOp op) {
  bool found = false;
  op.getBody()->walk([&](OpTy) { found = true; });
  return found;
}

unsigned numReductions(linalg::GenericOp op) {
  return op.getNumReductionLoops();
}

linalg::GenericOp producer(Value v) {
  return v.getDefiningOp<linalg::GenericOp>();
}

/// The matched naive chain.
struct AttentionChain {
  linalg::GenericOp qk, modifier, max, exp, sum, div, pv;
  linalg::GenericOp lse; // optional
};

std::optional<AttentionChain> matchChain(linalg::GenericOp pv) {
  AttentionChain c;
  c.pv = pv;
  if (pv.getNumLoops() != 4 || numReductions(pv) != 1 ||
      pv.getNumDpsInputs() != 2 || !bodyHas<arith::MulFOp>(pv))
    return std::nullopt;
  c.div = producer(pv.getDpsInputs()[0]);
  if (!c.div || numReductions(c.div) != 0 || c.div.getNumDpsInputs() != 2 ||
      !bodyHas<arith::DivFOp>(c.div))
    return std::nullopt;
  c.exp = producer(c.div.getDpsInputs()[0]);
  c.sum = producer(c.div.getDpsInputs()[1]);
  if (!c.exp || !c.sum || !bodyHas<math::ExpOp>(c.exp) ||
      c.exp.getNumDpsInputs() != 2 || numReductions(c.sum) != 1 ||
      c.sum.getNumDpsInputs() != 1 ||
      c.sum.getDpsInputs()[0] != c.exp->getResult(0) ||
      !bodyHas<arith::AddFOp>(c.sum))
    return std::nullopt;
  c.max = producer(c.exp.getDpsInputs()[1]);
  Value scores = c.exp.getDpsInputs()[0];
  if (!c.max || numReductions(c.max) != 1 || c.max.getNumDpsInputs() != 1 ||
      c.max.getDpsInputs()[0] != scores || !bodyHas<arith::MaximumFOp>(c.max))
    return std::nullopt;
  c.modifier = producer(scores);
  if (!c.modifier || numReductions(c.modifier) != 0 ||
      c.modifier.getNumLoops() != 3 || c.modifier.getNumDpsInputs() < 1 ||
      c.modifier.getNumDpsInputs() > 2)
    return std::nullopt;
  c.qk = producer(c.modifier.getDpsInputs()[0]);
  if (!c.qk || c.qk.getNumLoops() != 4 || numReductions(c.qk) != 1 ||
      c.qk.getNumDpsInputs() != 2)
    return std::nullopt;
  // The S×S intermediates must not escape the chain.
  auto onlyUsedBy = [](Value v, ArrayRef<Operation *> users) {
    return llvm::all_of(v.getUsers(), [&](Operation *u) {
      return llvm::is_contained(users, u);
    });
  };
  for (Operation *u : c.max->getResult(0).getUsers()) {
    auto g = dyn_cast<linalg::GenericOp>(u);
    if (g && g != c.exp && g.getNumDpsInputs() == 2 &&
        g.getDpsInputs()[0] == c.max->getResult(0) &&
        g.getDpsInputs()[1] == c.sum->getResult(0))
      c.lse = g;
  }
  SmallVector<Operation *> maxUsers{c.exp};
  SmallVector<Operation *> sumUsers{c.div};
  if (c.lse) {
    maxUsers.push_back(c.lse);
    sumUsers.push_back(c.lse);
  }
  if (!onlyUsedBy(c.qk->getResult(0), {c.modifier}) ||
      !onlyUsedBy(scores, {c.max, c.exp}) ||
      !onlyUsedBy(c.max->getResult(0), maxUsers) ||
      !onlyUsedBy(c.exp->getResult(0), {c.sum, c.div}) ||
      !onlyUsedBy(c.sum->getResult(0), sumUsers) ||
      !onlyUsedBy(c.div->getResult(0), {c.pv}))
    return std::nullopt;
  return c;
}

/// Re-materializes `v`, an index expression inside the modifier body built
/// from linalg.index 1 (the query row), values from above and +/- constants,
/// with the row replaced by `row`. Fails unless the row enters with a
/// positive sign (the bound is then non-decreasing in the row).
Value materializeBound(OpBuilder &b, Location loc, Value v, Value row,
                       Region &body, int sign = 1) {
  if (!body.isAncestor(v.getParentRegion()))
    return v; // defined above the generic
  Operation *def = v.getDefiningOp();
  if (!def)
    return {};
  if (auto idx = dyn_cast<linalg::IndexOp>(def))
    return (idx.getDim() == 1 && sign > 0) ? row : Value();
  if (auto cst = dyn_cast<arith::ConstantOp>(def))
    return arith::ConstantOp::create(b, loc, cst.getValue());
  if (auto add = dyn_cast<arith::AddIOp>(def)) {
    Value l = materializeBound(b, loc, add.getLhs(), row, body, sign);
    Value r = materializeBound(b, loc, add.getRhs(), row, body, sign);
    return (l && r) ? arith::AddIOp::create(b, loc, l, r).getResult() : Value();
  }
  if (auto sub = dyn_cast<arith::SubIOp>(def)) {
    Value l = materializeBound(b, loc, sub.getLhs(), row, body, sign);
    Value r = materializeBound(b, loc, sub.getRhs(), row, body, -sign);
    return (l && r) ? arith::SubIOp::create(b, loc, l, r).getResult() : Value();
  }
  return {};
}

/// Key bounds recognized in the modifier: keys kept are
/// `lowerExcl(i) < j <= upperIncl(i)`; either may be absent.
struct KeyBounds {
  SmallVector<arith::CmpIOp> upper, lower;
};

KeyBounds analyzeMask(linalg::GenericOp mod) {
  KeyBounds kb;
  auto isNegInf = [](Value v) {
    FloatAttr attr;
    return matchPattern(v, m_Constant(&attr)) && attr.getValue().isInfinity() &&
           attr.getValue().isNegative();
  };
  auto isKeyIndex = [](Value v) {
    auto idx = v.getDefiningOp<linalg::IndexOp>();
    return idx && idx.getDim() == 2;
  };
  mod.getBody()->walk([&](arith::SelectOp sel) {
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
  FlashRewriter(const AttentionChain &c, const FlashAttentionOptions &opts)
      : c_(c), opts_(opts), b_(OpBuilder(c_.pv.getOperation())),
        loc_(c_.pv.getLoc()) {}
  void rewrite();

private:
  AffineMap map(unsigned numDims, ArrayRef<unsigned> results) {
    SmallVector<AffineExpr> exprs;
    for (unsigned r : results)
      exprs.push_back(b_.getAffineDimExpr(r));
    return AffineMap::get(numDims, 0, exprs, b_.getContext());
  }
  Value cstF(OpBuilder &b, float v) {
    return arith::ConstantOp::create(b, loc_, b.getF32FloatAttr(v));
  }
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
    return linalg::FillOp::create(b, loc_, cstF(b, v), t).getResult(0);
  }
  Value genericOne(OpBuilder &b, ValueRange ins, ValueRange outs,
                   ArrayRef<AffineMap> maps, ArrayRef<IteratorType> its,
                   function_ref<void(OpBuilder &, Location, ValueRange)> fn) {
    return linalg::GenericOp::create(b, loc_, TypeRange{outs[0].getType()}, ins,
                                     outs, maps, its, fn)
        .getResult(0);
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
  static constexpr float kNegInf = -std::numeric_limits<float>::infinity();

  bool vTransposed();
  void foldLog2eIntoScale();
  scf::ForOp emitQueryLoop();
  void emitQueryTile(OpBuilder &b, Value i0, Value m, Value n,
                     ValueRange outerArgs);
  void emitKvTile(OpBuilder &b, const QueryTile &t, Value j0,
                  ValueRange running);
  MaxUpdate updateMax(OpBuilder &b, const QueryTile &t, Value s2, Value mOld);
  Value probabilities(OpBuilder &b, const QueryTile &t, Value bk, Value s2,
                      Value mSafe);
  void writeRows(OpBuilder &b, const QueryTile &t, Value mFin, Value lFin,
                 Value accFin, ValueRange outerArgs);
  void replaceChain(scf::ForOp outer);

  /// [G, rows] and [G, rows, keys] tiles of the query tile.
  Value rowTile(OpBuilder &b, const QueryTile &t) {
    return tile(b, {g_, opts_.queryTile}, {t.heads, t.rows});
  }
  Value scoreTile(OpBuilder &b, const QueryTile &t, Value bk) {
    return tile(b, {g_, opts_.queryTile, opts_.kvTile}, {t.heads, t.rows, bk});
  }
  SmallVector<AffineMap> rowMaps(unsigned nIn, unsigned nOut) {
    return SmallVector<AffineMap>(nIn + nOut, map(2, {0, 1}));
  }

  AttentionChain c_;
  const FlashAttentionOptions &opts_;
  IRRewriter b_;
  Location loc_;
  int64_t g_ = 0, d_ = 0;
  Value scale2_;    // scale * log2(e), when the scale multiply is recognized
  Value scaleOrig_; // the value it replaces
};

/// The cloned score modifier for one tile: indices offset to the tile, and
/// log2(e) folded into the scale (bias terms multiplied by log2(e)), so the
/// scores come out in the base-2 domain of exp2.
Value FlashRewriter::modifiedScores(OpBuilder &b, Value s, Value i0, Value j0,
                                    Value bq, Value bk) {
  SmallVector<Value> operands{s};
  if (c_.modifier.getNumDpsInputs() == 2) {
    Value bias = c_.modifier.getDpsInputs()[1];
    SmallVector<OpFoldResult> off{b.getIndexAttr(0), i0, j0};
    SmallVector<OpFoldResult> sz{b.getIndexAttr(g_), bq, bk};
    SmallVector<OpFoldResult> st(3, b.getIndexAttr(1));
    operands.push_back(
        tensor::ExtractSliceOp::create(b, loc_, bias, off, sz, st));
  }
  operands.push_back(tile(b, {g_, opts_.queryTile, opts_.kvTile},
                          {b.getIndexAttr(g_), bq, bk}));
  auto clone = cast<linalg::GenericOp>(mlir::clone(
      b, c_.modifier, TypeRange{operands.back().getType()}, operands));
  clone->setAttr(kFlashModifierAttr, b.getUnitAttr());
  IRRewriter rw(b);
  linalg::offsetIndices(rw, cast<linalg::LinalgOp>(clone.getOperation()),
                        {OpFoldResult(b.getIndexAttr(0)), i0, j0});

  Block *body = clone.getBody();
  const double log2e = 1.4426950408889634;
  bool folded = false;
  if (scale2_) {
    for (Operation &op : *body) {
      auto mul = dyn_cast<arith::MulFOp>(op);
      if (mul && mul.getLhs() == body->getArgument(0) &&
          mul.getRhs() == scaleOrig_) {
        mul.getRhsMutable().assign(scale2_);
        folded = true;
      }
    }
  }
  OpBuilder bb = OpBuilder::atBlockBegin(body);
  if (folded) {
    // Every other input (the bias) enters the score additively.
    for (unsigned a = 1; a < clone.getNumDpsInputs(); ++a) {
      BlockArgument arg = body->getArgument(a);
      Value l2e =
          arith::ConstantOp::create(bb, loc_, bb.getF32FloatAttr(log2e));
      Value scaled = arith::MulFOp::create(bb, loc_, arg, l2e);
      arg.replaceAllUsesExcept(scaled, scaled.getDefiningOp());
    }
  } else {
    auto yield = cast<linalg::YieldOp>(body->getTerminator());
    bb.setInsertionPoint(yield);
    Value l2e = arith::ConstantOp::create(bb, loc_, bb.getF32FloatAttr(log2e));
    Value scaled = arith::MulFOp::create(bb, loc_, yield->getOperand(0), l2e);
    yield->setOperand(0, scaled);
  }
  return clone->getResult(0);
}

/// [lo, hi): the keys any query of rows [i0, i0 + bq) may see.
std::pair<Value, Value> FlashRewriter::keyRange(OpBuilder &b, Value i0,
                                                Value bq, Value n) {
  Value zero = cstI(b, 0), one = cstI(b, 1);
  Value lo = zero, hi = n;
  KeyBounds kb = analyzeMask(c_.modifier);
  Region &body = c_.modifier.getRegion();
  Value lastRow = arith::SubIOp::create(
      b, loc_, arith::AddIOp::create(b, loc_, i0, bq), one);
  for (arith::CmpIOp cmp : kb.upper) {
    Value bound = materializeBound(b, loc_, cmp.getRhs(), lastRow, body);
    if (!bound)
      continue;
    if (cmp.getPredicate() == arith::CmpIPredicate::sle)
      bound = arith::AddIOp::create(b, loc_, bound, one);
    hi = arith::MinSIOp::create(b, loc_, hi, bound);
  }
  for (arith::CmpIOp cmp : kb.lower) {
    Value bound = materializeBound(b, loc_, cmp.getRhs(), i0, body);
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
  Value q = c_.qk.getDpsInputs()[0];
  auto qTy = cast<RankedTensorType>(q.getType());
  g_ = qTy.getDimSize(0);
  d_ = qTy.getDimSize(2);
  foldLog2eIntoScale();
  scf::ForOp outer = emitQueryLoop();
  replaceChain(outer);
}

void FlashRewriter::foldLog2eIntoScale() {
  // The modifier multiplies S by a value from above; do it once here.
  for (Operation &op : *c_.modifier.getBody()) {
    auto mul = dyn_cast<arith::MulFOp>(op);
    if (mul && mul.getLhs() == c_.modifier.getBody()->getArgument(0) &&
        !c_.modifier.getRegion().isAncestor(mul.getRhs().getParentRegion())) {
      scaleOrig_ = mul.getRhs();
      scale2_ = arith::MulFOp::create(
          b_, loc_, scaleOrig_,
          cstF(b_, static_cast<float>(1.4426950408889634)));
      break;
    }
  }
}

scf::ForOp FlashRewriter::emitQueryLoop() {
  Value q = c_.qk.getDpsInputs()[0], k = c_.qk.getDpsInputs()[1];
  Value v = c_.pv.getDpsInputs()[1];
  Type f32 = b_.getF32Type();
  Value m = tensor::DimOp::create(b_, loc_, q, 1);
  Value n = vTransposed() ? tensor::DimOp::create(b_, loc_, v, 1).getResult()
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
  outer->setAttr(kFlashQueryLoopAttr, b_.getUnitAttr());
  return outer;
}

bool FlashRewriter::vTransposed() {
  // V is transposed when its first index is the output's head_dim index.
  return c_.pv.getIndexingMapsArray()[1].getResult(0) ==
         c_.pv.getIndexingMapsArray()[2].getResult(2);
}

void FlashRewriter::emitQueryTile(OpBuilder &b, Value i0, Value m, Value n,
                                  ValueRange outerArgs) {
  Value q = c_.qk.getDpsInputs()[0];
  QueryTile t;
  t.i0 = i0;
  t.rows = arith::MinSIOp::create(b, loc_, cstI(b, opts_.queryTile),
                                  arith::SubIOp::create(b, loc_, m, i0));
  t.heads = b.getIndexAttr(g_);
  t.dim = b.getIndexAttr(d_);
  t.q = tensor::ExtractSliceOp::create(
      b, loc_, q,
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
  inner->setAttr(kFlashKvLoopAttr, b.getUnitAttr());
  writeRows(b, t, inner.getResult(0), inner.getResult(1), inner.getResult(2),
            outerArgs);
}

void FlashRewriter::emitKvTile(OpBuilder &b, const QueryTile &t, Value j0,
                               ValueRange running) {
  Value k = c_.qk.getDpsInputs()[1], v = c_.pv.getDpsInputs()[1];
  Value mOld = running[0], lOld = running[1], accOld = running[2];
  Value bk = arith::MinSIOp::create(b, loc_, cstI(b, opts_.kvTile),
                                    arith::SubIOp::create(b, loc_, t.hi, j0));
  SmallVector<OpFoldResult> ones2(2, b.getIndexAttr(1));
  Value kTile = tensor::ExtractSliceOp::create(
      b, loc_, k, ArrayRef<OpFoldResult>{j0, b.getIndexAttr(0)},
      ArrayRef<OpFoldResult>{bk, t.dim}, ones2);
  Value vTile =
      vTransposed()
          ? tensor::ExtractSliceOp::create(
                b, loc_, v, ArrayRef<OpFoldResult>{b.getIndexAttr(0), j0},
                ArrayRef<OpFoldResult>{t.dim, bk}, ones2)
                .getResult()
          : tensor::ExtractSliceOp::create(
                b, loc_, v, ArrayRef<OpFoldResult>{j0, b.getIndexAttr(0)},
                ArrayRef<OpFoldResult>{bk, t.dim}, ones2)
                .getResult();

  // The one QKᵀ of this tile, then the score modifier.
  Value sInit = fill(b, scoreTile(b, t, bk), 0.0f);
  Operation *qkOp = mlir::clone(b, c_.qk, TypeRange{sInit.getType()},
                                ValueRange{t.q, kTile, sInit});
  qkOp->setAttr(kFlashQkAttr, b.getUnitAttr());
  Value s2 = modifiedScores(b, qkOp->getResult(0), t.i0, j0, t.rows, bk);

  const MaxUpdate upd = updateMax(b, t, s2, mOld);
  Value p = probabilities(b, t, bk, s2, upd.safe);
  // l = l * alpha + rowsum(P); acc = acc * alpha + P·V.
  Value lScaled = genericOne(
      b, ValueRange{upd.alpha}, ValueRange{lOld}, rowMaps(1, 1), {kPar, kPar},
      [&](OpBuilder &b, Location loc, ValueRange a) {
        linalg::YieldOp::create(
            b, loc, arith::MulFOp::create(b, loc, a[1], a[0]).getResult());
      });
  Value lNew =
      mlir::clone(b, c_.sum, TypeRange{lOld.getType()}, ValueRange{p, lScaled})
          ->getResult(0);
  Value accScaled = genericOne(
      b, ValueRange{upd.alpha}, ValueRange{accOld},
      {map(3, {0, 1}), map(3, {0, 1, 2})}, {kPar, kPar, kPar},
      [&](OpBuilder &b, Location loc, ValueRange a) {
        linalg::YieldOp::create(
            b, loc, arith::MulFOp::create(b, loc, a[1], a[0]).getResult());
      });
  Operation *pvOp = mlir::clone(b, c_.pv, TypeRange{accOld.getType()},
                                ValueRange{p, vTile, accScaled});
  pvOp->setAttr(kFlashPvAttr, b.getUnitAttr());
  scf::YieldOp::create(b, loc_, ValueRange{upd.max, lNew, pvOp->getResult(0)});
}

FlashRewriter::MaxUpdate FlashRewriter::updateMax(OpBuilder &b,
                                                  const QueryTile &t, Value s2,
                                                  Value mOld) {
  // Row max of the tile, then the new running max, the safe max (0 while
  // the row has seen only -inf) and the rescale factor.
  Value mTile = mlir::clone(b, c_.max, TypeRange{mOld.getType()},
                            ValueRange{s2, fill(b, rowTile(b, t), kNegInf)})
                    ->getResult(0);
  Value safeInit = rowTile(b, t);
  Value alphaInit = rowTile(b, t);
  auto upd = linalg::GenericOp::create(
      b, loc_,
      TypeRange{mOld.getType(), safeInit.getType(), alphaInit.getType()},
      ValueRange{mTile}, ValueRange{mOld, safeInit, alphaInit}, rowMaps(1, 3),
      ArrayRef<IteratorType>{kPar, kPar},
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
  return genericOne(b, ValueRange{s2, mSafe}, ValueRange{scoreTile(b, t, bk)},
                    {map(3, {0, 1, 2}), map(3, {0, 1}), map(3, {0, 1, 2})},
                    {kPar, kPar, kPar},
                    [&](OpBuilder &b, Location loc, ValueRange a) {
                      linalg::YieldOp::create(
                          b, loc,
                          math::Exp2Op::create(
                              b, loc, arith::SubFOp::create(b, loc, a[0], a[1]))
                              .getResult());
                    });
}

void FlashRewriter::writeRows(OpBuilder &b, const QueryTile &t, Value mFin,
                              Value lFin, Value accFin, ValueRange outerArgs) {
  // 1/l once per row (0 for a fully masked row), then one multiply per
  // output element.
  Value inv = genericOne(
      b, ValueRange{lFin}, ValueRange{rowTile(b, t)}, rowMaps(1, 1),
      {kPar, kPar}, [&](OpBuilder &b, Location loc, ValueRange a) {
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
  Value oTile = genericOne(
      b, ValueRange{inv, accFin}, ValueRange{oDest},
      {map(3, {0, 1}), map(3, {0, 1, 2}), map(3, {0, 1, 2})},
      {kPar, kPar, kPar}, [&](OpBuilder &b, Location loc, ValueRange a) {
        linalg::YieldOp::create(
            b, loc, arith::MulFOp::create(b, loc, a[1], a[0]).getResult());
      });
  // LSE in natural log: (m + log2 l) * ln 2, -inf for an empty row.
  Value lseTile = genericOne(
      b, ValueRange{mFin, lFin}, ValueRange{lDest}, rowMaps(2, 1), {kPar, kPar},
      [&](OpBuilder &b, Location loc, ValueRange a) {
        Value zero = cstF(b, 0.0f);
        Value isZero = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ,
                                             a[1], zero);
        Value sum = arith::AddFOp::create(b, loc, a[0],
                                          math::Log2Op::create(b, loc, a[1]));
        Value nat =
            arith::MulFOp::create(b, loc, sum, cstF(b, 0.6931471805599453f));
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

void FlashRewriter::replaceChain(scf::ForOp outer) {
  b_.replaceAllUsesWith(c_.pv->getResult(0), outer.getResult(0));
  if (c_.lse)
    b_.replaceAllUsesWith(c_.lse->getResult(0), outer.getResult(1));
  for (Operation *op :
       {c_.lse.getOperation(), c_.pv.getOperation(), c_.div.getOperation(),
        c_.sum.getOperation(), c_.exp.getOperation(), c_.max.getOperation(),
        c_.modifier.getOperation(), c_.qk.getOperation()})
    if (op)
      b_.eraseOp(op);
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
    SmallVector<AttentionChain> chains;
    getOperation().walk([&](linalg::GenericOp op) {
      if (auto c = matchChain(op))
        chains.push_back(*c);
    });
    FlashAttentionOptions opts{queryTile, kvTile};
    for (const AttentionChain &c : chains)
      FlashRewriter(c, opts).rewrite();
    // The naive chain's inits (S×S tensor.empty, fills) are now dead; one
    // reverse sweep erases users before their operands.
    for (Operation &op : llvm::make_early_inc_range(
             llvm::reverse(getOperation().getBody().front())))
      if (isOpTriviallyDead(&op))
        op.erase();
  }
};

} // namespace

} // namespace attnkit::compiled
