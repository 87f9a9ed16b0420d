//===- vectorize_flash_pass.cc - flash form -> AVX-512 kernels ------------===//
//
// `attnkit-vectorize-flash` takes the FlashAttention form that
// `attnkit-flash-attention` produces (a query-tile scf.for around the KV-tile
// scf.for, tile ops marked with attnkit.flash.* attributes) and replaces each
// query-tile loop by register-blocked vector-dialect code on the memrefs the
// tensors came from. What it keeps from the fused form: the query-tile loop
// bounds, the per-tile key range [lo, hi) (masked tiles stay skipped), the
// score modifier (scale, bias, mask — its body is re-emitted on vectors) and
// the tile sizes. Everything becomes vector<16xf32> work (AVX-512: 32 zmm
// registers; with 1 zmm FMA per cycle, 32 flop/cycle).
//
// Two micro-kernel families, chosen by the query tile:
//
// * prefill (query tile a multiple of 16). R = G*BQ rows. Q is packed
//   once per query tile as Qᵀ[D][R] (f32), so the QKᵀ inner loop broadcasts a
//   key element and FMAs contiguous Qᵀ rows: register block 4 keys x 64 rows
//   (16 accumulators, 4 loads + 4 broadcasts per 16 FMAs), no per-tile
//   transpose of K. Scores live as Sᵀ[BK][R]: the online softmax runs along
//   rows as plain vector ops (row max/sum are elementwise across keys, no
//   horizontal reductions). P·V: acc[R][D] += Pᵀ[j][r] (broadcast) x V[j][:]
//   (contiguous rows), register block 4 rows x 64 columns; for transposed V
//   the accumulator is accᵀ[D][R] and V[d][j] is broadcast instead.
//
// * decode (any other query tile; the backend uses 1). R = G*BQ is small, so
// the
//   kernel streams K rows at full vector width: s[r][j] = reduce(K[j][:] x
//   q[r][:]); the softmax runs along keys on S[R][BK]; P·V streams V rows
//   (or, transposed, reduces along Vᵀ rows with masked loads).
//
// Before (fused form, abbreviated):
//   %r:2 = scf.for %i0 = %c0 to %m step %c16 iter_args(%o, %lse)
//                  {attnkit.flash.query_loop} {
//     %lo, %hi = <key range>
//     %f:3 = scf.for %j0 = %lo to %hi step %c64 iter_args(...)
//                    {attnkit.flash.kv_loop} {
//       linalg.generic {attnkit.flash.qk} ...  linalg.generic
//       {attnkit.flash.modifier} ... linalg.generic {attnkit.flash.pv} ...
//     } ...
//   }
//   bufferization.materialize_in_destination %r#0 in %out
// After:
//   %qt = memref.alloca() : memref<DxRxf32>   (and the other tiles)
//   scf.for %i0 = %c0 to %m step %c16 {
//     <pack Qᵀ>  scf.for %j0 = %lo to %hi step %c64 {
//       <QKᵀ: scf.for over d carrying vector<16xf32> x 16, vector.fma>
//       <modifier + online softmax on vector<16xf32>>
//       <P·V: scf.for over keys carrying vector<16xf32> x 16, vector.fma>
//     }
//     <out = acc / l, lse = m + log l>
//   }
//
// A loop whose modifier uses something this pass cannot re-emit on vectors is
// left alone (the linalg path then lowers it).
//
//===----------------------------------------------------------------------===//

#include "compiled/passes.h"

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

namespace attnkit::compiled {

#define GEN_PASS_DEF_VECTORIZEFLASH
#include "compiled/Passes.h.inc"

namespace {

constexpr int64_t kLanes = 16; // f32 lanes of a zmm register
/// How far ahead (in keys) the decode kernel prefetches K and V rows: one
/// 64-key tile, so the next tile's lines are in flight during this one.
constexpr int64_t kPrefetchKeys = 64;

/// What the vectorizer needs from one fused query-tile loop.
struct FlashLoop {
  scf::ForOp outer, inner;
  linalg::GenericOp modifier;
  Value q, k, v, bias, out, lse; // memrefs (bias may be null)
  SmallVector<Operation *> materializations;
  bool vTransposed = false;
  int64_t g = 0, d = 0, bq = 0, bk = 0;
};

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

std::optional<FlashLoop> matchFlashLoop(scf::ForOp outer) {
  FlashLoop f;
  f.outer = outer;
  for (Operation &op : *outer.getBody())
    if (op.hasAttr(kFlashKvLoopAttr))
      f.inner = dyn_cast<scf::ForOp>(op);
  if (!f.inner)
    return std::nullopt;
  linalg::GenericOp qk, pv;
  f.inner.getBody()->walk([&](linalg::GenericOp op) {
    if (op->hasAttr(kFlashQkAttr))
      qk = op;
    if (op->hasAttr(kFlashPvAttr))
      pv = op;
    if (op->hasAttr(kFlashModifierAttr))
      f.modifier = op;
  });
  if (!qk || !pv || !f.modifier)
    return std::nullopt;
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
  return f;
}

/// Emits the vector code of one query-tile loop.
class Emitter {
public:
  Emitter(FlashLoop f, OpBuilder &b)
      : f_(f), b_(b), loc_(f.outer.getLoc()), f32_(b.getF32Type()) {}

