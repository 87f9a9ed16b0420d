//===- math_approximation_pass.cc - exp2/log2 as polynomials --------------===//
//
// `attnkit-approximate-math` rewrites math.exp2 / math.exp / math.log2 /
// math.log into polynomial approximations (arith ops only), so the softmax
// exponentials vectorize instead of calling libm one element at a time.
// exp2 is ours (Exp2Poly; exp goes through it; with the `avx512` option a
// 16-lane vector's takes Exp2Scalef, simd's formulation), log upstream's
// (log2 goes through it).
//
// Before:
//   %p = math.exp2 %x : f32
// After:
//   %p = <clamps, floor, a degree-6 polynomial, exponent bit insertion>
//        (arith.select / math.floor / math.fma / arith.fptosi / arith.bitcast)
//
// The approximations are within a few ulp of libm and keep the special cases
// that softmax relies on: exp2(-inf) = 0 and NaN in, NaN out.
//
//===----------------------------------------------------------------------===//

#include "compiled/passes.h"
#include "runtime/exp2_poly.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Math/Transforms/Approximation.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Dialect/X86Vector/X86VectorDialect.h"
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

/// A scalar or splat-vector i32 constant shaped like the f32 type `t`.
Value intConst(PatternRewriter &r, Location loc, Type t, int32_t v) {
  Type i32 = r.getI32Type();
  IntegerAttr attr = r.getI32IntegerAttr(v);
  if (auto shaped = dyn_cast<ShapedType>(t))
    return arith::ConstantOp::create(
        r, loc, DenseElementsAttr::get(shaped.clone(i32), attr));
  return arith::ConstantOp::create(r, loc, attr);
}

/// 2^f on [0, 1): degree 6, interpolating at the Chebyshev nodes
/// (coefficients rounded to f32; within 1.3 ulp of 2^f with f32 Horner).
constexpr double kExp2Poly[] = {1.0,
                                0.6931469440460205,
                                0.24023045599460602,
                                0.055480629205703735,
                                0.009684186428785324,
                                0.0012391331838443875,
                                0.00021865784947294742};

/// exp2(x) = 2^n * p(x - n), n = floor(x): ~13 vector instructions (two
/// clamps, vrndscaleps, a subtraction, 6 FMAs, the exponent's convert, add and
/// shift, a multiply) where upstream's exp after x * ln 2 took ~22. The
/// clamps keep NaN (x > lo ? x : lo is one vmaxps that passes x when it is
/// NaN). Below -127 the exponent field is 0 and the result exactly 0 -- so
/// exp2(-inf) = 0, which the softmax needs for masked keys and empty rows
/// (results under 2^-126 flush to 0); from 128 up it is +inf.
struct Exp2Poly : OpRewritePattern<math::Exp2Op> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(math::Exp2Op op,
                                PatternRewriter &rewriter) const override {
    Type t = op.getType();
    if (!getElementTypeOrSelf(t).isF32())
      return failure();
    Location loc = op.getLoc();
    auto clamp = [&](Value x, double bound, arith::CmpFPredicate keepBound) {
      Value b = floatConst(rewriter, loc, t, bound);
      Value useBound = arith::CmpFOp::create(rewriter, loc, keepBound, b, x);
      return arith::SelectOp::create(rewriter, loc, useBound, b, x);
    };
    Value x = clamp(op.getOperand(), -127.0, arith::CmpFPredicate::OGT);
    x = clamp(x, 128.0, arith::CmpFPredicate::OLT);
    Value n = math::FloorOp::create(rewriter, loc, x);
    Value f = arith::SubFOp::create(rewriter, loc, x, n);
    Value p = floatConst(rewriter, loc, t, kExp2Poly[6]);
    for (int i = 5; i >= 0; --i)
      p = math::FmaOp::create(rewriter, loc, p, f,
                              floatConst(rewriter, loc, t, kExp2Poly[i]));
    Type it = intConst(rewriter, loc, t, 0).getType();
    Value ni = arith::FPToSIOp::create(rewriter, loc, it, n);
    Value bits = arith::ShLIOp::create(
        rewriter, loc,
        arith::AddIOp::create(rewriter, loc, ni,
                              intConst(rewriter, loc, t, 127)),
        intConst(rewriter, loc, t, 23));
    Value scale = arith::BitcastOp::create(rewriter, loc, t, bits);
    rewriter.replaceOpWithNewOp<arith::MulFOp>(op, p, scale);
    return success();
  }
};

