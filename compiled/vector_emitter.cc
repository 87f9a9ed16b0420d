// attnkit-vectorize-flash: the emitter's shared pieces (the score modifier
// on vectors, tile initialisation, P.V rows, the epilogue) and emit().
#include "compiled/vector_emitter.h"

#include "compiled/attnkit_dialect.h"
#include "compiled/passes.h"

using namespace mlir;

namespace attnkit::compiled::vectorize {

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
/// (V rows contiguous); without `rescale` the acc rows are not multiplied
/// (rescaleAcc did it). Register blocks of `rows` x up to 16/rows vectors;
/// r0 is a run-time row (the caller loops over row blocks).
void Emitter::pvRows(Value j0, Value bk,
                     function_ref<Value(Value j, Value r)> pAt, Value r0,
                     int64_t rows, bool rescale) {
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
      Value alpha = rescale ? loadS(alpha_, {rowIdx[r]}) : Value();
      for (auto [o, w] : cs) {
        Value a = loadV(acc_, {rowIdx[r], cI(o)}, w);
        inits.push_back(rescale ? fmul(a, splat(alpha, w)) : a);
      }
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

/// acc[r][:] *= alpha[r] for every row (acc not transposed).
void Emitter::rescaleAcc() {
  loop(cI(0), cI(rows_), cI(1), [&](Value r) {
    Value alpha = loadS(alpha_, {r});
    for (auto [o, w] : chunks(f_.d))
      storeV(fmul(loadV(acc_, {r, cI(o)}, w), splat(alpha, w)), acc_,
             {r, cI(o)});
  });
}

/// The transpose of 16 vectors of 16 lanes (row i, lane j -> row j, lane
/// i): four rounds of two-source shuffles, round k swapping bit k of the row
/// index with bit k of the lane index.
SmallVector<Value> Emitter::transpose16(SmallVector<Value> m) {
  assert(m.size() == kLanes && "16 vectors");
  for (int64_t h = 1; h < kLanes; h *= 2) {
    SmallVector<int64_t> lo(kLanes), hi(kLanes);
    for (int64_t j = 0; j < kLanes; ++j) {
      lo[j] = (j & h) ? kLanes + j - h : j;
      hi[j] = (j & h) ? kLanes + j : j + h;
    }
    for (int64_t i = 0; i < kLanes; ++i) {
      if (i & h)
        continue;
      Value a = m[i], b = m[i + h];
      m[i] = vector::ShuffleOp::create(b_, loc_, a, b, lo);
      m[i + h] = vector::ShuffleOp::create(b_, loc_, a, b, hi);
    }
  }
  return m;
}

/// out = accᵀ / l for a transposed accumulator ([D][R]), 16 rows by 16 dims
/// at a time through transpose16, each row's 16 dims one vector store
/// (element by element, every load 4·R bytes past the last, it cost the
/// query tiles of short prefills more than the layout saved), rows i < bq
/// only.
void Emitter::storeTransposedOut(Value i0, Value bq) {
  const int64_t full = f_.d / kLanes * kLanes;
  for (int64_t r0 = 0; r0 < rows_; r0 += kLanes) {
    // A vector of rows lies in one head: BQ is a multiple of 16.
    const int64_t g = r0 / f_.bq, ibase = r0 % f_.bq;
    Value l = loadV(lrow_, {cI(r0)}, kLanes);
    Value empty = arith::CmpFOp::create(b_, loc_, arith::CmpFPredicate::OEQ, l,
                                        splatF(0.0f, kLanes));
    Value inv = arith::SelectOp::create(
        b_, loc_, empty, splatF(0.0f, kLanes),
        arith::DivFOp::create(b_, loc_, splatF(1.0f, kLanes), l));
    Value valid = sub(bq, cI(ibase)); // rows r0 + i, i < valid, are in bq
    auto inTile = [&](int64_t i) {
      return arith::CmpIOp::create(b_, loc_, arith::CmpIPredicate::slt, cI(i),
                                   valid);
    };
    if (full)
      loop(cI(0), cI(full), cI(kLanes), [&](Value d0) {
        SmallVector<Value> cols;
        for (int64_t k = 0; k < kLanes; ++k)
          cols.push_back(
              fmul(loadV(acc_, {add(d0, cI(k)), cI(r0)}, kLanes), inv));
        SmallVector<Value> rowsOut = transpose16(cols);
        for (int64_t i = 0; i < kLanes; ++i)
          ifThen(inTile(i), [&] {
            storeV(rowsOut[i], f_.out, {cI(g), add(i0, cI(ibase + i)), d0});
          });
      });
    if (full < f_.d)
      loop(cI(full), cI(f_.d), cI(1), [&](Value dd) {
        Value x = fmul(loadV(acc_, {dd, cI(r0)}, kLanes), inv);
        for (int64_t i = 0; i < kLanes; ++i)
          ifThen(inTile(i), [&] {
            storeS(vector::ExtractOp::create(b_, loc_, x, ArrayRef<int64_t>{i}),
                   f_.out, {cI(g), add(i0, cI(ibase + i)), dd});
          });
      });
  }
}

/// out = acc / l (0 for an empty row), lse = (m + log2 l) ln 2 (-inf when
/// empty), for the rows i < bq only.
void Emitter::epilogue(Value i0, Value bq) {
  const float negInf = -std::numeric_limits<float>::infinity();
  if (accTransposed_)
    storeTransposedOut(i0, bq);
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
      Value row = add(i0, i);
      // A transposed acc's rows are already out (storeTransposedOut above).
      if (!accTransposed_) {
        Value inv = arith::SelectOp::create(
            b_, loc_, empty, zero,
            arith::DivFOp::create(b_, loc_, cF(1.0f), l));
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

void Emitter::forEachHead(function_ref<void()> body) {
  if (!f_.heads)
    return body();
  FlashLoop one = f_;
  SmallVector<Value> state{acc_, mrow_, lrow_, alpha_, qpack_, scores_};
  loop(cI(0), f_.heads.getUpperBound(), cI(1), [&](Value h) {
    auto slice = [&](Value all) {
      return all ? headSlice(b_, loc_, all, h) : Value();
    };
    f_.q = slice(one.all.q);
    f_.k = slice(one.all.k);
    f_.v = slice(one.all.v);
    f_.bias = slice(one.all.bias);
    f_.kScale = slice(one.all.kScale);
    f_.vScale = slice(one.all.vScale);
    f_.out = slice(one.all.out);
    f_.lse = slice(one.all.lse);
    acc_ = slice(state[0]);
    mrow_ = slice(state[1]);
    lrow_ = slice(state[2]);
    alpha_ = slice(state[3]);
    qpack_ = slice(state[4]);
    scores_ = slice(state[5]);
    body();
  });
  f_ = one;
  acc_ = state[0];
  mrow_ = state[1];
  lrow_ = state[2];
  alpha_ = state[3];
  qpack_ = state[4];
  scores_ = state[5];
}

void Emitter::emit() {
  scf::ForOp outer = f_.outer;
  rows_ = f_.g * f_.bq;
  const bool prefill = f_.bq % kLanes == 0;
  // Prefill accumulates Oᵀ[D][R] for every V layout (pvTransposedPrefill);
  // decode O[R][D].
  accTransposed_ = prefill;
  dot_ = bf16DotAllowed_ && elemOf(f_.q).isBF16() && elemOf(f_.k).isBF16();
  // Q as packed for QKᵀ: prefill Qᵀ[D][R] in f32, or for vdpbf16ps in bf16
  // pairs of dims, [D/2][R][2] (an odd D's last pair padded with 0); decode
  // q[R][D] zero-padded to whole vectors (of 16 f32 or 32 bf16).
  if (prefill) {
    qpack_ = dot_ ? tileBuffer({(f_.d + 1) / 2, 2 * rows_}, b_.getBF16Type())
                  : tileBuffer({f_.d, rows_});
    scores_ = tileBuffer({f_.bk, rows_});
  } else {
    const int64_t w = qkLanes();
    qpack_ = tileBuffer({rows_, (f_.d + w - 1) / w * w},
                        dot_ ? b_.getBF16Type() : f32_, /*perHead=*/true);
    // Per head in a headed kernel: its heads' QK^T run 16 keys at a time
    // before any head's softmax (emitDecode).
    scores_ = tileBuffer({rows_, f_.bk}, {}, /*perHead=*/true);
  }
  // Decode rows padded to whole vectors: the transposed-V P.V stores blocks
  // of up to 16 dims (pvTransposedDecode).
  acc_ =
      accTransposed_
          ? tileBuffer({f_.d, rows_})
          : tileBuffer(
                {rows_, prefill ? f_.d : (f_.d + kLanes - 1) / kLanes * kLanes},
                {}, /*perHead=*/true);
  mrow_ = tileBuffer({rows_}, {}, /*perHead=*/true);
  lrow_ = tileBuffer({rows_}, {}, /*perHead=*/true);
  alpha_ = tileBuffer({rows_}, {}, /*perHead=*/true);

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
  Operation *lastRow = nullptr;
  for (Operation &op : *outer.getBody())
    if (needed.contains(&op)) {
      if (hasFlashRole(&op, FlashRole::LastRow))
        lastRow = &op;
      b_.clone(op, map)->removeAttr(kFlashRoleAttrName);
    }
  Value lo = map.lookupOrDefault(f_.inner.getLowerBound());
  Value hi = map.lookupOrDefault(f_.inner.getUpperBound());
  Value bq = minI(outer.getStep(), sub(outer.getUpperBound(), i0));
  // MHA prefill: the rows are consecutive queries, 16 per vector, so each
  // vector's own key bound is the slice above with the tile's last row
  // replaced by the vector's (rows past bq: bq's). Other tiles repeat the
  // queries across the vectors (G > 1) and keep the tile's bound.
  SmallVector<Value> vectorHi;
  if (prefill && f_.g == 1 && rows_ > kLanes && lastRow) {
    for (int64_t v = 0; v < rows_ / kLanes; ++v) {
      IRMapping mv;
      mv.map(outer.getInductionVar(), i0);
      mv.map(lastRow->getResult(0),
             sub(add(i0, minI(cI((v + 1) * kLanes), bq)), cI(1)));
      for (Operation &op : *outer.getBody())
        if (needed.contains(&op) && &op != lastRow)
          b_.clone(op, mv)->removeAttr(kFlashRoleAttrName);
      vectorHi.push_back(mv.lookupOrDefault(f_.inner.getUpperBound()));
    }
  }
  if (prefill)
    emitPrefill(i0, bq, lo, hi, vectorHi);
  else
    emitDecode(i0, bq, lo, hi);
  // A headed kernel: every head ran inside the code above, so the head loop
  // around it runs once (the canonicalizer then folds it away).
  if (f_.heads) {
    b_.setInsertionPoint(f_.heads);
    f_.heads.setUpperBound(cI(1));
  }
}

} // namespace attnkit::compiled::vectorize