  void emit();

private:
  // ---- small builders ------------------------------------------------------
  Value cI(int64_t v) { return arith::ConstantIndexOp::create(b_, loc_, v); }
  Value cF(float v) {
    return arith::ConstantOp::create(b_, loc_, b_.getF32FloatAttr(v));
  }
  VectorType vec(int64_t w, Type t = {}) {
    return VectorType::get({w}, t ? t : f32_);
  }
  Value splat(Value s, int64_t w) {
    return vector::BroadcastOp::create(b_, loc_, vec(w, s.getType()), s);
  }
  Value splatF(float v, int64_t w) {
    return arith::ConstantOp::create(
        b_, loc_, DenseElementsAttr::get(vec(w), b_.getF32FloatAttr(v)));
  }
  /// [base, base + 1, ..., base + w - 1] as vector<w x index>.
  Value iota(Value base, int64_t w) {
    SmallVector<APInt> vals;
    for (int64_t i = 0; i < w; ++i)
      vals.push_back(APInt(64, i));
    Value steps = arith::ConstantOp::create(
        b_, loc_,
        DenseElementsAttr::get(vec(w, b_.getIndexType()), ArrayRef(vals)));
    return arith::AddIOp::create(b_, loc_, steps, splat(base, w));
  }
  Value toF32(Value x) {
    if (getElementTypeOrSelf(x.getType()).isF32())
      return x;
    Type t = isa<VectorType>(x.getType())
                 ? Type(vec(cast<VectorType>(x.getType()).getDimSize(0)))
                 : f32_;
    return arith::ExtFOp::create(b_, loc_, t, x);
  }
  Type elemOf(Value mem) {
    return cast<MemRefType>(mem.getType()).getElementType();
  }
  Value loadV(Value mem, ValueRange idx, int64_t w) {
    return toF32(
        vector::LoadOp::create(b_, loc_, vec(w, elemOf(mem)), mem, idx));
  }
  Value loadMasked(Value mem, ValueRange idx, int64_t w, Value count) {
    Value mask = vector::CreateMaskOp::create(
        b_, loc_, VectorType::get({w}, b_.getI1Type()), ValueRange{count});
    Type et = elemOf(mem);
    Value pass = arith::ConstantOp::create(
        b_, loc_, DenseElementsAttr::get(vec(w, et), b_.getZeroAttr(et)));
    return toF32(vector::MaskedLoadOp::create(b_, loc_, vec(w, et), mem, idx,
                                              mask, pass));
  }
  Value loadS(Value mem, ValueRange idx) {
    return toF32(memref::LoadOp::create(b_, loc_, mem, idx));
  }
  void storeV(Value val, Value mem, ValueRange idx) {
    vector::StoreOp::create(b_, loc_, val, mem, idx);
  }
  void storeS(Value val, Value mem, ValueRange idx) {
    memref::StoreOp::create(b_, loc_, val, mem, idx);
  }
  /// Software prefetch (into L2) of every cache line of row `row` + the
  /// prefetch distance of a row-major [n][D] memref, clamped to row n - 1.
  void prefetchRow(Value mem, Value row) {
    Value n = memref::DimOp::create(b_, loc_, mem, 0);
    Value ahead = minI(add(row, cI(kPrefetchKeys)), sub(n, cI(1)));
    // Elements per 64-byte line: 16 f32 or 32 bf16.
    const int64_t perLine = elemOf(mem).isF32() ? 16 : 32;
    for (int64_t o = 0; o < f_.d; o += perLine)
      memref::PrefetchOp::create(b_, loc_, mem, ValueRange{ahead, cI(o)},
                                 /*isWrite=*/false, /*localityHint=*/2,
                                 /*isDataCache=*/true);
  }
  Value add(Value a, Value c) { return arith::AddIOp::create(b_, loc_, a, c); }
  Value sub(Value a, Value c) { return arith::SubIOp::create(b_, loc_, a, c); }
  Value mul(Value a, Value c) { return arith::MulIOp::create(b_, loc_, a, c); }
  Value minI(Value a, Value c) {
    return arith::MinSIOp::create(b_, loc_, a, c);
  }
  Value fma(Value a, Value x, Value acc) {
    return vector::FMAOp::create(b_, loc_, a, x, acc);
  }
  Value fmax(Value a, Value c) {
    return arith::MaximumFOp::create(b_, loc_, a, c);
  }
  Value fadd(Value a, Value c) { return arith::AddFOp::create(b_, loc_, a, c); }
  Value fsub(Value a, Value c) { return arith::SubFOp::create(b_, loc_, a, c); }
  Value fmul(Value a, Value c) { return arith::MulFOp::create(b_, loc_, a, c); }
  Value exp2(Value x) { return math::Exp2Op::create(b_, loc_, x); }
  Value reduce(vector::CombiningKind kind, Value v) {
    return vector::ReductionOp::create(b_, loc_, kind, v, /*acc=*/Value(),
                                       arith::FastMathFlags::reassoc |
                                           arith::FastMathFlags::contract);
  }
  Value tileBuffer(ArrayRef<int64_t> shape) {
    OpBuilder::InsertionGuard guard(b_);
    auto fn = f_.outer->getParentOfType<func::FuncOp>();
    b_.setInsertionPointToStart(&fn.getBody().front());
    auto op = memref::AllocaOp::create(b_, loc_, MemRefType::get(shape, f32_));
    op.setAlignment(64);
    return op;
  }

