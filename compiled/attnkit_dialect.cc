#include "compiled/attnkit_dialect.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;

// ASan builds only (the fuzz and asan presets). LLVM's BumpPtrAllocator
// poisons each new slab from whichever translation unit starts it and
// unpoisons each allocation carved from it -- but only in code compiled with
// ASan. Debian's libMLIR is not: when one of our instrumented translation
// units starts a slab (a flash_role attribute's storage, say), what libMLIR
// then allocates from that slab stays poisoned, and its next memmove into
// it is reported as use-after-poison (DenseArrayAttr::get under the
// verifier, building the AOT kernels with attnkit-compile, 2026-11-25). That
// poisoning is LLVM's bookkeeping, not a bug of ours, so every binary that
// links this dialect turns user poisoning off; ASan's own checks (heap,
// stack, globals, use-after-free) stay on.
extern "C" const char *__asan_default_options() {
  return "allow_user_poisoning=0";
}

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
  const bool loop = role == FlashRole::QueryLoop || role == FlashRole::KvLoop ||
                    role == FlashRole::HeadLoop;
  if (loop && !isa<scf::ForOp>(op))
    return op->emitOpError("'")
           << kFlashRoleAttrName << "' " << stringifyFlashRole(role)
           << " must be on an scf.for";
  if (role == FlashRole::LastRow) {
    Operation *parent = op->getParentOp();
    if (op->getNumResults() != 1 || !op->getResult(0).getType().isIndex() ||
        !parent || !hasFlashRole(parent, FlashRole::QueryLoop))
      return op->emitOpError("'")
             << kFlashRoleAttrName
             << "' last_row must be on an op of one index result in a "
                "query_loop";
    return success();
  }
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

Value headSlice(OpBuilder &b, Location loc, Value mem, Value head) {
  auto type = cast<MemRefType>(mem.getType());
  const int64_t rank = type.getRank();
  SmallVector<OpFoldResult> offsets(rank, b.getIndexAttr(0)),
      sizes{b.getIndexAttr(1)}, strides(rank, b.getIndexAttr(1));
  offsets[0] = head;
  for (int64_t i = 1; i < rank; ++i)
    sizes.push_back(memref::getMixedSize(b, loc, mem, i));
  SmallVector<int64_t> shape(type.getShape().drop_front());
  auto result = memref::SubViewOp::inferRankReducedResultType(
      shape, type, offsets, sizes, strides);
  return memref::SubViewOp::create(b, loc, result, mem, offsets, sizes,
                                   strides);
}

Value headSliceSource(Value v, Operation *loop, Value head) {
  auto sv = v ? v.getDefiningOp<memref::SubViewOp>() : nullptr;
  if (!sv)
    return {};
  Value src = sv.getSource();
  if (loop->isAncestor(src.getParentBlock()->getParentOp()))
    return {};
  auto offsets = sv.getMixedOffsets();
  auto sizes = sv.getMixedSizes();
  if (offsets.empty() || offsets[0] != OpFoldResult(head) ||
      getConstantIntValue(sizes[0]) != 1 || !sv.hasUnitStride() ||
      sv.getType().getRank() + 1 != sv.getSourceType().getRank())
    return {};
  for (size_t i = 1; i < offsets.size(); ++i)
    if (getConstantIntValue(offsets[i]) != 0)
      return {};
  for (size_t i = 1; i < sizes.size(); ++i) {
    // Full extents: static, or the dim of the source.
    if (auto c = getConstantIntValue(sizes[i])) {
      if (*c != sv.getSourceType().getDimSize(i))
        return {};
      continue;
    }
    auto dim = cast<Value>(sizes[i]).getDefiningOp<memref::DimOp>();
    if (!dim || dim.getSource() != src || dim.getConstantIndex() != int64_t(i))
      return {};
  }
  return src;
}

