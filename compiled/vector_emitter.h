// attnkit-vectorize-flash, part 2: the emitter of one query-tile loop's
// vector code -- small vector builders, then the pieces: the score modifier
// re-emitted on vectors, the tiles' initialisation and epilogue
// (vector_emitter.cc), the prefill micro-kernel (vectorize_prefill.cc) and
// the decode kernel (vectorize_decode.cc). The pass and its documentation:
// vectorize_flash_pass.cc.
#ifndef ATTNKIT_COMPILED_VECTOR_EMITTER_H_
#define ATTNKIT_COMPILED_VECTOR_EMITTER_H_

#include "compiled/vectorize_match.h"
#include "runtime/split_kv.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Dialect/X86Vector/X86VectorDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Pass/Pass.h"

#include <limits>

namespace attnkit::compiled::vectorize {

using namespace mlir;

/// Emits the vector code of one query-tile loop.
class Emitter {
public:
  /// bf16Dot: QKᵀ of a bf16 Q and K may use x86vector.avx512.dot.
  /// readAhead: a decode kernel of one head reads each KV tile ahead
  /// (KernelSpec::readAhead).
  Emitter(FlashLoop f, OpBuilder &b, bool bf16Dot, bool readAhead = false)
      : f_(f), b_(b), loc_(f.outer.getLoc()), f32_(b.getF32Type()),
        bf16DotAllowed_(bf16Dot), readAheadAsked_(readAhead) {}

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
  /// bf16 widened, i8 (a quantized K/V row) converted by sitofp -- on
  /// AVX-512 a vpmovsxbd + vcvtdq2ps per 16 keys' elements, in registers.
  Value toF32(Value x) {
    Type et = getElementTypeOrSelf(x.getType());
    if (et.isF32())
      return x;
    Type t = isa<VectorType>(x.getType())
                 ? Type(vec(cast<VectorType>(x.getType()).getDimSize(0)))
                 : f32_;
    if (et.isInteger())
      return arith::SIToFPOp::create(b_, loc_, t, x);
    return arith::ExtFOp::create(b_, loc_, t, x);
  }
  Type elemOf(Value mem) {
    return cast<MemRefType>(mem.getType()).getElementType();
  }
  Value loadV(Value mem, ValueRange idx, int64_t w) {
    return toF32(loadRaw(mem, idx, w));
  }
  Value loadMasked(Value mem, ValueRange idx, int64_t w, Value count) {
    return toF32(loadMaskedRaw(mem, idx, w, count));
  }
  /// The first `count` of w elements at idx, zeros past them, in the
  /// memref's own element type.
  Value loadMaskedRaw(Value mem, ValueRange idx, int64_t w, Value count) {
    Value mask = vector::CreateMaskOp::create(
        b_, loc_, VectorType::get({w}, b_.getI1Type()), ValueRange{count});
    Type et = elemOf(mem);
    Value pass = arith::ConstantOp::create(
        b_, loc_, DenseElementsAttr::get(vec(w, et), b_.getZeroAttr(et)));
    return vector::MaskedLoadOp::create(b_, loc_, vec(w, et), mem, idx, mask,
                                        pass);
  }
  /// w elements at idx in the memref's own element type.
  Value loadRaw(Value mem, ValueRange idx, int64_t w) {
    return vector::LoadOp::create(b_, loc_, vec(w, elemOf(mem)), mem, idx);
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
  /// prefetch distance (PrefetchKeys, runtime/split_kv.h: the simd kernel's)
  /// of a row-major [n][D] memref, clamped to row n - 1.
  void prefetchRow(Value mem, Value row) {
    Value n = memref::DimOp::create(b_, loc_, mem, 0);
    // Elements per 64-byte line: 16 f32, 32 bf16, 64 i8.
    const int64_t perLine = 512 / elemOf(mem).getIntOrFloatBitWidth();
    const int64_t rowBytes = f_.d * elemOf(mem).getIntOrFloatBitWidth() / 8;
    Value ahead = minI(add(row, cI(PrefetchKeys(rowBytes))), sub(n, cI(1)));
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
  /// acc + the pairwise bf16 products of a and b (vector<32xbf16> each):
  /// acc[i] += a[2i] b[2i] + a[2i+1] b[2i+1], one vdpbf16ps.
  Value dotBf16(Value a, Value x, Value acc) {
    return x86vector::DotBF16Op::create(b_, loc_, acc, a, x);
  }
  /// The bf16 pair (mem[idx..], mem[idx.. + 1]) -- or (mem[idx..], 0) when
  /// `single` -- broadcast to all 16 pairs of a vector<32xbf16> (a
  /// vpbroadcastd, folded into vdpbf16ps as an embedded broadcast).
  Value splatPair(Value mem, ValueRange idx, bool single = false) {
    Type bf16 = b_.getBF16Type();
    Value pair;
    if (single) {
      Value zero =
          arith::ConstantOp::create(b_, loc_, b_.getFloatAttr(bf16, 0));
      pair = vector::FromElementsOp::create(
          b_, loc_, vec(2, bf16),
          ValueRange{memref::LoadOp::create(b_, loc_, mem, idx), zero});
    } else {
      pair = vector::LoadOp::create(b_, loc_, vec(2, bf16), mem, idx);
    }
    Type i32 = b_.getI32Type();
    Value word = vector::ExtractOp::create(
        b_, loc_, vector::BitCastOp::create(b_, loc_, vec(1, i32), pair),
        ArrayRef<int64_t>{0});
    return vector::BitCastOp::create(b_, loc_, vec(2 * kLanes, bf16),
                                     splat(word, kLanes));
  }
  /// a > c ? a : c -- exactly vmaxps (which returns its second operand when
  /// either is NaN). maximumf/maxnumf would cost a compare, a mask move and
  /// blends per vector for their NaN rules (a 6-instruction chain through the
  /// running row max: ~17% of a prefill tile's cycles). A NaN score still
  /// poisons its row: exp2(NaN - m) is NaN, and so are l and the output.
  Value fmax(Value a, Value c) {
    Value gt = arith::CmpFOp::create(b_, loc_, arith::CmpFPredicate::OGT, a, c);
    return arith::SelectOp::create(b_, loc_, gt, a, c);
  }
  /// The largest lane of a vector, as a tree of fmax over halves (log2 w
  /// vmaxps): vector.reduction <maxnumf> lowered to a serial chain of w - 1
  /// vmaxss with NaN fix-ups, ~45 dependent instructions per row and tile
  /// in the decode kernel.
  Value hmax(Value v) {
    for (int64_t w = cast<VectorType>(v.getType()).getDimSize(0); w > 1;
         w /= 2) {
      auto half = [&](int64_t at) {
        return vector::ExtractStridedSliceOp::create(
            b_, loc_, v, ArrayRef<int64_t>{at}, ArrayRef<int64_t>{w / 2},
            ArrayRef<int64_t>{1});
      };
      v = fmax(half(0), half(w / 2));
    }
    return vector::ExtractOp::create(b_, loc_, v, ArrayRef<int64_t>{0});
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
  /// A stack buffer of `shape` at the function's entry. `perHead` in a
  /// headed kernel (f_.heads): one per head, [H, shape...] allocated before
  /// the head loop (H is its trip count), sliced by forEachHead.
  Value tileBuffer(ArrayRef<int64_t> shape, Type elem = {},
                   bool perHead = false) {
    OpBuilder::InsertionGuard guard(b_);
    elem = elem ? elem : f32_;
    if (perHead && f_.heads) {
      b_.setInsertionPoint(f_.heads);
      SmallVector<int64_t> full{ShapedType::kDynamic};
      full.append(shape.begin(), shape.end());
      auto op = memref::AllocaOp::create(b_, loc_, MemRefType::get(full, elem),
                                         ValueRange{f_.heads.getUpperBound()});
      op.setAlignment(64);
      return op;
    }
    auto fn = f_.outer->getParentOfType<func::FuncOp>();
    b_.setInsertionPointToStart(&fn.getBody().front());
    auto op = memref::AllocaOp::create(b_, loc_, MemRefType::get(shape, elem));
    op.setAlignment(64);
    return op;
  }
  /// `body` once; in a headed decode kernel in a loop over the heads, with
  /// f_'s memrefs and the per-head state (acc_, m, l, alpha, qpack_,
  /// scores_) bound to head h's slices meanwhile.
  void forEachHead(function_ref<void()> body);

  /// scf.for whose body is produced by `body(iv, iterArgs) -> yielded`.
  /// `rolled`: LLVM must not unroll it (llvm.loop.unroll.disable; the
  /// attribute rides scf-to-cf onto the back edge's branch). For a body of
  /// many independent loads: unrolled, LLVM hoists the loads of all the
  /// copies ahead of their uses and spills.
  SmallVector<Value>
  loop(Value lb, Value ub, Value step, ValueRange inits,
       function_ref<SmallVector<Value>(Value, ValueRange)> body,
       bool rolled = false) {
    auto forOp = scf::ForOp::create(
        b_, loc_, lb, ub, step, inits,
        [&](OpBuilder &nb, Location, Value iv, ValueRange args) {
          OpBuilder::InsertionGuard guard(b_);
          b_.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
          SmallVector<Value> ys = body(iv, args);
          scf::YieldOp::create(b_, loc_, ys);
        });
    if (rolled) {
      MLIRContext *ctx = b_.getContext();
      auto unroll = LLVM::LoopUnrollAttr::get(
          ctx, /*disable=*/b_.getBoolAttr(true), /*count=*/{},
          /*runtimeDisable=*/{}, /*full=*/{}, /*followupUnrolled=*/{},
          /*followupRemainder=*/{}, /*followupAll=*/{});
      auto annotation = LLVM::LoopAnnotationAttr::get(
          ctx, /*disableNonforced=*/{}, /*vectorize=*/{}, /*interleave=*/{},
          unroll, /*unrollAndJam=*/{}, /*licm=*/{}, /*distribute=*/{},
          /*pipeline=*/{}, /*peeled=*/{}, /*unswitch=*/{},
          /*mustProgress=*/{}, /*isVectorized=*/{}, /*startLoc=*/{},
          /*endLoc=*/{}, /*parallelAccesses=*/{});
      forOp->setAttr("loop_annotation", annotation);
    }
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
  static SmallVector<std::pair<int64_t, int64_t>>
  chunks(int64_t n, int64_t lanes = kLanes) {
    SmallVector<std::pair<int64_t, int64_t>> c;
    for (int64_t o = 0; o < n; o += lanes)
      c.push_back({o, std::min(lanes, n - o)});
    return c;
  }

  // ---- the pieces ----------------------------------------------------------
  Value modifier(Value s, Value biasVal, Value gIdx, Value iIdx, Value jIdx,
                 Value i0, Value j0);
  Value expandAffine(AffineExpr e, ArrayRef<Value> dims, ArrayRef<Value> syms);
  Value unify(Value v, int64_t w);
  void initTile(Value rows);
  void pvRows(Value j0, Value bk, function_ref<Value(Value j, Value r)> pAt,
              Value r0, int64_t rows, bool rescale = true);
  void rescaleAcc();
  void pvTransposedPrefill(Value v, Value j0, Value bk, ArrayRef<Value> keyEnd);
  void pvTransposedDecode(Value j0, Value bk);
  Value transposeReduce(SmallVector<Value> acc);
  SmallVector<Value> transpose16(SmallVector<Value> m);
  void storeTransposedOut(Value i0, Value bq);
  void qkDecodeBlock(Value j0, Value bk, int64_t r0, int64_t rb, Value from,
                     Value to);
  void readAhead(bool keys, Value j0, Value from, Value to);
  void epilogue(Value i0, Value bq);
  /// `vectorHi`: empty, or the key bound of each vector of 16 rows (see
  /// emit(); emitPrefill clamps them to the tile, each at least the one
  /// before, so a vector computes every key the vectors before it do).
  void emitPrefill(Value i0, Value bq, Value lo, Value hi,
                   ArrayRef<Value> vectorHi);
  void emitDecode(Value i0, Value bq, Value lo, Value hi);

  FlashLoop f_;
  OpBuilder &b_;
  Location loc_;
  Type f32_;
  int64_t rows_ = 0; // R = G * BQ
  Value acc_, mrow_, lrow_, alpha_, scores_, qpack_;
  bool accTransposed_ = false;
  bool prefetchV_ = false; // decode kernel: pvRows prefetches V rows ahead
  // Headed decode kernel, f32 or bf16 K/V: each block's K and V rows are
  // read once in address order before its compute (readAhead), nothing is
  // prefetched.
  bool readAhead_ = false;
  const bool bf16DotAllowed_;
  const bool readAheadAsked_;
  // QKᵀ on vdpbf16ps: Q and K bf16 and allowed. qpack_ then holds bf16 Q in
  // pairs of dims (see emitPrefill / emitDecode).
  bool dot_ = false;
  /// Elements per vector of the decode kernel's q rows and K loads: 16 f32,
  /// or 32 bf16 for vdpbf16ps.
  int64_t qkLanes() const { return dot_ ? 2 * kLanes : kLanes; }
};

} // namespace attnkit::compiled::vectorize

#endif // ATTNKIT_COMPILED_VECTOR_EMITTER_H_