  /// scf.for whose body is produced by `body(iv, iterArgs) -> yielded`.
  SmallVector<Value>
  loop(Value lb, Value ub, Value step, ValueRange inits,
       function_ref<SmallVector<Value>(Value, ValueRange)> body) {
    auto forOp = scf::ForOp::create(
        b_, loc_, lb, ub, step, inits,
        [&](OpBuilder &nb, Location, Value iv, ValueRange args) {
          OpBuilder::InsertionGuard guard(b_);
          b_.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
          SmallVector<Value> ys = body(iv, args);
          scf::YieldOp::create(b_, loc_, ys);
        });
    return SmallVector<Value>(forOp.getResults());
  }
  void loop(Value lb, Value ub, Value step, function_ref<void(Value)> body) {
    loop(lb, ub, step, ValueRange{}, [&](Value iv, ValueRange) {
      body(iv);
      return SmallVector<Value>{};
    });
  }
  void ifThen(Value cond, function_ref<void()> body) {
    auto ifOp = scf::IfOp::create(b_, loc_, cond, /*withElse=*/false);
    OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(&ifOp.getThenRegion().front());
    body();
  }

  /// Static chunks [offset, width) covering `n`: full vectors, then one
  /// narrower vector for the tail (a static shape, no mask).
  static SmallVector<std::pair<int64_t, int64_t>> chunks(int64_t n) {
    SmallVector<std::pair<int64_t, int64_t>> c;
    for (int64_t o = 0; o < n; o += kLanes)
      c.push_back({o, std::min(kLanes, n - o)});
    return c;
  }

  // ---- the pieces ----------------------------------------------------------
  Value modifier(Value s, Value biasVal, Value gIdx, Value iIdx, Value jIdx,
                 Value i0, Value j0);
  Value expandAffine(AffineExpr e, ArrayRef<Value> dims, ArrayRef<Value> syms);
  Value unify(Value v, int64_t w);
  void initTile(Value rows);
  void pvRows(Value j0, Value bk, function_ref<Value(Value j, Value r)> pAt,
              Value r0, int64_t rows);
  void pvTransposedPrefill(Value j0, Value bk);
  void pvTransposedDecode(Value j0, Value bk);
  void softmaxRowUpdate(Value rowIdx, Value mt, int64_t w,
                        function_ref<Value(Value ms)> expSum);
  Value transposeReduce(SmallVector<Value> acc);
  void qkDecodeBlock(Value j0, Value bk, int64_t r0, int64_t rb);
  void epilogue(Value i0, Value bq);
  void emitPrefill(Value i0, Value bq, Value lo, Value hi);
  void emitDecode(Value i0, Value bq, Value lo, Value hi);