LogicalResult AttentionOp::verify() {
  RankedTensorType q = getQuery().getType(), k = getKey().getType(),
                   v = getValue().getType();
  // `lead` = 1 with the leading KV-head dimension H; every shape below is
  // read past it, and H must agree across the operands and results.
  const int64_t lead = q.getRank() == 4 ? 1 : 0;
  if (q.getRank() != 3 + lead || k.getRank() != 2 + lead ||
      v.getRank() != 2 + lead)
    return emitOpError("expects q of rank 3 (G x M x D) with k and v of rank "
                       "2, or q of rank 4 (H x G x M x D) with k and v of "
                       "rank 3; got ranks ")
           << q.getRank() << ", " << k.getRank() << ", " << v.getRank();
  Type elem = q.getElementType();
  if (!elem.isF32() && !elem.isBF16())
    return emitOpError("expects f32 or bf16 q/k/v, got ") << elem;
  // K/V in q's type, or int8 rows whose scales are the two scale operands.
  const bool quantized = getKeyScale() || getValueScale();
  if (quantized != (getKeyScale() && getValueScale()))
    return emitOpError("expects both k_scale and v_scale or neither");
  Type kvElem =
      quantized ? Type(IntegerType::get(getContext(), 8)) : Type(elem);
  if (!quantized && k.getElementType().isInteger(8))
    return emitOpError("expects k_scale and v_scale with i8 k and v");
  if (k.getElementType() != kvElem || v.getElementType() != kvElem)
    return emitOpError(quantized ? "expects i8 k and v with k_scale and v_scale"
                                 : "expects q, k and v of one element type");
  const int64_t g = q.getDimSize(lead), d = q.getDimSize(lead + 2);
  if (ShapedType::isDynamic(g) || ShapedType::isDynamic(d))
    return emitOpError("expects a static group size and head_dim");
  const bool vt = getVTransposed();
  const int64_t vKeys = v.getDimSize(lead + (vt ? 1 : 0)),
                vDim = v.getDimSize(lead + (vt ? 0 : 1));
  const int64_t keys = k.getDimSize(lead), m = q.getDimSize(lead + 1);
  if (k.getDimSize(lead + 1) != d || vDim != d)
    return emitOpError("expects k and v rows of head_dim ") << d;
  if (!compatible(keys, vKeys))
    return emitOpError("expects as many keys in v as in k");
  if (quantized)
    for (Value sv : {getKeyScale(), getValueScale()}) {
      auto st = cast<RankedTensorType>(sv.getType());
      if (st.getRank() != 1 + lead || !st.getElementType().isF32() ||
          !compatible(st.getDimSize(lead), keys))
        return emitOpError("expects f32 k_scale and v_scale of one scale "
                           "per key, got ")
               << st;
    }
  RankedTensorType out = getOutput().getType(), lse = getLse().getType();
  SmallVector<RankedTensorType> withHeads{k, v, out, lse};
  if (Value bias = getBias())
    withHeads.push_back(cast<RankedTensorType>(bias.getType()));
  if (quantized) {
    withHeads.push_back(cast<RankedTensorType>(getKeyScale().getType()));
    withHeads.push_back(cast<RankedTensorType>(getValueScale().getType()));
  }
  for (RankedTensorType t : withHeads)
    if (lead &&
        (t.getRank() == 0 || !compatible(t.getDimSize(0), q.getDimSize(0))))
      return emitOpError("expects every operand and result to lead with "
                         "q's ")
             << q.getDimSize(0) << " KV heads, got " << t;
  if (out.getRank() != 3 + lead || out.getDimSize(lead) != g ||
      out.getDimSize(lead + 2) != d ||
      !compatible(out.getDimSize(lead + 1), m) || !out.getElementType().isF32())
    return emitOpError("expects an f32 output shaped like q, got ") << out;
  if (lse.getRank() != 2 + lead || lse.getDimSize(lead) != g ||
      !compatible(lse.getDimSize(lead + 1), m) || !lse.getElementType().isF32())
    return emitOpError("expects an f32 lse of G x M, got ") << lse;
  if (Value bias = getBias()) {
    auto b = cast<RankedTensorType>(bias.getType());
    if (b.getRank() != 3 + lead || b.getDimSize(lead) != g ||
        !compatible(b.getDimSize(lead + 1), m) ||
        !compatible(b.getDimSize(lead + 2), keys) ||
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

/// The output is shaped like q, the lse like q without its last dimension.
LogicalResult
AttentionOp::reifyResultShapes(OpBuilder &b,
                               ReifiedRankedShapedTypeDims &shapes) {
  SmallVector<OpFoldResult> q = tensor::getMixedSizes(b, getLoc(), getQuery());
  shapes.push_back(q);
  shapes.push_back(SmallVector<OpFoldResult>(q.begin(), q.end() - 1));
  return success();
}

//===----------------------------------------------------------------------===//
// TilingInterface: a loop over the leading KV-head dimension H (heads are
// independent); the single-group form has no loops to tile.
//===----------------------------------------------------------------------===//

SmallVector<utils::IteratorType> AttentionOp::getLoopIteratorTypes() {
  if (!hasHeadDim())
    return {};
  return {utils::IteratorType::parallel};
}

SmallVector<Range> AttentionOp::getIterationDomain(OpBuilder &b) {
  if (!hasHeadDim())
    return {};
  OpFoldResult heads = tensor::getMixedSize(b, getLoc(), getQuery(), 0);
  return {Range{b.getIndexAttr(0), heads, b.getIndexAttr(1)}};
}

namespace {

/// Heads [offset, offset + size) of `t` along its leading dimension, every
/// other dimension whole.
Value headSlice(OpBuilder &b, Location loc, Value t, OpFoldResult offset,
                OpFoldResult size) {
  auto type = cast<RankedTensorType>(t.getType());
  SmallVector<OpFoldResult> offsets(type.getRank(), b.getIndexAttr(0));
  SmallVector<OpFoldResult> sizes = tensor::getMixedSizes(b, loc, t);
  SmallVector<OpFoldResult> strides(type.getRank(), b.getIndexAttr(1));
  offsets[0] = offset;
  sizes[0] = size;
  return tensor::ExtractSliceOp::create(b, loc, t, offsets, sizes, strides);
}

/// `t`'s type with `heads` leading heads.
RankedTensorType withHeads(Type t, OpFoldResult heads) {
  auto type = cast<RankedTensorType>(t);
  SmallVector<int64_t> shape(type.getShape());
  std::optional<int64_t> h = getConstantIntValue(heads);
  shape[0] = h ? *h : ShapedType::kDynamic;
  return type.clone(shape);
}

} // namespace

FailureOr<TilingResult>
AttentionOp::getTiledImplementation(OpBuilder &b,
                                    ArrayRef<OpFoldResult> offsets,
                                    ArrayRef<OpFoldResult> sizes) {
  if (!hasHeadDim() || offsets.size() != 1 || sizes.size() != 1)
    return emitOpError("tiles only along its leading KV-head dimension");
  Location loc = getLoc();
  SmallVector<Operation *> slices;
  auto slice = [&](Value t) -> Value {
    if (!t)
      return t;
    Value s = headSlice(b, loc, t, offsets[0], sizes[0]);
    slices.push_back(s.getDefiningOp());
    return s;
  };
  Value q = slice(getQuery()), k = slice(getKey()), v = slice(getValue()),
        bias = slice(getBias()), kScale = slice(getKeyScale()),
        vScale = slice(getValueScale());
  auto tiled = AttentionOp::create(
      b, loc,
      TypeRange{withHeads(getOutput().getType(), sizes[0]),
                withHeads(getLse().getType(), sizes[0])},
      q, k, v, getScale(), bias, kScale, vScale, getVTransposedAttr());
  IRMapping map;
  getModifier().cloneInto(&tiled.getModifier(), map);
  return TilingResult{{tiled}, SmallVector<Value>(tiled->getResults()), slices};
}

LogicalResult AttentionOp::getResultTilePosition(
    OpBuilder &b, unsigned resultNumber, ArrayRef<OpFoldResult> offsets,
    ArrayRef<OpFoldResult> sizes, SmallVector<OpFoldResult> &resultOffsets,
    SmallVector<OpFoldResult> &resultSizes) {
  if (!hasHeadDim() || offsets.size() != 1)
    return failure();
  Value result = getResult(resultNumber);
  resultSizes = tensor::getMixedSizes(b, getLoc(), result);
  resultOffsets.assign(resultSizes.size(), b.getIndexAttr(0));
  resultOffsets[0] = offsets[0];
  resultSizes[0] = sizes[0];
  return success();
}

FailureOr<TilingResult>
AttentionOp::generateResultTileValue(OpBuilder &b, unsigned resultNumber,
                                     ArrayRef<OpFoldResult> offsets,
                                     ArrayRef<OpFoldResult> sizes) {
  // A tile of the result is a tile of heads only when it spans every other
  // dimension: the rows of one head are not independent of their offset
  // (the modifier's query index), so a partial head is not this op's tile.
  if (!hasHeadDim())
    return failure();
  for (OpFoldResult o : ArrayRef(offsets).drop_front())
    if (!isConstantIntValue(o, 0))
      return failure();
  (void)resultNumber;
  return getTiledImplementation(b, offsets.take_front(), sizes.take_front());
}

} // namespace attnkit::compiled
