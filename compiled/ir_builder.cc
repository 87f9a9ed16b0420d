#include "compiled/ir_builder.h"

#include "compiled/attnkit_dialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/AffineMap.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"

#include <limits>

using namespace mlir;

namespace attnkit::compiled {

void registerCompiledDialects(DialectRegistry &registry) {
  registry.insert<AttnkitDialect>();
  registerAllDialects(registry);
  registerAllExtensions(registry);
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
}

namespace {

constexpr int64_t kDyn = ShapedType::kDynamic;

/// A memref of `shape` whose strides are run-time values except the innermost
/// one, which is 1 (the kernels vectorize along it).
MemRefType stridedMemRef(ArrayRef<int64_t> shape, Type elem) {
  SmallVector<int64_t> strides(shape.size(), kDyn);
  strides.back() = 1;
  return MemRefType::get(
      shape, elem, StridedLayoutAttr::get(elem.getContext(), kDyn, strides));
}

/// The attention of one spec: its kernel function around one
/// attnkit.attention whose modifier region holds the spec's bias and mask.
class AttentionBuilder {
public:
  AttentionBuilder(MLIRContext &ctx, const KernelSpec &spec)
      : spec_(spec), b_(UnknownLoc::get(&ctx), &ctx) {}

  OwningOpRef<ModuleOp> build();

private:
  /// The kernel function's arguments (q, k, v, bias as tensors).
  struct Kernel {
    Value q, k, v, bias, outM, lseM, scale, p0, window;
  };

  Kernel declareKernel(ModuleOp module);
  /// The modifier: + bias, then the causal / window mask (-inf).
  void emitModifier(Block &body, const Kernel &kn);
  Value toTensor(Value m) {
    auto mt = cast<MemRefType>(m.getType());
    auto tt = RankedTensorType::get(mt.getShape(), mt.getElementType());
    return bufferization::ToTensorOp::create(b_, tt, m, /*restrict=*/true,
                                             /*writable=*/false);
  }

