//===- vectorize_flash_pass.cc - flash form -> AVX-512 kernels ------------===//
//
// `attnkit-vectorize-flash` takes the FlashAttention form that
// `attnkit-flash-attention` produces (a query-tile scf.for around the KV-tile
// scf.for, each loop and tile op carrying its #attnkit.flash_role) and
// replaces each
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
//   horizontal reductions). P·V: accᵀ[D][R] += V(j, d) (broadcast) x Pᵀ[j][:]
//   (contiguous Pᵀ rows), register block 4 dims x 64 rows, for every V
//   layout (V[j][d] or Vᵀ[d][j]); the epilogue transposes accᵀ back 16 x 16
//   in registers. (An acc[R][D] fed by contiguous V rows, bf16 widened per
//   load, took 1.02-1.04x the time of bf16 prefills; see
//   pvTransposedPrefill.) A bf16 or int8 K (QKᵀ not on vdpbf16ps) and V are
//   widened to f32 tiles once per KV tile, so every broadcast is a load.
//
// * decode (any other query tile; the backend uses 1). R = G*BQ is small, so
//   the kernel streams K rows at full vector width: s[r][j] = reduce(K[j][:] x
//   q[r][:]); the softmax runs along keys on S[R][BK]; P·V streams V rows
//   (or, transposed, reduces along Vᵀ rows with masked loads). Inside a
//   headed kernel's head_loop (KernelSpec::headed: a band of kv heads, each
//   memref a headSlice of the loop's head) the heads go inside each KV
//   tile instead: per-head state for the band, QKᵀ and P·V 16 keys at a
//   time with a loop over the heads inside (a BSHD cache's position rows
//   read whole), the head loop left one trip.
//
// Before (fused form, abbreviated):
//   %r:2 = scf.for %i0 = %c0 to %m step %c16 iter_args(%o, %lse)
//                  {attnkit.flash_role = #attnkit.flash_role<query_loop>} {
//     %lo, %hi = <key range>
//     %f:3 = scf.for %j0 = %lo to %hi step %c64 iter_args(...)
//                    {... <kv_loop>} {
//       linalg.generic {... <qk>} ...  linalg.generic {... <modifier>} ...
//       linalg.generic {... <pv>} ...
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
// An i8 K/V (the key_scale and value_scale ops of the fused form): both
// kernels load the int8 rows as they are (vector<16xi8>, a quarter of the
// f32 bytes) and convert them in registers (arith.sitofp: vpmovsxbd +
// vcvtdq2ps; the prefill kernel into its f32 tiles); the keys' scales multiply
// the scores as the softmax loads them, before the modifier, and the values'
// scales P as it is stored for P.V, after its row sum went into l -- the simd
// backend's scheme, one multiply per score, no dequantized row in memory.
//
// A loop whose modifier uses something this pass cannot re-emit on vectors is
// left alone (the linalg path then lowers it).
//
//===----------------------------------------------------------------------===//

#include "compiled/attnkit_dialect.h"
#include "compiled/passes.h"
#include "compiled/vector_emitter.h"
#include "compiled/vectorize_match.h"

#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Pass/Pass.h"

using namespace mlir;

