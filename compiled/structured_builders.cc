#include "compiled/structured_builders.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"

using namespace mlir;

namespace attnkit::compiled::structured {

namespace {

using utils::IteratorType;
constexpr IteratorType kPar = IteratorType::parallel;
constexpr IteratorType kRed = IteratorType::reduction;

/// `reassoc,contract` lets LLVM vectorize the dot-product reductions and form
/// FMAs; it is NaN/Inf-safe (never `nnan`/`fast`: the max-reduce relies on
/// -inf and on NaN propagation).
arith::FastMathFlagsAttr matmulFlags(MLIRContext *ctx) {
  return arith::FastMathFlagsAttr::get(ctx, arith::FastMathFlags::reassoc |
                                                arith::FastMathFlags::contract);
}

void yield(OpBuilder &b, Location loc, Value v) {
  linalg::YieldOp::create(b, loc, ValueRange{v});
}

int64_t rankOf(Value v) { return cast<ShapedType>(v.getType()).getRank(); }

/// Multiply-accumulate body of the two contractions.
void multiplyAdd(OpBuilder &b, Location loc, ValueRange a) {
  auto flags = matmulFlags(b.getContext());
  Value prod = arith::MulFOp::create(b, loc, toF32(b, loc, a[0]),
                                     toF32(b, loc, a[1]), flags);
  yield(b, loc, arith::AddFOp::create(b, loc, a[2], prod, flags));
}

bool isInfinity(Value v) {
  FloatAttr attr;
  return matchPattern(v, m_Constant(&attr)) && attr.getValue().isInfinity();
}

} // namespace

AffineMap dims(MLIRContext *ctx, unsigned numDims, ArrayRef<unsigned> results) {
  SmallVector<AffineExpr> exprs;
  for (unsigned r : results)
    exprs.push_back(getAffineDimExpr(r, ctx));
  return AffineMap::get(numDims, 0, exprs, ctx);
}

Value cstF(OpBuilder &b, Location loc, float v) {
  return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(v));
}

Value toF32(OpBuilder &b, Location loc, Value x) {
  if (x.getType().isF32())
    return x;
  if (x.getType().isInteger())
    return arith::SIToFPOp::create(b, loc, b.getF32Type(), x);
  return arith::ExtFOp::create(b, loc, b.getF32Type(), x);
}

Value fill(OpBuilder &b, Location loc, Value t, float value) {
  return linalg::FillOp::create(b, loc, cstF(b, loc, value), t).getResult(0);
}

Value generic(OpBuilder &b, Location loc, ValueRange ins, Value init,
              ArrayRef<AffineMap> maps, ArrayRef<IteratorType> iterators,
              BodyFn body) {
  return linalg::GenericOp::create(b, loc, TypeRange{init.getType()}, ins,
                                   ValueRange{init}, maps, iterators, body)
      .getResult(0);
}

Value elementwise(OpBuilder &b, Location loc, ValueRange ins, Value init,
                  BodyFn body) {
  const auto rank = static_cast<unsigned>(rankOf(init));
  SmallVector<AffineMap> maps;
  for (Value in : ins)
    maps.push_back(rankOf(in) == rank
                       ? AffineMap::getMultiDimIdentityMap(rank, b.getContext())
                       : dims(b.getContext(), rank, {0, 1}));
  maps.push_back(AffineMap::getMultiDimIdentityMap(rank, b.getContext()));
  return generic(b, loc, ins, init, maps, SmallVector<IteratorType>(rank, kPar),
                 body);
}

Value reduceRows(OpBuilder &b, Location loc, Value x, Value init,
                 BodyFn combine) {
  MLIRContext *ctx = b.getContext();
  return generic(b, loc, ValueRange{x}, init,
                 {dims(ctx, 3, {0, 1, 2}), dims(ctx, 3, {0, 1})},
                 {kPar, kPar, kRed}, combine);
}

Value rowMax(OpBuilder &b, Location loc, Value x, Value init) {
  return reduceRows(
      b, loc, x, init, [](OpBuilder &b, Location loc, ValueRange a) {
        yield(b, loc, arith::MaximumFOp::create(b, loc, a[0], a[1]));
      });
}

Value rowSum(OpBuilder &b, Location loc, Value x, Value init) {
  return reduceRows(b, loc, x, init,
                    [](OpBuilder &b, Location loc, ValueRange a) {
                      yield(b, loc, arith::AddFOp::create(b, loc, a[1], a[0]));
                    });
}

Value qkT(OpBuilder &b, Location loc, Value q, Value k, Value init) {
  MLIRContext *ctx = b.getContext();
  return generic(
      b, loc, ValueRange{q, k}, init,
      {dims(ctx, 4, {0, 1, 3}), dims(ctx, 4, {2, 3}), dims(ctx, 4, {0, 1, 2})},
      {kPar, kPar, kPar, kRed}, multiplyAdd);
}

