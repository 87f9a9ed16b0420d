//===- AttnkitOps.td - the attnkit dialect ------------------*- tablegen -*-===//
//
// The compiled tier's own dialect (IREE LinalgExt's model): one op that *is*
// attention, so passes match an op kind instead of sniffing the bodies of
// eight linalg.generics, and one attribute through which the flash rewrite
// hands its loop structure to the vectorizer. mlir-tblgen makes
// <build>/compiled/AttnkitDialect.{h,cpp}.inc, AttnkitOps.{h,cpp}.inc,
// AttnkitEnums.{h,cpp}.inc and AttnkitAttrs.{h,cpp}.inc from it.
//
//===----------------------------------------------------------------------===//

#ifndef ATTNKIT_COMPILED_ATTNKIT_OPS_TD
#define ATTNKIT_COMPILED_ATTNKIT_OPS_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/Interfaces/TilingInterface.td"
include "mlir/Interfaces/InferTypeOpInterface.td"

def Attnkit_Dialect : Dialect {
  let name = "attnkit";
  let summary = "Attention as one op, and the flash form's structure";
  let description = [{
    `attnkit.attention` is the whole attention of one GQA group; the
    `attnkit-decompose-attention` pass turns it into the naive Linalg chain
    and `attnkit-flash-attention` into the FlashAttention loops. The
    dialect also owns the `attnkit.flash_role` attribute those loops carry
    (verified here, so a role on the wrong kind of op is an error, not a
    silently ignored marker) and the `attnkit.spec` string on kernel
    functions.
  }];
  let cppNamespace = "::attnkit::compiled";
  let useDefaultAttributePrinterParser = 1;
  let hasOperationAttrVerify = 1;
}

class Attnkit_Op<string mnemonic, list<Trait> traits = []>
    : Op<Attnkit_Dialect, mnemonic, traits>;

//===----------------------------------------------------------------------===//
// The flash form's structure
//===----------------------------------------------------------------------===//

def Attnkit_FlashRole : I32EnumAttr<"FlashRole",
    "what an op of the flash form is to attnkit-vectorize-flash", [
      I32EnumAttrCase<"QueryLoop", 0, "query_loop">,
      I32EnumAttrCase<"KvLoop", 1, "kv_loop">,
      I32EnumAttrCase<"Qk", 2, "qk">,
      I32EnumAttrCase<"Modifier", 3, "modifier">,
      I32EnumAttrCase<"Pv", 4, "pv">,
      I32EnumAttrCase<"HeadLoop", 5, "head_loop">,
      I32EnumAttrCase<"KeyScale", 6, "key_scale">,
      I32EnumAttrCase<"ValueScale", 7, "value_scale">,
      // The index of a query tile's last row, from which the tile's key
      // bound is computed: the vectorizer recomputes the bound for each
      // vector of rows (a causal diagonal tile skips what no row sees).
      I32EnumAttrCase<"LastRow", 8, "last_row">
    ]> {
  let cppNamespace = "::attnkit::compiled";
  let genSpecializedAttr = 0;
}

def Attnkit_FlashRoleAttr : EnumAttr<Attnkit_Dialect, Attnkit_FlashRole,
                                     "flash_role"> {
  let assemblyFormat = "`<` $value `>`";
}

//===----------------------------------------------------------------------===//
// attnkit.attention
//===----------------------------------------------------------------------===//

