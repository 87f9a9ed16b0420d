#include "compiled/attnkit_dialect.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;

#include "compiled/AttnkitDialect.cpp.inc"
#include "compiled/AttnkitEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "compiled/AttnkitAttrs.cpp.inc"

#define GET_OP_CLASSES
#include "compiled/AttnkitOps.cpp.inc"

namespace attnkit::compiled {

void AttnkitDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "compiled/AttnkitAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "compiled/AttnkitOps.cpp.inc"
      >();
}

namespace {

/// Where a role may sit: loops are scf.for, tile ops linalg.generic, and a
/// KV loop lies directly in a query loop's body.
LogicalResult verifyRole(Operation *op, FlashRole role) {
  const bool loop = role == FlashRole::QueryLoop || role == FlashRole::KvLoop;
  if (loop && !isa<scf::ForOp>(op))
    return op->emitOpError("'")
           << kFlashRoleAttrName << "' " << stringifyFlashRole(role)
           << " must be on an scf.for";
  if (!loop && !isa<linalg::GenericOp>(op))
    return op->emitOpError("'")
           << kFlashRoleAttrName << "' " << stringifyFlashRole(role)
           << " must be on a linalg.generic";
  if (role == FlashRole::KvLoop) {
    Operation *parent = op->getParentOp();
    if (!parent || !hasFlashRole(parent, FlashRole::QueryLoop))
      return op->emitOpError("'")
             << kFlashRoleAttrName << "' kv_loop must lie in a query_loop";
  }
  return success();
}

/// Equal or one of them dynamic.
bool compatible(int64_t a, int64_t b) {
  return ShapedType::isDynamic(a) || ShapedType::isDynamic(b) || a == b;
}

} // namespace

LogicalResult AttnkitDialect::verifyOperationAttribute(Operation *op,
                                                       NamedAttribute attr) {
  if (attr.getName() == kFlashRoleAttrName) {
    auto role = dyn_cast<FlashRoleAttr>(attr.getValue());
    if (!role)
      return op->emitOpError("'")
             << kFlashRoleAttrName << "' must be a #attnkit.flash_role";
    return verifyRole(op, role.getValue());
  }
  if (attr.getName() == kSpecAttrName) {
    // On the kernel function, and on what func-to-llvm makes of it.
    if (!isa<FunctionOpInterface>(op) || !isa<StringAttr>(attr.getValue()))
      return op->emitOpError("'")
             << kSpecAttrName << "' must be a string on a function";
    return success();
  }
  return op->emitOpError("unknown attnkit attribute '")
         << attr.getName().getValue() << "'";
}

void setFlashRole(Operation *op, FlashRole role) {
  op->setAttr(kFlashRoleAttrName, FlashRoleAttr::get(op->getContext(), role));
}

bool hasFlashRole(Operation *op, FlashRole role) {
  auto attr = op->getAttrOfType<FlashRoleAttr>(kFlashRoleAttrName);
  return attr && attr.getValue() == role;
}

LogicalResult AttentionOp::verify() {
  RankedTensorType q = getQuery().getType(), k = getKey().getType(),
                   v = getValue().getType();
  if (q.getRank() != 3 || k.getRank() != 2 || v.getRank() != 2)
    return emitOpError("expects q of rank 3 (G x M x D), k and v of rank 2; "
                       "got ranks ")
           << q.getRank() << ", " << k.getRank() << ", " << v.getRank();
  Type elem = q.getElementType();
  if (!elem.isF32() && !elem.isBF16())
    return emitOpError("expects f32 or bf16 q/k/v, got ") << elem;
  if (k.getElementType() != elem || v.getElementType() != elem)
    return emitOpError("expects q, k and v of one element type");
  const int64_t g = q.getDimSize(0), d = q.getDimSize(2);
  if (ShapedType::isDynamic(g) || ShapedType::isDynamic(d))
    return emitOpError("expects a static group size and head_dim");
  const bool vt = getVTransposed();
  const int64_t vKeys = v.getDimSize(vt ? 1 : 0),
                vDim = v.getDimSize(vt ? 0 : 1);
  if (k.getDimSize(1) != d || vDim != d)
    return emitOpError("expects k and v rows of head_dim ") << d;
  if (!compatible(k.getDimSize(0), vKeys))
    return emitOpError("expects as many keys in v as in k");
  RankedTensorType out = getOutput().getType(), lse = getLse().getType();
  if (out.getRank() != 3 || out.getDimSize(0) != g || out.getDimSize(2) != d ||
      !compatible(out.getDimSize(1), q.getDimSize(1)) ||
      !out.getElementType().isF32())
    return emitOpError("expects an f32 output shaped like q, got ") << out;
  if (lse.getRank() != 2 || lse.getDimSize(0) != g ||
      !compatible(lse.getDimSize(1), q.getDimSize(1)) ||
      !lse.getElementType().isF32())
    return emitOpError("expects an f32 lse of G x M, got ") << lse;
  if (Value bias = getBias()) {
    auto b = cast<RankedTensorType>(bias.getType());
    if (b.getRank() != 3 || b.getDimSize(0) != g ||
        !compatible(b.getDimSize(1), q.getDimSize(1)) ||
        !compatible(b.getDimSize(2), k.getDimSize(0)) ||
        !b.getElementType().isF32())
      return emitOpError("expects an f32 bias of G x M x N, got ") << b;
  }
  Block &body = modifierBlock();
  SmallVector<Type> want{IndexType::get(getContext()),
                         IndexType::get(getContext()),
                         Float32Type::get(getContext())};
  if (getBias())
    want.push_back(Float32Type::get(getContext()));
  if (body.getArgumentTypes() != TypeRange(want))
    return emitOpError("expects modifier arguments (index, index, f32")
           << (getBias() ? ", f32" : "") << ")";
  if (body.empty() || !isa<YieldOp>(body.back()))
    return emitOpError("expects the modifier to end in attnkit.yield");
  return success();
}

} // namespace attnkit::compiled
