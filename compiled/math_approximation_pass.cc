//===- math_approximation_pass.cc - exp2/log2 as polynomials --------------===//
//
// `attnkit-approximate-math` rewrites math.exp2 / math.exp / math.log2 /
// math.log into upstream's polynomial approximations (arith ops only), so the
// softmax exponentials vectorize instead of calling libm one element at a
// time. Upstream has no exp2/log2 approximation: they go through exp/log.
//
// Before:
//   %p = math.exp2 %x : f32
// After:
//   %p = <range reduction, a degree-5 polynomial, exponent bit insertion>
//        (arith.mulf / arith.addf / arith.fptosi / arith.bitcast ...)
//
// The approximations are within a few ulp of libm and keep the special cases
// that softmax relies on: exp2(-inf) = 0 and NaN in, NaN out.
//
//===----------------------------------------------------------------------===//

#include "compiled/passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Math/Transforms/Approximation.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

using namespace mlir;

namespace attnkit::compiled {

#define GEN_PASS_DEF_APPROXIMATEMATH
#include "compiled/Passes.h.inc"

namespace {

/// A scalar or splat-vector f32 constant of type `t`.
Value floatConst(PatternRewriter &r, Location loc, Type t, double v) {
  FloatAttr attr = r.getFloatAttr(getElementTypeOrSelf(t), v);
  if (auto shaped = dyn_cast<ShapedType>(t))
    return arith::ConstantOp::create(r, loc,
                                     DenseElementsAttr::get(shaped, attr));
  return arith::ConstantOp::create(r, loc, attr);
}

/// exp2(x) = exp(x * ln 2): upstream approximates exp (whose own range
/// reduction multiplies by log2(e) again; two multiplies per element).
struct Exp2ToExp : OpRewritePattern<math::Exp2Op> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(math::Exp2Op op,
                                PatternRewriter &rewriter) const override {
    if (!getElementTypeOrSelf(op.getType()).isF32())
      return failure();
    Value ln2 =
        floatConst(rewriter, op.getLoc(), op.getType(), 0.6931471805599453);
    Value x =
        arith::MulFOp::create(rewriter, op.getLoc(), op.getOperand(), ln2);
    rewriter.replaceOpWithNewOp<math::ExpOp>(op, x);
    return success();
  }
};

/// log2(x) = log(x) * log2(e).
struct Log2ToLog : OpRewritePattern<math::Log2Op> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(math::Log2Op op,
                                PatternRewriter &rewriter) const override {
    if (!getElementTypeOrSelf(op.getType()).isF32())
      return failure();
    Value log = math::LogOp::create(rewriter, op.getLoc(), op.getOperand());
    Value l2e =
        floatConst(rewriter, op.getLoc(), op.getType(), 1.4426950408889634);
    rewriter.replaceOpWithNewOp<arith::MulFOp>(op, log, l2e);
    return success();
  }
};

class ApproximateMathPass
    : public impl::ApproximateMathBase<ApproximateMathPass> {
public:
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    auto wanted = [](StringRef name) {
      name.consume_front("math.");
      return name == "exp" || name == "log";
    };
    patterns.add<Exp2ToExp, Log2ToLog>(&getContext());
    populateMathF32ExpansionPatterns(patterns, wanted);
    populateMathPolynomialApproximationPatterns(patterns, wanted);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace

} // namespace attnkit::compiled