def Attnkit_AttentionOp : Attnkit_Op<"attention", [Pure, SingleBlock,
    AttrSizedOperandSegments,
    DeclareOpInterfaceMethods<TilingInterface, ["getLoopIteratorTypes",
        "getIterationDomain", "getTiledImplementation",
        "getResultTilePosition", "generateResultTileValue"]>,
    DeclareOpInterfaceMethods<ReifyRankedShapedTypeOpInterface,
        ["reifyResultShapes"]>]> {
  let summary = "Scaled dot-product attention of one GQA group, or of H";
  let description = [{
    For G query heads sharing one K/V head, M queries, N keys, head_dim D:

      x[g,i,j]   = scale * sum_d Q[g,i,d] * K[j,d]
      s'[g,i,j]  = modifier(i, j, x[g,i,j] [, bias[g,i,j]])
      P          = softmax_j(s')        (a row of only -inf gives P = 0)
      output     = P . V                 (V[d,j] when `v_transposed`)
      lse[g,i]   = log sum_j exp(s'[g,i,j])   (-inf for an empty row)

    Q is tensor<G x M x D x T>, K tensor<N x D x T>, V tensor<N x D x T>
    (or D x N), T f32 or bf16, accumulation in f32; the bias, when given,
    tensor<G x M x N x f32>. A quantized KV cache has K and V of i8 with
    `k_scale` and `v_scale`, tensor<N x f32> each (both or neither, and
    only with i8): key j is K[j,:] * k_scale[j], value j V[j,:] *
    v_scale[j] (runtime/dtype.h's QuantizeRowI8). The lowerings never
    materialize those products: k_scale multiplies the integer dot
    products (x[g,i,j] = scale * k_scale[j] * sum_d Q K), v_scale the
    probabilities once the row sum has been taken.

    With a leading KV-head dimension H (Q H x G x M x D, K and V H x N x D,
    bias H x G x M x N, output H x G x M x D, lse H x G x M, scales H x N)
    the op is the attention of H independent groups: it then
    implements TilingInterface over H (one parallel loop), which is how
    attnkit-split-heads fuses it, with its producers, into a loop over heads;
    a tile of one head is rewritten to the single-group form. The modifier region maps (query index i, key
    index j, the scaled score x, the bias element) to the score the softmax
    sees: masks select -inf, a bias is added. Its arguments are
    `(%i: index, %j: index, %x: f32[, %bias: f32])`, its terminator
    `attnkit.yield`; it may use values from above (the query's position,
    a window). attnkit-flash-attention narrows the KV range when the mask
    is `select(j <= f(i) [and j > g(i)], ..., -inf)` with f, g
    non-decreasing in i, and folds log2(e) into the scale when x enters the
    score only through additions, subtractions and such selects.

    ```mlir
    %o, %lse = attnkit.attention q(%q : tensor<2x?x64xf32>)
        k(%k : tensor<?x64xf32>) v(%v : tensor<?x64xf32>) scale(%s)
        -> tensor<2x?x64xf32>, tensor<2x?xf32> {
    ^bb0(%i: index, %j: index, %x: f32):
      attnkit.yield %x : f32
    }
    // An i8 cache:
    %o, %lse = attnkit.attention q(%q : tensor<2x?x64xf32>)
        k(%k : tensor<?x64xi8>) k_scale(%ks : tensor<?xf32>)
        v(%v : tensor<?x64xi8>) v_scale(%vs : tensor<?xf32>) scale(%s)
        -> tensor<2x?x64xf32>, tensor<2x?xf32> { ... }
    ```
  }];
  let arguments = (ins AnyRankedTensor:$query, AnyRankedTensor:$key,
                       AnyRankedTensor:$value, F32:$scale,
                       Optional<AnyRankedTensor>:$bias,
                       Optional<AnyRankedTensor>:$key_scale,
                       Optional<AnyRankedTensor>:$value_scale,
                       UnitAttr:$v_transposed);
  let results = (outs AnyRankedTensor:$output, AnyRankedTensor:$lse);
  let regions = (region SizedRegion<1>:$modifier);
  let assemblyFormat = [{
    `q` `(` $query `:` type($query) `)`
    `k` `(` $key `:` type($key) `)`
    (`k_scale` `(` $key_scale^ `:` type($key_scale) `)`)?
    `v` `(` $value `:` type($value) `)` (`v_transposed` $v_transposed^)?
    (`v_scale` `(` $value_scale^ `:` type($value_scale) `)`)?
    `scale` `(` $scale `)`
    (`bias` `(` $bias^ `:` type($bias) `)`)?
    `->` type($output) `,` type($lse) attr-dict-with-keyword $modifier
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The modifier's block and its arguments.
    ::mlir::Block &modifierBlock() { return getModifier().front(); }
    ::mlir::BlockArgument queryIndexArg() { return modifierBlock().getArgument(0); }
    ::mlir::BlockArgument keyIndexArg() { return modifierBlock().getArgument(1); }
    ::mlir::BlockArgument scoreArg() { return modifierBlock().getArgument(2); }
    /// Null without a bias.
    ::mlir::BlockArgument biasArg() {
      return getBias() ? modifierBlock().getArgument(3) : ::mlir::BlockArgument();
    }
    /// K/V stored as int8 with per-key scales.
    bool quantizedKv() { return getKeyScale() != nullptr; }
    /// With a leading KV-head dimension (rank-4 Q).
    bool hasHeadDim() { return getQuery().getType().getRank() == 4; }
    int64_t groupSize() {
      return getQuery().getType().getDimSize(hasHeadDim() ? 1 : 0);
    }
    int64_t headDim() {
      return getQuery().getType().getDimSize(hasHeadDim() ? 3 : 2);
    }
  }];
}

def Attnkit_YieldOp : Attnkit_Op<"yield",
    [Pure, Terminator, ReturnLike, HasParent<"AttentionOp">]> {
  let summary = "The modified score of an attnkit.attention modifier";
  let arguments = (ins F32:$value);
  let assemblyFormat = "$value attr-dict `:` type($value)";
}

#endif // ATTNKIT_COMPILED_ATTNKIT_OPS_TD