  FlashLoop f_;
  OpBuilder &b_;
  Location loc_;
  Type f32_;
  int64_t rows_ = 0; // R = G * BQ
  Value acc_, mrow_, lrow_, alpha_, scores_, qpack_;
  bool accTransposed_ = false;
  bool prefetchV_ = false; // decode kernel: pvRows prefetches V rows ahead
};

/// Broadcasts a scalar to vector<w x T> (w = 0: keep scalars).
Value Emitter::unify(Value v, int64_t w) {
  if (w == 0 || isa<VectorType>(v.getType()))
    return v;
  return splat(v, w);
}

Value Emitter::expandAffine(AffineExpr e, ArrayRef<Value> dims,
                            ArrayRef<Value> syms) {
  switch (e.getKind()) {
  case AffineExprKind::Constant:
    return cI(cast<AffineConstantExpr>(e).getValue());
  case AffineExprKind::DimId:
    return dims[cast<AffineDimExpr>(e).getPosition()];
  case AffineExprKind::SymbolId:
    return syms[cast<AffineSymbolExpr>(e).getPosition()];
  default: {
    auto bin = cast<AffineBinaryOpExpr>(e);
    Value l = expandAffine(bin.getLHS(), dims, syms);
    Value r = expandAffine(bin.getRHS(), dims, syms);
    int64_t w = 0;
    for (Value x : {l, r})
      if (auto vt = dyn_cast<VectorType>(x.getType()))
        w = vt.getDimSize(0);
    l = unify(l, w);
    r = unify(r, w);
    return e.getKind() == AffineExprKind::Add ? add(l, r) : mul(l, r);
  }
  }
}

/// Re-emits the score modifier of the fused form on `s` (a vector, or
/// scalar): linalg.index 0/1/2 become the tile-local (g, i, j) given here
/// (scalars or index vectors), the old loops' induction variables become i0
/// and j0, and scalar operands meet vector ones through broadcasts.
Value Emitter::modifier(Value s, Value biasVal, Value gIdx, Value iIdx,
                        Value jIdx, Value i0, Value j0) {
  Block *body = f_.modifier.getBody();
  IRMapping map;
  map.map(body->getArgument(0), s);
  if (biasVal)
    map.map(body->getArgument(1), biasVal);
  map.map(f_.outer.getInductionVar(), i0);
  map.map(f_.inner.getInductionVar(), j0);
  auto lookup = [&](Value v) {
    if (Value m = map.lookupOrNull(v))
      return m;
    // Constants the fused form hoisted into the (now replaced) loops.
    if (f_.outer->isAncestor(v.getParentBlock()->getParentOp())) {
      Value c = b_.clone(*v.getDefiningOp())->getResult(0);
      map.map(v, c);
      return c;
    }
    return v;
  };
  for (Operation &op : body->without_terminator()) {
    Value res;
    if (auto idx = dyn_cast<linalg::IndexOp>(op)) {
      res = idx.getDim() == 0 ? gIdx : idx.getDim() == 1 ? iIdx : jIdx;
    } else if (auto apply = dyn_cast<affine::AffineApplyOp>(op)) {
      AffineMap m = apply.getAffineMap();
      SmallVector<Value> dims, syms;
      for (unsigned a = 0; a < m.getNumDims(); ++a)
        dims.push_back(lookup(apply.getOperand(a)));
      for (unsigned a = 0; a < m.getNumSymbols(); ++a)
        syms.push_back(lookup(apply.getOperand(m.getNumDims() + a)));
      res = expandAffine(m.getResult(0), dims, syms);
    } else if (isa<arith::ConstantOp>(op)) {
      res = b_.clone(op)->getResult(0);
    } else {
      SmallVector<Value> operands;
      int64_t w = 0;
      for (Value o : op.getOperands()) {
        operands.push_back(lookup(o));
        if (auto vt = dyn_cast<VectorType>(operands.back().getType()))
          w = vt.getDimSize(0);
      }
      for (Value &o : operands)
        o = unify(o, w);
      Type rt = op.getResult(0).getType();
      if (w)
        rt = vec(w, rt);
      OperationState st(loc_, op.getName().getStringRef(), operands, {rt},
                        op.getAttrs());
      res = b_.create(st)->getResult(0);
    }
    map.map(op.getResult(0), res);
  }
  Value y = lookup(body->getTerminator()->getOperand(0));
  if (auto vt = dyn_cast<VectorType>(s.getType()))
    y = unify(y, vt.getDimSize(0));
  return y;
}

/// m = -inf, l = 0, acc = 0 for every row of the tile.
void Emitter::initTile(Value) {
  Value zero = cI(0), one = cI(1);
  loop(zero, cI(rows_), one, [&](Value r) {
    storeS(cF(-std::numeric_limits<float>::infinity()), mrow_, {r});
    storeS(cF(0.0f), lrow_, {r});
  });
  if (accTransposed_) {
    loop(zero, cI(f_.d), one, [&](Value dd) {
      for (int64_t o = 0; o < rows_; o += kLanes)
        storeV(splatF(0.0f, kLanes), acc_, {dd, cI(o)});
    });
  } else {
    loop(zero, cI(rows_), one, [&](Value r) {
      for (auto [o, w] : chunks(f_.d))
        storeV(splatF(0.0f, w), acc_, {r, cI(o)});
    });
  }
}

/// acc[r0 .. r0+rows)[:] = acc * alpha[r] + sum_{j < bk} pAt(j, r) * V[j0+j][:]
/// (V rows contiguous). Register blocks of `rows` x up to 16/rows vectors;
/// r0 is a run-time row (the caller loops over row blocks).
void Emitter::pvRows(Value j0, Value bk,
                     function_ref<Value(Value j, Value r)> pAt, Value r0,
                     int64_t rows) {
  auto all = chunks(f_.d);
  const int64_t perBlock = std::max<int64_t>(1, kLanes / rows);
  SmallVector<Value> rowIdx;
  for (int64_t r = 0; r < rows; ++r)
    rowIdx.push_back(add(r0, cI(r)));
  for (size_t c0 = 0; c0 < all.size(); c0 += perBlock) {
    SmallVector<std::pair<int64_t, int64_t>> cs(
        all.begin() + c0,
        all.begin() + std::min(all.size(), c0 + static_cast<size_t>(perBlock)));
    SmallVector<Value> inits;
    for (int64_t r = 0; r < rows; ++r) {
      Value alpha = loadS(alpha_, {rowIdx[r]});
      for (auto [o, w] : cs)
        inits.push_back(
            fmul(loadV(acc_, {rowIdx[r], cI(o)}, w), splat(alpha, w)));
    }
    SmallVector<Value> res =
        loop(cI(0), bk, cI(1), inits, [&](Value j, ValueRange a) {
          Value row = add(j0, j);
          if (prefetchV_ && c0 == 0)
            prefetchRow(f_.v, row);
          SmallVector<Value> vv;
          for (auto [o, w] : cs)
            vv.push_back(loadV(f_.v, {row, cI(o)}, w));
          SmallVector<Value> out;
          for (int64_t r = 0; r < rows; ++r) {
            Value p = pAt(j, rowIdx[r]);
            for (size_t c = 0; c < cs.size(); ++c)
              out.push_back(
                  fma(splat(p, cs[c].second), vv[c], a[r * cs.size() + c]));
          }
          return out;
        });
    for (int64_t r = 0; r < rows; ++r)
      for (size_t c = 0; c < cs.size(); ++c)
        storeV(res[r * cs.size() + c], acc_, {rowIdx[r], cI(cs[c].first)});
  }
}

/// Transposed V, prefill kernel: accᵀ[d][r-vector] = accᵀ * alpha +
/// sum_j Vᵀ[d][j0+j] (broadcast) * Pᵀ[j][r-vector]; blocks of 4 d x 4 vectors.
void Emitter::pvTransposedPrefill(Value j0, Value bk) {
  const int64_t rv = rows_ / kLanes, rvb = std::min<int64_t>(rv, 4);
  auto block = [&](Value d0, int64_t db) {
    for (int64_t v0 = 0; v0 < rv; v0 += rvb) {
      const int64_t nv = std::min(rvb, rv - v0);
      SmallVector<Value> dIdx, inits;
      for (int64_t x = 0; x < db; ++x)
        dIdx.push_back(add(d0, cI(x)));
      for (int64_t x = 0; x < db; ++x)
        for (int64_t y = 0; y < nv; ++y) {
          Value col = cI((v0 + y) * kLanes);
          inits.push_back(fmul(loadV(acc_, {dIdx[x], col}, kLanes),
                               loadV(alpha_, {col}, kLanes)));
        }
      SmallVector<Value> res =
          loop(cI(0), bk, cI(1), inits, [&](Value j, ValueRange a) {
            SmallVector<Value> pv, out;
            for (int64_t y = 0; y < nv; ++y)
              pv.push_back(loadV(scores_, {j, cI((v0 + y) * kLanes)}, kLanes));
            Value key = add(j0, j);
            for (int64_t x = 0; x < db; ++x) {
              Value vt = splat(loadS(f_.v, {dIdx[x], key}), kLanes);
              for (int64_t y = 0; y < nv; ++y)
                out.push_back(fma(vt, pv[y], a[x * nv + y]));
            }
            return out;
          });
      for (int64_t x = 0; x < db; ++x)
        for (int64_t y = 0; y < nv; ++y)
          storeV(res[x * nv + y], acc_, {dIdx[x], cI((v0 + y) * kLanes)});
    }
  };
  const int64_t full = f_.d / 4 * 4;
  if (full)
    loop(cI(0), cI(full), cI(4), [&](Value d0) { block(d0, 4); });
  if (full < f_.d)
    block(cI(full), f_.d - full);
}

/// Transposed V, decode kernel: acc[r][d] = acc * alpha +
/// reduce_j(P[r][j] * Vᵀ[d][j0+j]) with Vᵀ rows streamed (masked past bk).
void Emitter::pvTransposedDecode(Value j0, Value bk) {
  loop(cI(0), cI(f_.d), cI(1), [&](Value dd) {
    SmallVector<Value> vt;
    for (int64_t jc = 0; jc < f_.bk; jc += kLanes)
      vt.push_back(
          loadMasked(f_.v, {dd, add(j0, cI(jc))}, kLanes, sub(bk, cI(jc))));
    for (int64_t r = 0; r < rows_; ++r) {
      Value a = splatF(0.0f, kLanes);
      for (int64_t c = 0; c < static_cast<int64_t>(vt.size()); ++c)
        a = fma(loadV(scores_, {cI(r), cI(c * kLanes)}, kLanes), vt[c], a);
      Value old = fmul(loadS(acc_, {cI(r), dd}), loadS(alpha_, {cI(r)}));
      storeS(fadd(old, reduce(vector::CombiningKind::ADD, a)), acc_,
             {cI(r), dd});
    }
  });
}

/// out = acc / l (0 for an empty row), lse = (m + log2 l) ln 2 (-inf when
/// empty), for the rows i < bq only.
void Emitter::epilogue(Value i0, Value bq) {
  const float negInf = -std::numeric_limits<float>::infinity();
  loop(cI(0), cI(rows_), cI(1), [&](Value r) {
    Value g = arith::DivUIOp::create(b_, loc_, r, cI(f_.bq));
    Value i = arith::RemUIOp::create(b_, loc_, r, cI(f_.bq));
    Value inTile =
        arith::CmpIOp::create(b_, loc_, arith::CmpIPredicate::ult, i, bq);
    ifThen(inTile, [&] {
      Value l = loadS(lrow_, {r});
      Value zero = cF(0.0f);
      Value empty =
          arith::CmpFOp::create(b_, loc_, arith::CmpFPredicate::OEQ, l, zero);
      Value inv = arith::SelectOp::create(
          b_, loc_, empty, zero, arith::DivFOp::create(b_, loc_, cF(1.0f), l));
      Value row = add(i0, i);
      if (accTransposed_) {
        loop(cI(0), cI(f_.d), cI(1), [&](Value dd) {
          storeS(fmul(loadS(acc_, {dd, r}), inv), f_.out, {g, row, dd});
        });
      } else {
        for (auto [o, w] : chunks(f_.d))
          storeV(fmul(loadV(acc_, {r, cI(o)}, w), splat(inv, w)), f_.out,
                 {g, row, cI(o)});
      }
      Value m = loadS(mrow_, {r});
      Value nat = fmul(fadd(m, math::Log2Op::create(b_, loc_, l)),
                       cF(0.6931471805599453f));
      storeS(arith::SelectOp::create(b_, loc_, empty, cF(negInf), nat), f_.lse,
             {g, row});
    });
  });
}

void Emitter::emitPrefill(Value i0, Value bq, Value lo, Value hi) {
  const int64_t d = f_.d, bkMax = f_.bk, rv = rows_ / kLanes;
  const float negInf = -std::numeric_limits<float>::infinity();
  // Qᵀ[d][r], rows past bq zero (their results are never written).
  loop(cI(0), cI(rows_), cI(1), [&](Value r) {
    Value g = arith::DivUIOp::create(b_, loc_, r, cI(f_.bq));
    Value i = arith::RemUIOp::create(b_, loc_, r, cI(f_.bq));
    Value valid =
        arith::CmpIOp::create(b_, loc_, arith::CmpIPredicate::ult, i, bq);
    Value row = add(i0, minI(i, sub(bq, cI(1))));
    loop(cI(0), cI(d), cI(1), [&](Value dd) {
      Value x = loadS(f_.q, {g, row, dd});
      storeS(arith::SelectOp::create(b_, loc_, valid, x, cF(0.0f)), qpack_,
             {dd, r});
    });
  });
  initTile(Value());

  loop(lo, hi, cI(bkMax), [&](Value j0) {
    Value bk = minI(cI(bkMax), sub(hi, j0));
    Value last = sub(bk, cI(1));
    // Sᵀ[j][r] = sum_d K[j0+j][d] * Qᵀ[d][r]: blocks of jb keys x rvb vectors.
    const int64_t rvb = std::min<int64_t>(rv, 4), jb = kLanes / rvb;
    for (int64_t v0 = 0; v0 < rv; v0 += rvb) {
      const int64_t nv = std::min(rvb, rv - v0);
      loop(cI(0), bk, cI(jb), [&](Value jj0) {
        SmallVector<Value> keys;
        for (int64_t x = 0; x < jb; ++x)
          keys.push_back(add(j0, minI(add(jj0, cI(x)), last)));
        SmallVector<Value> inits(jb * nv, splatF(0.0f, kLanes));
        SmallVector<Value> res =
            loop(cI(0), cI(d), cI(1), inits, [&](Value dd, ValueRange a) {
              SmallVector<Value> qv, out;
              for (int64_t y = 0; y < nv; ++y)
                qv.push_back(
                    loadV(qpack_, {dd, cI((v0 + y) * kLanes)}, kLanes));
              for (int64_t x = 0; x < jb; ++x) {
                Value kb = splat(loadS(f_.k, {keys[x], dd}), kLanes);
                for (int64_t y = 0; y < nv; ++y)
                  out.push_back(fma(kb, qv[y], a[x * nv + y]));
              }
              return out;
            });
        // jb need not divide the tile (G = 3: 5 keys): past the last key
        // the block recomputed the last key's scores, so store them there
        // again rather than past the tile buffer.
        for (int64_t x = 0; x < jb; ++x)
          for (int64_t y = 0; y < nv; ++y)
            storeV(res[x * nv + y], scores_,
                   {minI(add(jj0, cI(x)), last), cI((v0 + y) * kLanes)});
      });
    }
    // Modifier + online softmax, one vector of 16 rows at a time.
    loop(cI(0), cI(rv), cI(1), [&](Value vi) {
      Value col = mul(vi, cI(kLanes));
      Value g = arith::DivUIOp::create(b_, loc_, col, cI(f_.bq));
      Value ibase = arith::RemUIOp::create(b_, loc_, col, cI(f_.bq));
      Value iv = iota(ibase, kLanes);
      Value mt = loop(cI(0), bk, cI(1), ValueRange{splatF(negInf, kLanes)},
                      [&](Value j, ValueRange a) {
                        Value s = loadV(scores_, {j, col}, kLanes);
                        Value bias;
                        if (f_.bias) {
                          SmallVector<Value> el;
                          Value key = add(j0, j);
                          for (int64_t l = 0; l < kLanes; ++l) {
                            Value i = minI(add(ibase, cI(l)), sub(bq, cI(1)));
                            el.push_back(loadS(f_.bias, {g, add(i0, i), key}));
                          }
                          bias = vector::FromElementsOp::create(
                              b_, loc_, vec(kLanes), el);
                        }
                        Value s2 = modifier(s, bias, g, iv, j, i0, j0);
                        storeV(s2, scores_, {j, col});
                        return SmallVector<Value>{fmax(a[0], s2)};
                      })[0];
      Value mOld = loadV(mrow_, {col}, kLanes);
      Value mn = fmax(mOld, mt);
      Value isNinf = arith::CmpFOp::create(b_, loc_, arith::CmpFPredicate::OEQ,
                                           mn, splatF(negInf, kLanes));
      Value ms =
          arith::SelectOp::create(b_, loc_, isNinf, splatF(0.0f, kLanes), mn);
      Value alpha = exp2(fsub(mOld, ms));
      Value sum =
          loop(cI(0), bk, cI(1), ValueRange{splatF(0.0f, kLanes)},
               [&](Value j, ValueRange a) {
                 Value p = exp2(fsub(loadV(scores_, {j, col}, kLanes), ms));
                 storeV(p, scores_, {j, col});
                 return SmallVector<Value>{fadd(a[0], p)};
               })[0];
      Value lOld = loadV(lrow_, {col}, kLanes);
      storeV(fma(lOld, alpha, sum), lrow_, {col});
      storeV(mn, mrow_, {col});
      storeV(alpha, alpha_, {col});
    });
    // P·V.
    if (accTransposed_) {
      pvTransposedPrefill(j0, bk);
    } else {
      // R = 16 G: whole blocks of 4 rows.
      loop(cI(0), cI(rows_), cI(4), [&](Value r0) {
        pvRows(
            j0, bk,
            [&](Value j, Value r) {
              return loadS(scores_, {j, r});
            },
            r0, 4);
      });
    }
  });
  epilogue(i0, bq);
}

/// Reduces 16 vector<16xf32> to one vector whose lane l is the sum of the
/// lanes of acc[l] (a transposing reduction: 15 adds and 30 two-source
/// shuffles for 16 sums, against 16 x (4 shuffles + 4 adds) for 16 separate
/// horizontal reductions). Level h halves every vector's segments: the pair
/// (a, b) becomes t1 + t2 where t1 holds the first half of each segment of a
/// and of b, t2 the second halves.
Value Emitter::transposeReduce(SmallVector<Value> acc) {
  assert(acc.size() == kLanes && "16 accumulators");
  // owner[v][lane]: which accumulator's partial sum the lane holds.
  SmallVector<SmallVector<int64_t>> owner;
  for (int64_t a = 0; a < kLanes; ++a)
    owner.push_back(SmallVector<int64_t>(kLanes, a));
  for (int64_t h = kLanes / 2; h >= 1; h /= 2) {
    SmallVector<Value> next;
    SmallVector<SmallVector<int64_t>> nextOwner;
    for (size_t v = 0; v < acc.size(); v += 2) {
      SmallVector<int64_t> m1(kLanes), m2(kLanes), own(kLanes);
      for (int64_t seg = 0; seg < kLanes; seg += 2 * h)
        for (int64_t i = 0; i < h; ++i) {
          m1[seg + i] = seg + i;                  // a, first half
          m2[seg + i] = seg + h + i;              // a, second half
          m1[seg + h + i] = kLanes + seg + i;     // b, first half
          m2[seg + h + i] = kLanes + seg + h + i; // b, second half
          own[seg + i] = owner[v][seg + i];
          own[seg + h + i] = owner[v + 1][seg + i];
        }
      Value t1 = vector::ShuffleOp::create(b_, loc_, acc[v], acc[v + 1], m1);
      Value t2 = vector::ShuffleOp::create(b_, loc_, acc[v], acc[v + 1], m2);
      next.push_back(fadd(t1, t2));
      nextOwner.push_back(own);
    }
    acc = next;
    owner = nextOwner;
  }
  SmallVector<int64_t> perm(kLanes);
  for (int64_t lane = 0; lane < kLanes; ++lane)
    perm[owner[0][lane]] = lane;
  return vector::ShuffleOp::create(b_, loc_, acc[0], acc[0], perm);
}

/// Scores of rows [r0, r0 + rb) against every key of the tile, kb = 16 / rb
/// keys at a time: each K vector is loaded (and widened, for bf16) once for
/// the rb rows, the 16 (row, key) dot products accumulate in 16 vectors and
/// one transposeReduce yields all 16 scores. Keys past the tile end repeat
/// its last key (scores_ rows stay in bounds: kb divides the tile; the
/// softmax masks j >= bk).
void Emitter::qkDecodeBlock(Value j0, Value bk, int64_t r0, int64_t rb) {
  const int64_t kb = kLanes / rb, d = f_.d, full = d / kLanes * kLanes;
  Value last = sub(bk, cI(1));
  loop(cI(0), bk, cI(kb), [&](Value jj0) {
    SmallVector<Value> keys;
    for (int64_t x = 0; x < kb; ++x)
      keys.push_back(add(j0, minI(add(jj0, cI(x)), last)));
    if (r0 == 0)
      for (Value key : keys)
        prefetchRow(f_.k, key);
    auto step = [&](Value o, ValueRange a, bool tail) {
      SmallVector<Value> qv, out(a.begin(), a.end());
      for (int64_t y = 0; y < rb; ++y)
        qv.push_back(loadV(qpack_, {cI(r0 + y), o}, kLanes));
      for (int64_t x = 0; x < kb; ++x) {
        Value kv = tail ? loadMasked(f_.k, {keys[x], o}, kLanes, cI(d - full))
                        : loadV(f_.k, {keys[x], o}, kLanes);
        for (int64_t y = 0; y < rb; ++y)
          out[y * kb + x] = fma(kv, qv[y], out[y * kb + x]);
      }
      return out;
    };
    SmallVector<Value> acc(kLanes, splatF(0.0f, kLanes));
    if (full)
      acc = loop(cI(0), cI(full), cI(kLanes), acc,
                 [&](Value o, ValueRange a) { return step(o, a, false); });
    if (full < d)
      acc = step(cI(full), acc, true);
    Value sums = transposeReduce(acc);
    for (int64_t y = 0; y < rb; ++y) {
      Value part = vector::ExtractStridedSliceOp::create(
          b_, loc_, sums, ArrayRef<int64_t>{y * kb}, ArrayRef<int64_t>{kb},
          ArrayRef<int64_t>{1});
      storeV(part, scores_, {cI(r0 + y), jj0});
    }
  });
}

void Emitter::emitDecode(Value i0, Value bq, Value lo, Value hi) {
  const int64_t d = f_.d, bkMax = f_.bk;
  const float negInf = -std::numeric_limits<float>::infinity();
  auto dch = chunks(d);
  // q[r][:] in f32, rows past bq repeat the last row (never written out);
  // zero past d up to a whole vector, so QKᵀ needs no tail vectors.
  loop(cI(0), cI(rows_), cI(1), [&](Value r) {
    Value g = arith::DivUIOp::create(b_, loc_, r, cI(f_.bq));
    Value i = arith::RemUIOp::create(b_, loc_, r, cI(f_.bq));
    Value row = add(i0, minI(i, sub(bq, cI(1))));
    for (auto [o, w] : dch) {
      Value x = w == kLanes ? loadV(f_.q, {g, row, cI(o)}, w)
                            : loadMasked(f_.q, {g, row, cI(o)}, kLanes, cI(w));
      storeV(x, qpack_, {r, cI(o)});
    }
  });
  initTile(Value());

  loop(lo, hi, cI(bkMax), [&](Value j0) {
    Value bk = minI(cI(bkMax), sub(hi, j0));
    // S[r][j] = K[j0+j][:] . q[r][:], in blocks of rb rows x 16/rb keys
    // (16 dot products, reduced together).
    for (int64_t r0 = 0, rb = 8; r0 < rows_; r0 += rb) {
      while (rb > rows_ - r0)
        rb /= 2;
      qkDecodeBlock(j0, bk, r0, rb);
    }
    // Modifier + online softmax along keys, row by row.
    loop(cI(0), cI(rows_), cI(1), [&](Value r) {
      Value g = arith::DivUIOp::create(b_, loc_, r, cI(f_.bq));
      Value i = arith::RemUIOp::create(b_, loc_, r, cI(f_.bq));
      Value irow = minI(i, sub(bq, cI(1)));
      Value mt = splatF(negInf, kLanes);
      for (int64_t jc = 0; jc < bkMax; jc += kLanes) {
        Value jv = iota(cI(jc), kLanes);
        Value s = loadV(scores_, {r, cI(jc)}, kLanes);
        Value bias;
        if (f_.bias)
          bias = loadMasked(f_.bias, {g, add(i0, irow), add(j0, cI(jc))},
                            kLanes, sub(bk, cI(jc)));
        Value s2 = modifier(s, bias, g, i, jv, i0, j0);
        Value valid = arith::CmpIOp::create(b_, loc_, arith::CmpIPredicate::slt,
                                            jv, splat(bk, kLanes));
        s2 = arith::SelectOp::create(b_, loc_, valid, s2,
                                     splatF(negInf, kLanes));
        storeV(s2, scores_, {r, cI(jc)});
        mt = fmax(mt, s2);
      }
      Value mOld = loadS(mrow_, {r});
      Value mn = fmax(mOld, reduce(vector::CombiningKind::MAXIMUMF, mt));
      Value isNinf = arith::CmpFOp::create(b_, loc_, arith::CmpFPredicate::OEQ,
                                           mn, cF(negInf));
      Value ms = arith::SelectOp::create(b_, loc_, isNinf, cF(0.0f), mn);
      Value alpha = exp2(fsub(mOld, ms));
      Value sum = splatF(0.0f, kLanes);
      for (int64_t jc = 0; jc < bkMax; jc += kLanes) {
        Value p =
            exp2(fsub(loadV(scores_, {r, cI(jc)}, kLanes), splat(ms, kLanes)));
        storeV(p, scores_, {r, cI(jc)});
        sum = fadd(sum, p);
      }
      Value lOld = loadS(lrow_, {r});
      storeS(fadd(fmul(lOld, alpha), reduce(vector::CombiningKind::ADD, sum)),
             lrow_, {r});
      storeS(mn, mrow_, {r});
      storeS(alpha, alpha_, {r});
    });
    if (f_.vTransposed) {
      pvTransposedDecode(j0, bk);
    } else {
      prefetchV_ = true;
      const int64_t rb = std::min<int64_t>(rows_, kLanes);
      for (int64_t r0 = 0; r0 < rows_; r0 += rb)
        pvRows(
            j0, bk,
            [&](Value j, Value r) {
              return loadS(scores_, {r, j});
            },
            cI(r0), std::min(rb, rows_ - r0));
    }
  });
  epilogue(i0, bq);
}

void Emitter::emit() {
  scf::ForOp outer = f_.outer;
  rows_ = f_.g * f_.bq;
  const bool prefill = f_.bq % kLanes == 0;
  accTransposed_ = prefill && f_.vTransposed;
  if (prefill) {
    qpack_ = tileBuffer({f_.d, rows_});
    scores_ = tileBuffer({f_.bk, rows_});
  } else {
    qpack_ = tileBuffer({rows_, (f_.d + kLanes - 1) / kLanes * kLanes});
    scores_ = tileBuffer({rows_, f_.bk});
  }
  acc_ = accTransposed_ ? tileBuffer({f_.d, rows_}) : tileBuffer({rows_, f_.d});
  mrow_ = tileBuffer({rows_});
  lrow_ = tileBuffer({rows_});
  alpha_ = tileBuffer({rows_});

  b_.setInsertionPoint(outer);
  auto newOuter = scf::ForOp::create(b_, loc_, outer.getLowerBound(),
                                     outer.getUpperBound(), outer.getStep());
  b_.setInsertionPointToStart(newOuter.getBody());
  Value i0 = newOuter.getInductionVar();
  // The key range of this query tile: clone what the fused form computes.
  IRMapping map;
  map.map(outer.getInductionVar(), i0);
  llvm::SmallPtrSet<Operation *, 16> needed;
  SmallVector<Value> work{f_.inner.getLowerBound(), f_.inner.getUpperBound()};
  while (!work.empty()) {
    Operation *def = work.pop_back_val().getDefiningOp();
    if (!def || def->getBlock() != outer.getBody() ||
        !needed.insert(def).second)
      continue;
    for (Value o : def->getOperands())
      work.push_back(o);
  }
  for (Operation &op : *outer.getBody())
    if (needed.contains(&op))
      b_.clone(op, map);
  Value lo = map.lookupOrDefault(f_.inner.getLowerBound());
  Value hi = map.lookupOrDefault(f_.inner.getUpperBound());
  Value bq = minI(outer.getStep(), sub(outer.getUpperBound(), i0));
  if (prefill)
    emitPrefill(i0, bq, lo, hi);
  else
    emitDecode(i0, bq, lo, hi);
}

class VectorizeFlashPass : public impl::VectorizeFlashBase<VectorizeFlashPass> {
public:
  void runOnOperation() override {
    SmallVector<FlashLoop> loops;
    getOperation().walk([&](scf::ForOp op) {
      if (!op->hasAttr(kFlashQueryLoopAttr))
        return;
      if (auto f = matchFlashLoop(op))
        loops.push_back(*f);
      else // a performance cliff worth a word, not an error
        op->emitRemark("not vectorized: not the flash form this pass "
                       "emits vector code for; left for the linalg path");
    });
    for (FlashLoop &f : loops) {
      OpBuilder b(f.outer);
      Emitter(f, b).emit();
      for (Operation *mat : f.materializations)
        mat->erase();
      f.outer->erase();
    }
  }
};

} // namespace

} // namespace attnkit::compiled
