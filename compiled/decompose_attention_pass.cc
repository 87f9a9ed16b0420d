//===- decompose_attention_pass.cc - attnkit.attention -> naive Linalg ----===//
//
// `attnkit-decompose-attention` replaces each attnkit.attention by the naive
// chain of the seed's first listing, every step a linalg.generic over whole
// tensors (the S x S scores materialized): Q.K^T, the score modifier, row
// max, exp, row sum, divide, P.V, and the log-sum-exp (an i8 K/V: the
// scores times k_scale before the modifier, P times v_scale before P.V).
// This is the `--emit=naive` stage, and the lowering of an attention op the
// flash rewrite did not take. Passes.td has the before/after.
//
//===----------------------------------------------------------------------===//

#include "compiled/passes.h"
#include "compiled/structured_builders.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/PatternMatch.h"

using namespace mlir;

namespace attnkit::compiled {

#define GEN_PASS_DEF_DECOMPOSEATTENTION
#include "compiled/Passes.h.inc"

namespace {

using namespace structured;

/// A fully masked row has max -inf; subtracting 0 instead keeps exp at 0.
Value safeMax(OpBuilder &b, Location loc, Value mv) {
  Value isNinf = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, mv,
                                       cstF(b, loc, kNegInf));
  return arith::SelectOp::create(b, loc, isNinf, cstF(b, loc, 0.0f), mv);
}

class Decomposer {
public:
  Decomposer(AttentionOp op) : op_(op), b_(op), loc_(op.getLoc()) {}

  void run() {
    Value scores = modifiedScores();
    Value mx = rowMax(b_, loc_, scores, filled({g_, m_}, kNegInf));
    Value e = exponentials(scores, mx);
    Value l = rowSum(b_, loc_, e, filled({g_, m_}, 0.0f));
    Value p = normalized(e, l);
    if (Value vScale = op_.getValueScale())
      p = scaleKeys(b_, loc_, p, vScale);
    Value o = pv(b_, loc_, p, op_.getValue(), filled({g_, m_, d_}, 0.0f),
                 op_.getVTransposed());
    b_.replaceOp(op_, ValueRange{o, logSumExp(mx, l)});
  }

private:
  Value empty(ArrayRef<OpFoldResult> sizes) {
    return tensor::EmptyOp::create(b_, loc_, sizes, b_.getF32Type());
  }
  Value filled(ArrayRef<OpFoldResult> sizes, float value) {
    return fill(b_, loc_, empty(sizes), value);
  }
  /// S' = modifier(Q.K^T [* k_scale] * scale [, bias]).
  Value modifiedScores() {
    g_ = b_.getIndexAttr(op_.groupSize());
    d_ = b_.getIndexAttr(op_.headDim());
    m_ = tensor::DimOp::create(b_, loc_, op_.getQuery(), 1).getResult();
    n_ = tensor::DimOp::create(b_, loc_, op_.getKey(), 0).getResult();
    Value s =
        qkT(b_, loc_, op_.getQuery(), op_.getKey(), filled({g_, m_, n_}, 0.0f));
    if (Value kScale = op_.getKeyScale())
      s = scaleKeys(b_, loc_, s, kScale);
    return scoreModifier(b_, loc_, op_, s, op_.getBias(), empty({g_, m_, n_}),
                         ModifierScaling{.scale = op_.getScale()});
  }
  /// E = exp(S' - M).
  Value exponentials(Value scores, Value mx) {
    return elementwise(
        b_, loc_, ValueRange{scores, mx}, empty({g_, m_, n_}),
        [](OpBuilder &b, Location loc, ValueRange a) {
          Value diff =
              arith::SubFOp::create(b, loc, a[0], safeMax(b, loc, a[1]));
          linalg::YieldOp::create(
              b, loc, math::ExpOp::create(b, loc, diff).getResult());
        });
  }
  /// P = E / L (0 for a fully masked row, where L = 0).
  Value normalized(Value e, Value l) {
    return elementwise(
        b_, loc_, ValueRange{e, l}, empty({g_, m_, n_}),
        [](OpBuilder &b, Location loc, ValueRange a) {
          Value zero = cstF(b, loc, 0.0f);
          Value isZero = arith::CmpFOp::create(
              b, loc, arith::CmpFPredicate::OEQ, a[1], zero);
          Value div = arith::DivFOp::create(b, loc, a[0], a[1]);
          linalg::YieldOp::create(
              b, loc,
              arith::SelectOp::create(b, loc, isZero, zero, div).getResult());
        });
  }
  /// LSE = M + log L (natural log; -inf for a fully masked row): split-KV
  /// merges partial results with it.
  Value logSumExp(Value mx, Value l) {
    return elementwise(
        b_, loc_, ValueRange{mx, l}, empty({g_, m_}),
        [](OpBuilder &b, Location loc, ValueRange a) {
          Value isZero = arith::CmpFOp::create(
              b, loc, arith::CmpFPredicate::OEQ, a[1], cstF(b, loc, 0.0f));
          Value val = arith::AddFOp::create(b, loc, safeMax(b, loc, a[0]),
                                            math::LogOp::create(b, loc, a[1]));
          linalg::YieldOp::create(b, loc,
                                  arith::SelectOp::create(b, loc, isZero,
                                                          cstF(b, loc, kNegInf),
                                                          val)
                                      .getResult());
        });
  }

  AttentionOp op_;
  IRRewriter b_;
  Location loc_;
  OpFoldResult g_, m_, n_, d_;
};

class DecomposeAttentionPass
    : public impl::DecomposeAttentionBase<DecomposeAttentionPass> {
public:
  void runOnOperation() override {
    SmallVector<AttentionOp> ops;
    getOperation().walk([&](AttentionOp op) { ops.push_back(op); });
    for (AttentionOp op : ops) {
      if (op.hasHeadDim()) {
        op.emitOpError("has a KV-head dimension: run attnkit-split-heads "
                       "first (it tiles the heads into single groups)");
        return signalPassFailure();
      }
      Decomposer(op).run();
    }
  }
};

} // namespace

} // namespace attnkit::compiled
