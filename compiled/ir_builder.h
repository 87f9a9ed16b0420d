// Builds the naive attention of one specialization as Linalg on tensors.
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
/// its `group` query heads, the naive attention (materialized scores, a
/// separate softmax, then P·V):
///   S = Q·Kᵀ; S' = mask(S·scale [+ bias]); M = rowmax S'; E = exp(S' - M);
///   L = rowsum E; P = E / L; O = P·V; LSE = M + log L
/// as linalg.generic ops on tensors. head_dim and group are static, every
/// sequence length is dynamic. Arguments (strides are run-time values):
///   q    memref<G x ? x D x T>   out  memref<G x ? x D x f32>
///   k    memref<? x D x T>       lse  memref<G x ? x f32>
///   v    memref<? x D x T>  (or memref<D x ? x T> for transposed V)
///   bias memref<G x ? x ? x f32> (ignored unless the mask is kBias)
///   scale f32, p0 index (= kv_len - q_len, the position of query 0),
///   window index (ignored unless kWindow).
/// Query i sits at position p = p0 + i; causal keeps keys j <= p, window keeps
/// p - window < j <= p. A row whose keys are all masked yields zeros and
/// LSE = -inf.
mlir::OwningOpRef<mlir::ModuleOp> buildNaiveAttention(mlir::MLIRContext &ctx,
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