/// exp2 of a vector<16xf32> on AVX-512 (the pass's `avx512`), as simd's
/// Exp2 computes it: p(f) * 2^n in one vscalefps, f = x - round(x) in
/// [-0.5, 0.5] from one vreduceps and n = x - f (exact), p runtime/
/// exp2_poly.h's polynomial; lanes with x < -125.5 are zeroed by the
/// scalef's write mask (and f's), so no result is subnormal (an underflowing
/// vscalefps costs a microcode assist on Intel cores: simd/isa.h) and
/// exp2(-inf) = 0. NaN fails the "x < -125.5" test and stays NaN through
/// the reduction and the scalef; x >= 128 gives +inf. ~10 instructions
/// (compare, reduce, sub, 6 FMAs, scalef) against Exp2Poly's ~14: the clamp
/// to -127 and the exponent's convert, add, shift and multiply are the
/// scalef and its mask, and vreduceps takes one FMA-port slot where
/// math.roundeven's vrndscaleps takes two (simd/isa.h).
struct Exp2Scalef : OpRewritePattern<math::Exp2Op> {
  Exp2Scalef(MLIRContext *ctx) : OpRewritePattern(ctx, /*benefit=*/2) {}
  LogicalResult matchAndRewrite(math::Exp2Op op,
                                PatternRewriter &rewriter) const override {
    auto t = dyn_cast<VectorType>(op.getType());
    if (!t || t.isScalable() || t.getRank() != 1 || t.getShape()[0] != 16 ||
        !t.getElementType().isF32())
      return failure();
    Location loc = op.getLoc();
    Value x = op.getOperand();
    // Not (x < -125.5): unordered-or-greater-equal keeps the NaN lanes.
    Value keep = arith::CmpFOp::create(rewriter, loc, arith::CmpFPredicate::UGE,
                                       x, floatConst(rewriter, loc, t, -125.5));
    Value zero = floatConst(rewriter, loc, t, 0.0);
    auto i16 = VectorType::get({1}, rewriter.getI16Type());
    Value k = vector::ExtractOp::create(
        rewriter, loc, vector::BitCastOp::create(rewriter, loc, i16, keep),
        ArrayRef<int64_t>{0});
    auto i32 = [&](int32_t v) {
      return arith::ConstantOp::create(rewriter, loc,
                                       rewriter.getI32IntegerAttr(v));
    };
    // f = x - round(x) in the kept lanes, 0 in the others (reducing -inf
    // would be an invalid operation): vreduceps, which x86vector has no op
    // for. Its immediate 8: keep 0 fraction bits, round to nearest even,
    // suppress the precision exception; rounding 4: the current direction.
    Value f = LLVM::CallIntrinsicOp::create(
                  rewriter, loc, t,
                  rewriter.getStringAttr("llvm.x86.avx512.mask.reduce.ps.512"),
                  ValueRange{x, i32(8), zero, k, i32(4)})
                  .getResult(0);
    Value n = arith::SubFOp::create(rewriter, loc, x, f);
    Value p = floatConst(rewriter, loc, t, kExp2Nearest[0]);
    for (int i = 1; i < 6; ++i)
      p = math::FmaOp::create(rewriter, loc, p, f,
                              floatConst(rewriter, loc, t, kExp2Nearest[i]));
    p = math::FmaOp::create(rewriter, loc, p, f,
                            floatConst(rewriter, loc, t, 1.0));
    // _MM_FROUND_CUR_DIRECTION: scalef is exact unless it over- or underflows.
    Value rounding = i32(4);
    // MLIR 22 hands the op's operands to llvm.x86.avx512.mask.scalef.ps.512
    // in their order, whose signature is (a, b, passthru, k, rounding):
    // the op's `src` is the scaled value, `a` the exponents and `b` the
    // value of the masked-off lanes, whatever the op's names say
    // (compiled/test/exp2_values.mlir runs it).
    rewriter.replaceOpWithNewOp<x86vector::MaskScaleFOp>(
        op, /*src=*/p, /*a=*/n, /*b=*/zero, k, rounding);
    return success();
  }
};

/// exp(x) = exp2(x * log2(e)): one exponential approximation.
struct ExpToExp2 : OpRewritePattern<math::ExpOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(math::ExpOp op,
                                PatternRewriter &rewriter) const override {
    if (!getElementTypeOrSelf(op.getType()).isF32())
      return failure();
    Value l2e =
        floatConst(rewriter, op.getLoc(), op.getType(), 1.4426950408889634);
    Value x =
        arith::MulFOp::create(rewriter, op.getLoc(), op.getOperand(), l2e);
    rewriter.replaceOpWithNewOp<math::Exp2Op>(op, x);
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
  using impl::ApproximateMathBase<ApproximateMathPass>::ApproximateMathBase;
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    auto wanted = [](StringRef name) {
      name.consume_front("math.");
      return name == "log";
    };
    patterns.add<Exp2Poly, ExpToExp2, Log2ToLog>(&getContext());
    if (avx512)
      patterns.add<Exp2Scalef>(&getContext());
    populateMathF32ExpansionPatterns(patterns, wanted);
    populateMathPolynomialApproximationPatterns(patterns, wanted);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace

} // namespace attnkit::compiled
