// The attnkit dialect (AttnkitOps.td): attnkit.attention, attnkit.yield and
// the attnkit.flash_role attribute the flash rewrite leaves for the
// vectorizer.
#ifndef ATTNKIT_COMPILED_ATTNKIT_DIALECT_H_
#define ATTNKIT_COMPILED_ATTNKIT_DIALECT_H_

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Interfaces/TilingInterface.h"

#include "compiled/AttnkitDialect.h.inc"
#include "compiled/AttnkitEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "compiled/AttnkitAttrs.h.inc"

#define GET_OP_CLASSES
#include "compiled/AttnkitOps.h.inc"

namespace attnkit::compiled {

/// The name of the role attribute (`attnkit.flash_role`).
inline constexpr llvm::StringLiteral kFlashRoleAttrName = "attnkit.flash_role";
/// The name of the kernel functions' specialization string.
inline constexpr llvm::StringLiteral kSpecAttrName = "attnkit.spec";

/// Marks `op` as `role` of the flash form.
void setFlashRole(mlir::Operation *op, FlashRole role);
/// Whether `op` carries `role`.
bool hasFlashRole(mlir::Operation *op, FlashRole role);

/// Head `head` of `mem`, a memref whose leading dimension walks KV heads (a
/// headed kernel's argument, KernelSpec::headed): the rank-reduced subview
/// [head, 0.., full extents..]. The one form the headed kernel builds and
/// the vectorizer recognizes (isHeadSlice).
mlir::Value headSlice(mlir::OpBuilder &b, mlir::Location loc, mlir::Value mem,
                      mlir::Value head);
/// Whether `v` is headSlice(source, head) of a `source` defined outside
/// `loop` and its induction variable as the head. Then the source.
mlir::Value headSliceSource(mlir::Value v, mlir::Operation *loop,
                            mlir::Value head);

} // namespace attnkit::compiled

#endif // ATTNKIT_COMPILED_ATTNKIT_DIALECT_H_
