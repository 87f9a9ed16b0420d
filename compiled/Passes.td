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

def DecomposeAttention
    : Pass<"attnkit-decompose-attention", "mlir::func::FuncOp"> {
  let summary = "Lower attnkit.attention to the naive Linalg chain";
  let description = [{
    Replaces each `attnkit.attention` by the naive attention of the seed's
    first listing, one `linalg.generic` per step over whole tensors: S =
    Q.K^T, the score modifier (x = S * scale, then the op's region with i, j
    as linalg.index 1, 2), the row max, exp(S' - max), the row sum, the
    division (0 for a fully masked row) and P.V, plus the log-sum-exp. The
    S x S scores are materialized. This is `attnkit-compile --emit=naive`,
    and what lowers an attention op attnkit-flash-attention left alone.

    Before:
      %o, %lse = attnkit.attention q(%q : tensor<2x?x64xf32>) k(...) v(...)
          scale(%s) -> tensor<2x?x64xf32>, tensor<2x?xf32> {
      ^bb0(%i: index, %j: index, %x: f32):
        attnkit.yield %x : f32
      }
    After:
      %s = linalg.generic {Q.K^T} -> tensor<2x?x?xf32>
      %s2 = linalg.generic {x = s * scale; modifier}
      %m = linalg.generic {max}; %e = linalg.generic {exp(s2 - m)}
      %l = linalg.generic {sum}; %p = linalg.generic {e / l}
      %o = linalg.generic {P.V}; %lse = linalg.generic {m + log l}
    With an i8 K/V (`k_scale(%ks) ... v_scale(%vs)`), Q.K^T and P.V read the
    integer rows (arith.sitofp in their bodies) and two more generics apply
    the per-key scales, no dequantized K/V materialized:
      %s = linalg.generic {Q.K^T}; %s = linalg.generic {s * ks[j]} outs(%s)
      ... %p = linalg.generic {e / l}; %p = linalg.generic {p * vs[j]}
      %o = linalg.generic {P.V}
    A function without attnkit.attention is left as it is.
  }];
  let dependentDialects = [
    "mlir::arith::ArithDialect", "mlir::linalg::LinalgDialect",
    "mlir::math::MathDialect", "mlir::tensor::TensorDialect"
  ];
}

def SplitHeads : Pass<"attnkit-split-heads", "mlir::func::FuncOp"> {
  let summary = "Tile an attention block over KV heads, fusing its producers";
  let description = [{
    The seed's Megatron-style (split-head) tiling. For each
    `attnkit.attention` with a leading KV-head dimension H, the op that
    consumes its output (the transpose back to token-major rows, or the
    output projection's contraction, which reduces over heads) is tiled by
    one along its loop that walks the attention's heads, with upstream's
    `scf::tileConsumerAndFuseProducersUsingSCF`: the attention (its
    TilingInterface) and, through it, the Q projection's transpose, the
    tensor.expand_shape that splits its columns into heads and the
    projection matmul itself are fused into the loop, each on its own
    head's slice of the weights. Two things upstream needed help with,
    both items of the seed's proposal: a slice does not pass a
    tensor.expand_shape (the bubble-up patterns run as the fusion's
    cleanup patterns), and a slice of a reduction loop's iter_arg must not
    pull the accumulator's initialization into the loop (the control
    function refuses destination slices of loop-carried values). Each
    fused attention tile of one head is then rewritten to the single-group
    form, which attnkit-flash-attention takes.

    Before:
      %q = linalg.matmul ins(%x, %wq) -> tensor<?x(H*G*D)xf32>
      %e = tensor.expand_shape %q -> tensor<?xHxGxDxf32>
      %t = linalg.transpose ins(%e) -> tensor<HxGx?xDxf32>
      %o, %l = attnkit.attention q(%t) k(%k : tensor<Hx?xDxf32>) ...
      %y = linalg.transpose ins(%o) -> tensor<?xHxGxDxf32>
    After:
      scf.for %h = 0 to H step 1 iter_args(%acc = ...) {
        %wq_h = tensor.extract_slice %wq[0, %h * G*D] [hidden, G*D]
        %q_h = linalg.matmul ins(%x, %wq_h) -> tensor<?x(G*D)xf32>
        ... linalg.transpose ... attnkit.attention q(tensor<Gx?xDxf32>) ...
      } {attnkit.flash_role = #attnkit.flash_role<head_loop>}
    No tensor of all heads' queries exists outside the loop. A function
    without a headed attention is left as it is.
  }];
  let dependentDialects = [
    "mlir::arith::ArithDialect", "mlir::linalg::LinalgDialect",
    "mlir::scf::SCFDialect", "mlir::tensor::TensorDialect"
  ];
}

def FlashAttention : Pass<"attnkit-flash-attention", "mlir::func::FuncOp"> {
  let summary = "Rewrite attnkit.attention into the FlashAttention form";
  let description = [{
    Replaces each `attnkit.attention` by one loop over query tiles holding
    one loop over KV tiles that carries the running max m, the running sum
    l and the output accumulator (online softmax): per KV tile one Q.K^T,
    the score modifier (the op's region, its indices offset to the tile),
    the new max, the rescale of l and the accumulator by exp2(m_old -
    m_new), and one P.V -- each built by the same helpers as the naive
    chain (structured_builders.h). No S x S tensor exists and nothing is
    recomputed; a causal or window mask also narrows the KV loop's range to
    the keys a query tile can see (the upper bound is that of the tile's
    last row, an op marked `last_row` for the vectorizer). log2(e) is folded into the scale once
    when the modifier is additive in the score, else applied to its result.

    Before:
      %o, %lse = attnkit.attention q(%q : tensor<Gx?xDxf32>) k(%k) v(%v)
          scale(%s) -> tensor<Gx?xDxf32>, tensor<Gx?xf32> { <modifier> }
    After:
      scf.for %i0 = 0 to %nq step <query-tile> iter_args(%out, %lse) {
        scf.for %j0 = %lo to %hi step <kv-tile>
            iter_args(%m, %l, %acc) -> (Gx?, Gx?, Gx?xD) {
          linalg.generic {Q.K^T} {attnkit.flash_role = #attnkit.flash_role<qk>}
          ...
        } {attnkit.flash_role = #attnkit.flash_role<kv_loop>}
      } {attnkit.flash_role = #attnkit.flash_role<query_loop>}
    An i8 K/V (the op's k_scale and v_scale): Q.K^T reads the integer rows
    and the next generic multiplies each key's score by its scale (role
    key_scale); P is multiplied by the values' scales after the row sum l
    has been taken (role value_scale), so P.V of the integer rows is the
    weighted sum of the dequantized values:
          linalg.generic {s * k_scale[j0 + j]} outs(%s)
              {attnkit.flash_role = #attnkit.flash_role<key_scale>}
          ... %l' = l * alpha + sum(p)
          linalg.generic {p * v_scale[j0 + j]} outs(%p)
              {attnkit.flash_role = #attnkit.flash_role<value_scale>}
          linalg.generic {P.V} ...
    The loops and the Q.K^T, modifier, scale and P.V tile ops carry their
    `attnkit.flash_role` for attnkit-vectorize-flash. Linalg ops that
    merely look like attention (a naive chain) are left as they are.
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
    Takes the query-tile loops attnkit-flash-attention made (their
    `attnkit.flash_role`: query_loop, kv_loop, and the tile ops qk,
    modifier, pv) and replaces each by register-blocked
    vector<16xf32> code on the memrefs the tensors came from, keeping the
    loop bounds, each tile's key range and the score modifier (re-emitted
    on vectors). Prefill (query tile a multiple of 16): Q packed as Q^T once
    per tile, Q.K^T in 4 keys x 64 rows register blocks, the online softmax
    along rows of S^T, P.V in 4 rows x 64 columns blocks; with one query
    head per tile, each vector of 16 rows gets its own key bound (the
    `last_row` slice re-evaluated for its last row), so the diagonal tile of
    a causal mask computes only the keys each vector sees. Decode (any other
    tile): K and V rows streamed at full vector width. A decode loop in a
    headed kernel's head_loop (every memref a headSlice of the loop's head)
    is emitted with the heads inside each KV tile: per-head state for the
    band allocated before the loop, Q.K^T and P.V 16 keys at a time with a
    loop over the heads inside, the head loop left one trip. An i8 K/V (the
    key_scale and value_scale ops): its rows are loaded as vector<16xi8>
    and converted in registers (arith.sitofp), the keys' scales multiply
    the scores before the modifier, the values' scales P after the row
    sum -- one multiply per score, no dequantized row anywhere.

    Before: scf.for ... {attnkit.flash_role = #attnkit.flash_role<query_loop>}
            { scf.for ... <kv_loop> { linalg.generic <qk> ... }}
    After:  memref.alloca tiles; scf.for { <pack Q^T>; scf.for { vector.fma
            blocks; online softmax on vectors; P.V } <out = acc / l> }
    A loop without the role, or whose modifier cannot be re-emitted on
    vectors, is left alone (the linalg path lowers it; the roles of its
    loops and tile ops are dropped).
  }];
  let dependentDialects = [
    "mlir::arith::ArithDialect", "mlir::math::MathDialect",
    "mlir::memref::MemRefDialect", "mlir::scf::SCFDialect",
    "mlir::vector::VectorDialect", "mlir::x86vector::X86VectorDialect",
    "mlir::LLVM::LLVMDialect"
  ];
  let options = [
    Option<"bf16Dot", "bf16-dot", "bool", /*default=*/"false",
           "QK^T of a bf16 Q and K on AVX512_BF16's vdpbf16ps "
           "(x86vector.avx512.dot: two bf16 products per f32 lane, half the "
           "instructions of widened f32 FMAs); the code then needs a CPU "
           "with AVX512_BF16 (KernelSpec::bf16Dot says whether it has one)">,
    Option<"readAhead", "read-ahead", "bool", /*default=*/"false",
           "a decode kernel of one KV head reads each KV tile's K and V "
           "rows once, in address order, before its compute, instead of "
           "prefetching them (KernelSpec::readAhead; f32 and bf16 K/V; "
           "headed kernels read ahead regardless)">
  ];
}

def ApproximateMath : Pass<"attnkit-approximate-math"> {
  let summary = "Replace exp/exp2/log/log2 by polynomial approximations";
  let description = [{
    math.exp(x) becomes math.exp2(x * log2(e)) and math.exp2 on f32
    2^floor(x) * p(x - floor(x)), p of degree 6 (scalars and vectors; arith
    ops, math.fma and math.floor: ~13 AVX-512 instructions per vector);
    math.log2(x) becomes math.log(x) * log2(e) and upstream's polynomial
    replaces math.log. So the softmax exponentials vectorize instead of
    calling libm per element. They stay within a few ulp of libm and keep
    exp2(-inf) = 0 and NaN in, NaN out (exp2 flushes results below 2^-126
    to 0). f64 and other math ops are left as they are.

    With `avx512`, exp2 of a vector<16xf32> is instead p(x - n) scaled by
    2^n in one x86vector.avx512.mask.scalef, f = x - round(x) from one
    vreduceps (llvm.x86.avx512.mask.reduce.ps.512 through
    llvm.call_intrinsic), n = x - f and p the polynomial of
    runtime/exp2_poly.h (simd's): ~10 instructions, zero (by the scalef's
    write mask) where x < -125.5, so no result is subnormal. Only for code
    that runs on AVX-512F and DQ (the JIT's host; attnkit-compile's
    --avx512-exp2).

    Before: %p = math.exp2 %x : f32
    After:  <range reduction, a polynomial, exponent bit insertion>
            (math.fma / math.floor / arith.fptosi / arith.bitcast ...)
  }];
  let options = [
    Option<"avx512", "avx512", "bool", /*default=*/"false",
           "exp2 of vector<16xf32> on x86vector.avx512.mask.scalef (code "
           "for AVX-512F + DQ CPUs only)">
  ];
  let dependentDialects = [
    "mlir::arith::ArithDialect", "mlir::math::MathDialect",
    "mlir::vector::VectorDialect", "mlir::x86vector::X86VectorDialect",
    "mlir::LLVM::LLVMDialect"
  ];
}

#endif // ATTNKIT_COMPILED_PASSES_TD
