//===- Passes.td - the compiled tier's passes --------------------*- tablegen -*-===//
//
// Declarations of attnkit's own passes: mlir-tblgen -gen-pass-decls makes
// compiled/Passes.h.inc (options structs with their defaults, impl::...Base
// classes, create functions, registerAttnkitPasses). Each pass's code lives
// in its own file; the examples below are what its lit test checks
// (compiled/test/<pass>.mlir).
//
//===----------------------------------------------------------------------===//

#ifndef ATTNKIT_COMPILED_PASSES_TD
#define ATTNKIT_COMPILED_PASSES_TD

include "mlir/Pass/PassBase.td"

def FlashAttention : Pass<"attnkit-flash-attention", "mlir::func::FuncOp"> {
  let summary = "Rewrite naive Linalg attention into the FlashAttention form";
  let description = [{
    Finds the naive attention chain that ir_builder.cc emits -- S = Q.K^T
    (scaled, masked by the modifier), a max reduction, exp, a sum reduction,
    the division and P.V, each a `linalg.generic` over an S x S tensor -- and
    replaces it by one loop over query tiles holding one loop over KV tiles
    that carries the running max m, the running sum l and the output
    accumulator (online softmax): per KV tile one Q.K^T, the mask, the new
    max, the rescale of l and the accumulator by exp2(m_old - m_new), and
    one P.V. No S x S tensor survives and nothing is recomputed; a causal or
    window mask also narrows the KV loop's range to the keys a query tile
    can see. log2(e) is folded into the scale once.

    Before (naive, sequence lengths dynamic):
      %s = linalg.generic {... Q.K^T ...} -> tensor<Gx?x?xf32>
      %m = linalg.generic {... max ...}; %e = linalg.generic {... exp ...}
      %l = linalg.generic {... sum ...}; %o = linalg.generic {... P.V ...}
    After:
      scf.for %i0 = 0 to %nq step <query-tile> iter_args(%out, %lse) {
        scf.for %j0 = %lo to %hi step <kv-tile>
            iter_args(%m, %l, %acc) -> (Gx?, Gx?, Gx?xD) { ... }
      }
    A function without the chain (or with only a part of it) is left as it
    is. The loops and tile ops carry `attnkit.flash.*` markers for
    attnkit-vectorize-flash.
  }];
  let dependentDialects = [
    "mlir::arith::ArithDialect", "mlir::bufferization::BufferizationDialect",
    "mlir::linalg::LinalgDialect", "mlir::math::MathDialect",
    "mlir::scf::SCFDialect", "mlir::tensor::TensorDialect"
  ];
  let options = [
    Option<"queryTile", "query-tile", "int64_t",
           /*default=*/"::attnkit::compiled::kPrefillQueryTile",
           "Query rows per tile (per query head of the GQA group)">,
    Option<"kvTile", "kv-tile", "int64_t",
           /*default=*/"::attnkit::compiled::kKvTile",
           "Keys per tile of the online-softmax loop">,
  ];
}

def VectorizeFlash : Pass<"attnkit-vectorize-flash", "mlir::func::FuncOp"> {
  let summary = "Replace the fused flash loops by register-blocked vector code";
  let description = [{
    Takes the query-tile loops attnkit-flash-attention marked
    (`attnkit.flash.query_loop`, the tile ops `attnkit.flash.qk`,
    `.modifier`, `.pv`) and replaces each by register-blocked
    vector<16xf32> code on the memrefs the tensors came from, keeping the
    loop bounds, each tile's key range and the score modifier (re-emitted
    on vectors). Prefill (query tile a multiple of 16): Q packed as Q^T once
    per tile, Q.K^T in 4 keys x 64 rows register blocks, the online softmax
    along rows of S^T, P.V in 4 rows x 64 columns blocks. Decode (any other
    tile): K and V rows streamed at full vector width.

    Before: scf.for ... {attnkit.flash.query_loop} { scf.for ...
            {attnkit.flash.kv_loop} { linalg.generic {attnkit.flash.qk} ...}}
    After:  memref.alloca tiles; scf.for { <pack Q^T>; scf.for { vector.fma
            blocks; online softmax on vectors; P.V } <out = acc / l> }
    A loop without the marker, or whose modifier cannot be re-emitted on
    vectors, is left alone (the linalg path lowers it).
  }];
  let dependentDialects = [
    "mlir::arith::ArithDialect", "mlir::math::MathDialect",
    "mlir::memref::MemRefDialect", "mlir::scf::SCFDialect",
    "mlir::vector::VectorDialect"
  ];
}

def ApproximateMath : Pass<"attnkit-approximate-math"> {
  let summary = "Replace exp/exp2/log/log2 by polynomial approximations";
  let description = [{
    math.exp2(x) becomes math.exp(x * ln 2) and math.log2(x) math.log(x) *
    log2(e); then upstream's polynomial approximations replace math.exp and
    math.log on f32 (scalars and vectors; arith ops, math.fma and
    math.floor), so the softmax exponentials vectorize instead of calling
    libm per element. They stay within a few ulp of libm and keep
    exp2(-inf) = 0 and NaN in, NaN out. f64 and other math ops are left as
    they are.

    Before: %p = math.exp2 %x : f32
    After:  <range reduction, a polynomial, exponent bit insertion>
            (math.fma / math.floor / arith.fptosi / arith.bitcast ...)
  }];
  let dependentDialects = [
    "mlir::arith::ArithDialect", "mlir::math::MathDialect",
    "mlir::vector::VectorDialect"
  ];
}

#endif // ATTNKIT_COMPILED_PASSES_TD
