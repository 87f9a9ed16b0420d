#include "compiled/vectorize_match.h"

#include "compiled/attnkit_dialect.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Pass/Pass.h"

#include <limits>

using namespace mlir;

namespace attnkit::compiled::vectorize {

namespace {

Value bufferOf(Value tensor) {
  auto tt = tensor.getDefiningOp<bufferization::ToTensorOp>();
  return tt ? tt.getBuffer() : Value();
}

Value sliceSource(Value v) {
  auto slice = v.getDefiningOp<tensor::ExtractSliceOp>();
  return slice ? slice.getSource() : Value();
}

/// The modifier body can be re-emitted on vectors when it holds only
/// elementwise arith/math ops, linalg.index and affine.apply of sums and
/// constant products, and uses nothing from inside the old loops but their
/// induction variables.
bool modifierIsVectorizable(FlashLoop f) {
  Block *body = f.modifier.getBody();
  if (!body->getArgument(body->getNumArguments() - 1).use_empty())
    return false;
  for (Operation &op : body->without_terminator()) {
    if (op.getNumRegions() != 0 || op.getNumResults() != 1)
      return false;
    for (Value operand : op.getOperands()) {
      if (operand.getParentBlock() == body)
        continue;
      if (operand == f.outer.getInductionVar() ||
          operand == f.inner.getInductionVar())
        continue;
      if (f.outer->isAncestor(operand.getParentBlock()->getParentOp()) &&
          !matchPattern(operand, m_Constant()))
        return false;
    }
    if (isa<linalg::IndexOp, arith::ConstantOp>(op))
      continue;
    if (auto apply = dyn_cast<affine::AffineApplyOp>(op)) {
      bool ok = true;
      apply.getAffineMap().getResult(0).walk([&](AffineExpr e) {
        if (e.getKind() != AffineExprKind::Add &&
            e.getKind() != AffineExprKind::Mul &&
            e.getKind() != AffineExprKind::Constant &&
            e.getKind() != AffineExprKind::DimId &&
            e.getKind() != AffineExprKind::SymbolId)
          ok = false;
      });
      if (!ok)
        return false;
      continue;
    }
    StringRef dialect = op.getDialect()->getNamespace();
    if (dialect != "arith" && dialect != "math")
      return false;
  }
  return true;
}

/// Sets f.heads and f.all when the decode loop `f` sits in a headed
/// kernel's head loop and every memref it reads or writes is a headSlice of
/// that loop's head.
void matchHeads(FlashLoop &f) {
  auto loop = dyn_cast_or_null<scf::ForOp>(f.outer->getParentOp());
  if (!loop || !hasFlashRole(loop, FlashRole::HeadLoop) || f.bq % kLanes == 0 ||
      getConstantIntValue(loop.getLowerBound()) != 0 ||
      getConstantIntValue(loop.getStep()) != 1)
    return;
  Value h = loop.getInductionVar();
  auto source = [&](Value slice, Value &all) {
    if (!slice)
      return true;
    all = headSliceSource(slice, loop, h);
    return static_cast<bool>(all);
  };
  if (source(f.q, f.all.q) && source(f.k, f.all.k) && source(f.v, f.all.v) &&
      source(f.bias, f.all.bias) && source(f.kScale, f.all.kScale) &&
      source(f.vScale, f.all.vScale) && source(f.out, f.all.out) &&
      source(f.lse, f.all.lse))
    f.heads = loop;
}

} // namespace

std::optional<FlashLoop> matchFlashLoop(scf::ForOp outer) {
  FlashLoop f;
  f.outer = outer;
  for (Operation &op : *outer.getBody())
    if (hasFlashRole(&op, FlashRole::KvLoop))
      f.inner = dyn_cast<scf::ForOp>(op);
  if (!f.inner)
    return std::nullopt;
  linalg::GenericOp qk, pv, kScale, vScale;
  f.inner.getBody()->walk([&](linalg::GenericOp op) {
    if (hasFlashRole(op, FlashRole::Qk))
      qk = op;
    if (hasFlashRole(op, FlashRole::Pv))
      pv = op;
    if (hasFlashRole(op, FlashRole::Modifier))
      f.modifier = op;
    if (hasFlashRole(op, FlashRole::KeyScale))
      kScale = op;
    if (hasFlashRole(op, FlashRole::ValueScale))
      vScale = op;
  });
  if (!qk || !pv || !f.modifier || !kScale != !vScale)
    return std::nullopt;
  if (kScale) {
    f.kScale = bufferOf(sliceSource(kScale.getDpsInputs()[0]));
    f.vScale = bufferOf(sliceSource(vScale.getDpsInputs()[0]));
    if (!f.kScale || !f.vScale)
      return std::nullopt;
  }
  f.q = bufferOf(sliceSource(qk.getDpsInputs()[0]));
  f.k = bufferOf(sliceSource(qk.getDpsInputs()[1]));
  f.v = bufferOf(sliceSource(pv.getDpsInputs()[1]));
  if (!f.q || !f.k || !f.v)
    return std::nullopt;
  if (f.modifier.getNumDpsInputs() == 2) {
    f.bias = bufferOf(sliceSource(f.modifier.getDpsInputs()[1]));
    if (!f.bias)
      return std::nullopt;
  }
  AffineMap vMap = pv.getIndexingMapsArray()[1];
  AffineMap oMap = pv.getIndexingMapsArray()[2];
  f.vTransposed = vMap.getResult(0) == oMap.getResult(2);
  auto qTy = cast<MemRefType>(f.q.getType());
  f.g = qTy.getDimSize(0);
  f.d = qTy.getDimSize(2);
  auto bq = getConstantIntValue(outer.getStep());
  auto bk = getConstantIntValue(f.inner.getStep());
  if (!bq || !bk || *bk % kLanes != 0)
    return std::nullopt;
  f.bq = *bq;
  f.bk = *bk;
  for (unsigned r = 0; r < 2; ++r) {
    Value res = outer.getResult(r);
    if (!res.hasOneUse())
      return std::nullopt;
    auto mat = dyn_cast<bufferization::MaterializeInDestinationOp>(
        *res.getUsers().begin());
    if (!mat || !isa<BaseMemRefType>(mat.getDest().getType()))
      return std::nullopt;
    (r == 0 ? f.out : f.lse) = mat.getDest();
    f.materializations.push_back(mat);
  }
  if (!modifierIsVectorizable(f))
    return std::nullopt;
  matchHeads(f);
  return f;
}

} // namespace attnkit::compiled::vectorize
