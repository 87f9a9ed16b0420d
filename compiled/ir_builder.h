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
/// Arguments (strides are run-time values):
///   q    memref<G x ? x D x T>   out  memref<G x ? x D x f32>
///   k    memref<? x D x T>       lse  memref<G x ? x f32>
///   v    memref<? x D x T>  (or memref<D x ? x T> for transposed V)
///   bias memref<G x ? x ? x f32> (ignored unless the mask is kBias)
///   scale f32, p0 index (= kv_len - q_len, the position of query 0),
///   window index (ignored unless kWindow).
/// Query i sits at position p = p0 + i; causal keeps keys j <= p, window keeps
/// p - window < j <= p (the op's modifier region). A row whose keys are all
/// masked yields zeros and LSE = -inf. attnkit-decompose-attention turns it
/// into the naive Linalg chain, attnkit-flash-attention into the flash form.
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

} // namespace attnkit::compiled

#endif // ATTNKIT_COMPILED_IR_BUILDER_H_