Value pv(OpBuilder &b, Location loc, Value p, Value v, Value init,
         bool vTransposed) {
  // Loop order (g,i,j,d) for V[j,d], (g,i,d,j) for V[d,j]: V's unit-stride
  // dim innermost.
  MLIRContext *ctx = b.getContext();
  if (vTransposed)
    return generic(b, loc, ValueRange{p, v}, init,
                   {dims(ctx, 4, {0, 1, 3}), dims(ctx, 4, {2, 3}),
                    dims(ctx, 4, {0, 1, 2})},
                   {kPar, kPar, kPar, kRed}, multiplyAdd);
  return generic(
      b, loc, ValueRange{p, v}, init,
      {dims(ctx, 4, {0, 1, 2}), dims(ctx, 4, {2, 3}), dims(ctx, 4, {0, 1, 3})},
      {kPar, kPar, kRed, kPar}, multiplyAdd);
}

Value scaleKeys(OpBuilder &b, Location loc, Value x, Value scale) {
  MLIRContext *ctx = b.getContext();
  return generic(b, loc, ValueRange{scale}, x,
                 {dims(ctx, 3, {2}), dims(ctx, 3, {0, 1, 2})},
                 {kPar, kPar, kPar},
                 [](OpBuilder &b, Location loc, ValueRange a) {
                   yield(b, loc, arith::MulFOp::create(b, loc, a[1], a[0]));
                 });
}

Value scoreModifier(OpBuilder &b, Location loc, AttentionOp op, Value s,
                    Value bias, Value init, const ModifierScaling &scaling) {
  SmallVector<Value> ins{s};
  if (bias)
    ins.push_back(bias);
  return elementwise(
      b, loc, ins, init, [&](OpBuilder &b, Location loc, ValueRange a) {
        IRMapping map;
        if (bias) {
          Value biasValue = a[1];
          if (scaling.log2eOnBias)
            biasValue = arith::MulFOp::create(
                b, loc, a[1], cstF(b, loc, static_cast<float>(kLog2e)));
          map.map(op.biasArg(), biasValue);
        }
        map.map(op.scoreArg(),
                arith::MulFOp::create(b, loc, a[0], scaling.scale).getResult());
        // The query and key indices appear where the region first uses
        // either, in the order (i, j).
        auto mapIndices = [&] {
          if (map.contains(op.queryIndexArg()))
            return;
          map.map(op.queryIndexArg(), linalg::IndexOp::create(b, loc, 1));
          map.map(op.keyIndexArg(), linalg::IndexOp::create(b, loc, 2));
        };
        for (Operation &inner : op.modifierBlock().without_terminator()) {
          if (llvm::any_of(inner.getOperands(), [&](Value v) {
                return v == op.queryIndexArg() || v == op.keyIndexArg();
              }))
            mapIndices();
          b.clone(inner, map);
        }
        Value result = map.lookupOrDefault(
            cast<YieldOp>(op.modifierBlock().back()).getValue());
        if (scaling.log2eOnResult)
          result = arith::MulFOp::create(
              b, loc, result, cstF(b, loc, static_cast<float>(kLog2e)));
        yield(b, loc, result);
      });
}

bool modifierIsAdditive(AttentionOp op) {
  llvm::SmallPtrSet<Value, 16> homogeneous{op.scoreArg()};
  if (op.getBias())
    homogeneous.insert(op.biasArg());
  auto isHomogeneous = [&](Value v) { return homogeneous.contains(v); };
  auto dependsOnScores = [&](Operation &inner) {
    return llvm::any_of(inner.getOperands(), isHomogeneous);
  };
  for (Operation &inner : op.modifierBlock().without_terminator()) {
    if (!dependsOnScores(inner))
      continue;
    bool ok = false;
    if (isa<arith::AddFOp, arith::SubFOp>(inner))
      ok = llvm::all_of(inner.getOperands(), isHomogeneous);
    if (auto sel = dyn_cast<arith::SelectOp>(inner))
      ok = !isHomogeneous(sel.getCondition()) &&
           (isHomogeneous(sel.getTrueValue()) ||
            isInfinity(sel.getTrueValue())) &&
           (isHomogeneous(sel.getFalseValue()) ||
            isInfinity(sel.getFalseValue()));
    if (!ok)
      return false;
    homogeneous.insert(inner.getResult(0));
  }
  return isHomogeneous(cast<YieldOp>(op.modifierBlock().back()).getValue());
}

} // namespace attnkit::compiled::structured
