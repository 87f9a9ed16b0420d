// Builds the attention of one specialization (an attnkit.attention on
// tensors) and the KV append.
#ifndef ATTNKIT_COMPILED_IR_BUILDER_H_
#define ATTNKIT_COMPILED_IR_BUILDER_H_

#include "compiled/kernel_spec.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

namespace mlir {
class DialectRegistry;
class MLIRContext;
} // namespace mlir

namespace attnkit::compiled {

/// Name of the kernel function every builder emits.
inline constexpr const char *kKernelName = "attention";

/// Registers every dialect (and interface implementation) the compiled tier
/// needs, from the naive IR down to the LLVM dialect.
void registerCompiledDialects(mlir::DialectRegistry &registry);

/// Emits `func.func @attention` computing, for one (batch, kv-head) pair and
/// its `group` query heads, one attnkit.attention (AttnkitOps.td) on tensor
/// views of the arguments, its results materialized into `out` and `lse`:
///   S = Q·Kᵀ·scale; S' = mask(S [+ bias]); P = softmax(S'); O = P·V;
///   LSE = log rowsum exp S'
/// head_dim and group are static, every sequence length is dynamic.
/// Arguments, in the order q, k, v, bias, k_scale, v_scale, out, lse, scale,
/// p0, window (strides are run-time values):
///   q    memref<G x ? x D x T>   out  memref<G x ? x D x f32>
///   k    memref<? x D x T>       lse  memref<G x ? x f32>
///   v    memref<? x D x T>  (or memref<D x ? x T> for transposed V)
///   bias memref<G x ? x ? x f32> (ignored unless the mask is kBias)
///   k_scale, v_scale memref<? x f32> (unit stride; ignored unless K/V are
///        i8, spec.kvElem: then k and v are memrefs of i8 and key j is
///        k[j, :] * k_scale[j], value j v[j, :] * v_scale[j])
///   scale f32, p0 index (= kv_len - q_len, the position of query 0),
///   window index (ignored unless kWindow).
/// Query i sits at position p = p0 + i; causal keeps keys j <= p, window keeps
/// p - window < j <= p (the op's modifier region). A row whose keys are all
/// masked yields zeros and LSE = -inf. attnkit-decompose-attention turns it
/// into the naive Linalg chain, attnkit-flash-attention into the flash form.
/// A headed spec (KernelSpec::headed) covers a band of H adjacent KV heads:
/// every memref gains a leading dimension of H (run-time; q, bias, out
/// H x G x ..., k, v H x ..., the scales H x ?, lse H x G x ?) and the body
/// is an scf.for over the heads (flash role head_loop) around the attention
/// of one head on its headSlice views.
mlir::OwningOpRef<mlir::ModuleOp> buildAttention(mlir::MLIRContext &ctx,
                                                 const KernelSpec &spec);

/// Name of the KV-append function buildKvAppend emits.
inline constexpr const char *kAppendName = "kv_append";

/// Emits `func.func @kv_append(%cache, %tokens, %b, %h, %pos, %n)`: a
/// subview [b, h, pos : pos + n, 0 : D] of the preallocated cache
///   cache  memref<? x ? x ? x D x T> (strides of the cache's layout)
///   tokens memref<? x ? x ? x D x T>
/// and a linalg.copy of tokens[b, h, 0 : n, :] into it. No allocation.
mlir::OwningOpRef<mlir::ModuleOp> buildKvAppend(mlir::MLIRContext &ctx,
                                                const AppendSpec &spec);

/// Name of the attention-block function buildAttentionBlock emits.
inline constexpr const char *kBlockName = "attention_block";

/// Emits `func.func @attention_block`: seed 000's Megatron-style listing on
/// tensors for one sequence and a band of n KV heads (n = the caches' first
/// dimension, a run-time value, so callers may split the heads):
///   Q = X · Wq [+ bq]                 linalg.matmul    [s, n·G·D]
///   Q4 = expand_shape Q               tensor.expand_shape [s, n, G, D]
///   Qt = transpose Q4                 linalg.transpose [n, G, s, D]
///   K = X · Wk [+ bk] per head        a contraction written head-major
///                                     straight into the cache slots
///                                     [n, p0 : p0 + s, D] (V likewise, or
///                                     [n, D, p0 : p0 + s] transposed)
///   O = attnkit.attention(Qt, K cache [n, 0 : p0 + s, D], V cache ...)
///   out = transpose O to [s, n·G·D], or out = O · Wo (a contraction over
///   heads, G and D).
/// attnkit-split-heads tiles it over the n heads. Arguments (unit stride
/// along each last dimension, every other stride a run-time value):
///   x  memref<s x hidden x f32>   wq, wk, wv memref<hidden x ? x W>
///   bq, bk, bv memref<? x f32> (read only with qkvBias)
///   wo memref<? x hidden x W> (rows n·G·D; read only with outputProjection)
///   (hidden too is a run-time size),
///   k_cache memref<n x ? x D x f32>, v_cache memref<n x ? x D x f32> (or
///   memref<n x D x ? x f32> transposed), out memref<s x n·G·D x f32> (or
///   memref<s x hidden x f32> with outputProjection),
///   scale f32, p0 index (the first new token's position), window index.
mlir::OwningOpRef<mlir::ModuleOp> buildAttentionBlock(mlir::MLIRContext &ctx,
                                                      const BlockSpec &spec);

} // namespace attnkit::compiled

#endif // ATTNKIT_COMPILED_IR_BUILDER_H_