namespace attnkit::compiled {

#define GEN_PASS_DEF_VECTORIZEFLASH
#include "compiled/Passes.h.inc"

namespace {

using vectorize::Emitter;
using vectorize::FlashLoop;
using vectorize::matchFlashLoop;

/// A memref type for `t` that any of its buffers casts to: dynamic strides
/// and offset but a unit innermost stride (the emitter's vector loads).
MemRefType anyLayoutOf(RankedTensorType t) {
  SmallVector<int64_t> strides(t.getRank(), ShapedType::kDynamic);
  strides.back() = 1;
  return MemRefType::get(
      t.getShape(), t.getElementType(),
      StridedLayoutAttr::get(t.getContext(), ShapedType::kDynamic, strides));
}

/// The flash loop of an attention computed inside a loop (an attention
/// block's head loop: its Q is a projection, its K/V slices of the cache
/// tensor, its results consumed by tensor ops) reads and writes memrefs
/// here as the emitter needs: each tile op's source tensor through a
/// read-only bufferization.to_buffer (one-shot-bufferize resolves it to the
/// tensor's buffer), each result into a fresh buffer the rest reads back
/// with to_tensor.
void bindToBuffers(scf::ForOp outer) {
  OpBuilder b(outer);
  Location loc = outer.getLoc();
  auto bind = [&](Value tileOperand) {
    auto slice = tileOperand.getDefiningOp<tensor::ExtractSliceOp>();
    if (!slice || slice.getSource().getDefiningOp<bufferization::ToTensorOp>())
      return;
    Value src = slice.getSource();
    auto type = cast<RankedTensorType>(src.getType());
    Value buffer = bufferization::ToBufferOp::create(b, loc, anyLayoutOf(type),
                                                     src, /*read_only=*/true);
    Value view = bufferization::ToTensorOp::create(
        b, loc, type, buffer, /*restrict=*/true, /*writable=*/false);
    src.replaceUsesWithIf(view, [&](OpOperand &use) {
      return outer->isAncestor(use.getOwner());
    });
  };
  outer.getBody()->walk([&](linalg::GenericOp op) {
    if (hasFlashRole(op, FlashRole::Qk)) {
      bind(op.getDpsInputs()[0]);
      bind(op.getDpsInputs()[1]);
    } else if (hasFlashRole(op, FlashRole::Pv)) {
      bind(op.getDpsInputs()[1]);
    } else if (hasFlashRole(op, FlashRole::Modifier) &&
               op.getNumDpsInputs() == 2) {
      bind(op.getDpsInputs()[1]);
    } else if (hasFlashRole(op, FlashRole::KeyScale) ||
               hasFlashRole(op, FlashRole::ValueScale)) {
      bind(op.getDpsInputs()[0]);
    }
  });
  b.setInsertionPointAfter(outer);
  for (unsigned r = 0; r < 2; ++r) {
    Value res = outer.getResult(r);
    if (res.hasOneUse() &&
        isa<bufferization::MaterializeInDestinationOp>(*res.getUsers().begin()))
      continue;
    auto type = cast<RankedTensorType>(res.getType());
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(outer);
    SmallVector<Value> dynamic;
    for (int64_t i = 0; i < type.getRank(); ++i)
      if (type.isDynamicDim(i))
        dynamic.push_back(
            tensor::DimOp::create(b, loc, outer.getInitArgs()[r], i));
    Value buffer = memref::AllocOp::create(
        b, loc, MemRefType::get(type.getShape(), type.getElementType()),
        dynamic, b.getI64IntegerAttr(64));
    b.setInsertionPointAfter(outer);
    auto mat = bufferization::MaterializeInDestinationOp::create(
        b, loc, TypeRange{}, res, buffer, /*restrict=*/true,
        /*writable=*/true);
    Value back = bufferization::ToTensorOp::create(b, loc, type, buffer,
                                                   /*restrict=*/true,
                                                   /*writable=*/false);
    res.replaceAllUsesExcept(back, mat);
  }
}

class VectorizeFlashPass : public impl::VectorizeFlashBase<VectorizeFlashPass> {
public:
  using VectorizeFlashBase::VectorizeFlashBase;
  void runOnOperation() override {
    // Attentions inside other loops first get memrefs to work on.
    getOperation().walk([&](scf::ForOp op) {
      if (hasFlashRole(op, FlashRole::QueryLoop) &&
          op->getParentOfType<scf::ForOp>())
        bindToBuffers(op);
    });
    std::vector<FlashLoop> loops;
    getOperation().walk([&](scf::ForOp op) {
      if (!hasFlashRole(op, FlashRole::QueryLoop))
        return;
      if (auto f = matchFlashLoop(op)) {
        loops.push_back(*f);
        return;
      }
      // A performance cliff worth a word, not an error. The roles were
      // for this pass: the loops left to the linalg path drop them (later
      // canonicalizations may fold a one-iteration query loop away).
      op->emitRemark("not vectorized: not the flash form this pass "
                     "emits vector code for; left for the linalg path");
      op->walk([](Operation *inner) { inner->removeAttr(kFlashRoleAttrName); });
    });
    for (FlashLoop &f : loops) {
      OpBuilder b(f.outer);
      Emitter(f, b, bf16Dot, readAhead).emit();
      for (Operation *mat : f.materializations)
        mat->erase();
      f.outer->erase();
    }
  }
};

} // namespace

} // namespace attnkit::compiled