  const KernelSpec &spec_;
  ImplicitLocOpBuilder b_;
};

OwningOpRef<ModuleOp> AttentionBuilder::build() {
  OwningOpRef<ModuleOp> module = ModuleOp::create(b_);
  const Kernel kn = declareKernel(*module);
  const int64_t g = spec_.group, d = spec_.headDim;
  auto outTy = RankedTensorType::get({g, kDyn, d}, b_.getF32Type());
  auto lseTy = RankedTensorType::get({g, kDyn}, b_.getF32Type());
  auto attn = AttentionOp::create(b_, TypeRange{outTy, lseTy}, kn.q, kn.k, kn.v,
                                  kn.scale, kn.bias,
                                  /*v_transposed=*/spec_.vTransposed);
  Block &body = attn.getModifier().emplaceBlock();
  for (Type t : {Type(b_.getIndexType()), Type(b_.getIndexType()),
                 Type(b_.getF32Type())})
    body.addArgument(t, b_.getLoc());
  if (kn.bias)
    body.addArgument(b_.getF32Type(), b_.getLoc());
  emitModifier(body, kn);
  b_.setInsertionPointAfter(attn);
  bufferization::MaterializeInDestinationOp::create(
      b_, TypeRange{}, attn.getOutput(), kn.outM, /*restrict=*/true,
      /*writable=*/true);
  bufferization::MaterializeInDestinationOp::create(
      b_, TypeRange{}, attn.getLse(), kn.lseM, /*restrict=*/true,
      /*writable=*/true);
  func::ReturnOp::create(b_);
  return module;
}

AttentionBuilder::Kernel AttentionBuilder::declareKernel(ModuleOp module) {
  b_.setInsertionPointToEnd(module.getBody());
  const int64_t g = spec_.group, d = spec_.headDim;
  Type f32 = b_.getF32Type();
  Type elem = spec_.elem == DType::kF32 ? f32 : b_.getBF16Type();
  Type index = b_.getIndexType();
  MemRefType qTy = stridedMemRef({g, kDyn, d}, elem);
  MemRefType kTy = stridedMemRef({kDyn, d}, elem);
  MemRefType vTy = spec_.vTransposed ? stridedMemRef({d, kDyn}, elem)
                                     : stridedMemRef({kDyn, d}, elem);
  MemRefType biasTy = stridedMemRef({g, kDyn, kDyn}, f32);
  MemRefType outTy = stridedMemRef({g, kDyn, d}, f32);
  MemRefType lseTy = stridedMemRef({g, kDyn}, f32);
  auto fnTy = b_.getFunctionType(
      {qTy, kTy, vTy, biasTy, outTy, lseTy, f32, index, index}, {});
  auto fn = func::FuncOp::create(b_, kKernelName, fnTy);
  fn->setAttr(kSpecAttrName, b_.getStringAttr(spec_.key()));
  Block *entry = fn.addEntryBlock();
  b_.setInsertionPointToStart(entry);
  Kernel kn;
  kn.outM = entry->getArgument(4);
  kn.lseM = entry->getArgument(5);
  kn.scale = entry->getArgument(6);
  kn.p0 = entry->getArgument(7);
  kn.window = entry->getArgument(8);
  kn.q = toTensor(entry->getArgument(0));
  kn.k = toTensor(entry->getArgument(1));
  kn.v = toTensor(entry->getArgument(2));
  if (spec_.mask == MaskKind::kBias)
    kn.bias = toTensor(entry->getArgument(3));
  return kn;
}

void AttentionBuilder::emitModifier(Block &body, const Kernel &kn) {
  OpBuilder::InsertionGuard guard(b_);
  b_.setInsertionPointToStart(&body);
  Value i = body.getArgument(0), j = body.getArgument(1);
  Value x = body.getArgument(2);
  if (kn.bias)
    x = arith::AddFOp::create(b_, x, body.getArgument(3));
  const MaskKind mask = spec_.mask;
  if (mask == MaskKind::kCausal || mask == MaskKind::kWindow) {
    // Query i sits at position p0 + i; keys j <= p are kept (causal), and
    // for a window only those with j > p - window.
    Value pos = arith::AddIOp::create(b_, i, kn.p0);
    Value keep = arith::CmpIOp::create(b_, arith::CmpIPredicate::sle, j, pos);
    if (mask == MaskKind::kWindow) {
      Value lo = arith::SubIOp::create(b_, pos, kn.window);
      Value inWin = arith::CmpIOp::create(b_, arith::CmpIPredicate::sgt, j, lo);
      keep = arith::AndIOp::create(b_, keep, inWin);
    }
    Value ninf = arith::ConstantOp::create(
        b_, b_.getF32FloatAttr(-std::numeric_limits<float>::infinity()));
    x = arith::SelectOp::create(b_, keep, x, ninf);
  }
  YieldOp::create(b_, x);
}

} // namespace

OwningOpRef<ModuleOp> buildAttention(MLIRContext &ctx, const KernelSpec &spec) {
  ctx.loadDialect<AttnkitDialect, arith::ArithDialect,
                  bufferization::BufferizationDialect, func::FuncDialect,
                  linalg::LinalgDialect, math::MathDialect,
                  memref::MemRefDialect, tensor::TensorDialect>();
  return AttentionBuilder(ctx, spec).build();
}

OwningOpRef<ModuleOp> buildKvAppend(MLIRContext &ctx, const AppendSpec &spec) {
  ctx.loadDialect<AttnkitDialect, arith::ArithDialect, func::FuncDialect,
                  linalg::LinalgDialect, memref::MemRefDialect>();
  ImplicitLocOpBuilder b(UnknownLoc::get(&ctx), &ctx);
  OwningOpRef<ModuleOp> module = ModuleOp::create(b);
  b.setInsertionPointToEnd(module->getBody());
  const int64_t d = spec.headDim;
  Type elem =
      spec.elem == DType::kF32 ? Type(b.getF32Type()) : Type(b.getBF16Type());
  auto memref4 = [&](int64_t unitDim) {
    SmallVector<int64_t> strides(4, kDyn);
    if (unitDim >= 0)
      strides[unitDim] = 1;
    return MemRefType::get({kDyn, kDyn, kDyn, d}, elem,
                           StridedLayoutAttr::get(&ctx, kDyn, strides));
  };
  using Unit = AppendSpec::Unit;
  MemRefType cacheTy = memref4(spec.cacheUnit == Unit::kDim   ? 3
                               : spec.cacheUnit == Unit::kSeq ? 2
                                                              : -1);
  MemRefType tokTy = memref4(spec.tokensDimUnit ? 3 : -1);
  Type index = b.getIndexType();
  auto fn = func::FuncOp::create(
      b, kAppendName,
      b.getFunctionType({cacheTy, tokTy, index, index, index, index}, {}));
  fn->setAttr(kSpecAttrName, b.getStringAttr(spec.key()));
  Block *entry = fn.addEntryBlock();
  b.setInsertionPointToStart(entry);
  Value cache = entry->getArgument(0), tok = entry->getArgument(1),
        bIdx = entry->getArgument(2), hIdx = entry->getArgument(3),
        pos = entry->getArgument(4), n = entry->getArgument(5);
  auto view = [&](Value src, Value seq0, OpFoldResult len) -> Value {
    auto srcTy = cast<MemRefType>(src.getType());
    SmallVector<OpFoldResult> offsets{bIdx, hIdx, seq0, b.getIndexAttr(0)};
    SmallVector<OpFoldResult> sizes{b.getIndexAttr(1), b.getIndexAttr(1), len,
                                    b.getIndexAttr(d)};
    SmallVector<OpFoldResult> strides(4, b.getIndexAttr(1));
    bool one = isConstantIntValue(len, 1);
    auto ty = memref::SubViewOp::inferRankReducedResultType(
        one ? SmallVector<int64_t>{d} : SmallVector<int64_t>{kDyn, d}, srcTy,
        offsets, sizes, strides);
    return memref::SubViewOp::create(b, cast<MemRefType>(ty), src, offsets,
                                     sizes, strides);
  };
  Value zero = arith::ConstantIndexOp::create(b, 0);
  if (spec.cacheUnit == Unit::kDim && spec.tokensDimUnit) {
    // Row by row: both rows are contiguous, so each memref.copy becomes an
    // llvm.memcpy of D elements that LLVM expands inline (8 zmm moves for
    // D = 128 f32) — no loop nest, no runtime alias checks.
    Value one = arith::ConstantIndexOp::create(b, 1);
    scf::ForOp::create(b, zero, n, one, ValueRange{},
                       [&](OpBuilder &nb, Location loc, Value t, ValueRange) {
                         ImplicitLocOpBuilder ib(loc, nb);
                         std::swap(b, ib);
                         Value dstRow =
                             view(cache, arith::AddIOp::create(b, pos, t),
                                  b.getIndexAttr(1));
                         Value srcRow = view(tok, t, b.getIndexAttr(1));
                         memref::CopyOp::create(b, srcRow, dstRow);
                         scf::YieldOp::create(b);
                         std::swap(b, ib);
                       });
  } else {
    Value dst = view(cache, pos, n);
    Value src = view(tok, zero, n);
    if (spec.cacheUnit == Unit::kSeq) {
      // Transposed V: loop over head_dim outside and the new tokens inside,
      // so the writes run along the cache's unit-stride sequence dim.
      auto perm = AffineMapAttr::get(
          AffineMap::getPermutationMap(ArrayRef<unsigned>{1, 0}, &ctx));
      dst = memref::TransposeOp::create(b, dst, perm);
      src = memref::TransposeOp::create(b, src, perm);
    }
    linalg::CopyOp::create(b, src, dst);
  }
  func::ReturnOp::create(b);
  return module;
}

} // namespace attnkit::compiled
