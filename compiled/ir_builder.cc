#include "compiled/ir_builder.h"

#include "compiled/attnkit_dialect.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
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

/// The modifier region of `attn`: (i, j, x [, bias]) -> x [+ bias], then
/// the causal / window mask (-inf). Query i sits at position p0 + i; causal
/// keeps keys j <= p, a window only those with p - window < j <= p.
void emitModifier(ImplicitLocOpBuilder &b, AttentionOp attn, MaskKind mask,
                  Value p0, Value window) {
  OpBuilder::InsertionGuard guard(b);
  Block &body = attn.getModifier().emplaceBlock();
  for (Type t :
       {Type(b.getIndexType()), Type(b.getIndexType()), Type(b.getF32Type())})
    body.addArgument(t, b.getLoc());
  if (attn.getBias())
    body.addArgument(b.getF32Type(), b.getLoc());
  b.setInsertionPointToStart(&body);
  Value i = body.getArgument(0), j = body.getArgument(1);
  Value x = body.getArgument(2);
  if (attn.getBias())
    x = arith::AddFOp::create(b, x, body.getArgument(3));
  if (mask == MaskKind::kCausal || mask == MaskKind::kWindow) {
    Value pos = arith::AddIOp::create(b, i, p0);
    Value keep = arith::CmpIOp::create(b, arith::CmpIPredicate::sle, j, pos);
    if (mask == MaskKind::kWindow) {
      Value lo = arith::SubIOp::create(b, pos, window);
      Value inWin = arith::CmpIOp::create(b, arith::CmpIPredicate::sgt, j, lo);
      keep = arith::AndIOp::create(b, keep, inWin);
    }
    Value ninf = arith::ConstantOp::create(
        b, b.getF32FloatAttr(-std::numeric_limits<float>::infinity()));
    x = arith::SelectOp::create(b, keep, x, ninf);
  }
  YieldOp::create(b, x);
}

/// A tensor view of memref `m` (restrict: no other view of it exists).
Value toTensor(ImplicitLocOpBuilder &b, Value m, bool writable = false) {
  auto mt = cast<MemRefType>(m.getType());
  auto tt = RankedTensorType::get(mt.getShape(), mt.getElementType());
  return bufferization::ToTensorOp::create(b, tt, m, /*restrict=*/true,
                                           writable);
}

/// The attention of one spec: its kernel function around one
/// attnkit.attention whose modifier region holds the spec's bias and mask.
class AttentionBuilder {
public:
  AttentionBuilder(MLIRContext &ctx, const KernelSpec &spec)
      : spec_(spec), b_(UnknownLoc::get(&ctx), &ctx) {}

  OwningOpRef<ModuleOp> build();

private:
  /// The kernel function's arguments (q, k, v, bias and the scales as
  /// tensors; for a headed spec the memrefs, sliced per head later).
  struct Kernel {
    Value q, k, v, bias, kScale, vScale, outM, lseM, scale, p0, window;
  };

  Kernel declareKernel(ModuleOp module);
  Value toTensor(Value m) { return compiled::toTensor(b_, m); }

  const KernelSpec &spec_;
  ImplicitLocOpBuilder b_;
};

OwningOpRef<ModuleOp> AttentionBuilder::build() {
  OwningOpRef<ModuleOp> module = ModuleOp::create(b_);
  const Kernel kn = declareKernel(*module);
  const int64_t g = spec_.group, d = spec_.headDim;
  // A headed kernel: the attention of one head inside a loop over the band
  // (the vectorizer runs it head by head inside each KV tile instead).
  Kernel one = kn;
  if (spec_.headed) {
    Value zero = arith::ConstantIndexOp::create(b_, 0);
    Value heads = memref::DimOp::create(b_, kn.outM, 0);
    auto loop = scf::ForOp::create(b_, zero, heads,
                                   arith::ConstantIndexOp::create(b_, 1));
    setFlashRole(loop, FlashRole::HeadLoop);
    b_.setInsertionPoint(loop.getBody()->getTerminator());
    Value h = loop.getInductionVar();
    auto slice = [&](Value m) {
      return m ? headSlice(b_, b_.getLoc(), m, h) : Value();
    };
    auto sliceTensor = [&](Value m) {
      return m ? toTensor(slice(m)) : Value();
    };
    one.q = sliceTensor(kn.q);
    one.k = sliceTensor(kn.k);
    one.v = sliceTensor(kn.v);
    one.bias = sliceTensor(kn.bias);
    one.kScale = sliceTensor(kn.kScale);
    one.vScale = sliceTensor(kn.vScale);
    one.outM = slice(kn.outM);
    one.lseM = slice(kn.lseM);
  }
  auto outTy = RankedTensorType::get({g, kDyn, d}, b_.getF32Type());
  auto lseTy = RankedTensorType::get({g, kDyn}, b_.getF32Type());
  auto attn =
      AttentionOp::create(b_, TypeRange{outTy, lseTy}, one.q, one.k, one.v,
                          kn.scale, one.bias, one.kScale, one.vScale,
                          /*v_transposed=*/spec_.vTransposed);
  emitModifier(b_, attn, spec_.mask, kn.p0, kn.window);
  b_.setInsertionPointAfter(attn);
  bufferization::MaterializeInDestinationOp::create(
      b_, TypeRange{}, attn.getOutput(), one.outM, /*restrict=*/true,
      /*writable=*/true);
  bufferization::MaterializeInDestinationOp::create(
      b_, TypeRange{}, attn.getLse(), one.lseM, /*restrict=*/true,
      /*writable=*/true);
  b_.setInsertionPointToEnd(&module->getBody()->back().getRegion(0).front());
  func::ReturnOp::create(b_);
  return module;
}

AttentionBuilder::Kernel AttentionBuilder::declareKernel(ModuleOp module) {
  b_.setInsertionPointToEnd(module.getBody());
  const int64_t g = spec_.group, d = spec_.headDim;
  Type f32 = b_.getF32Type();
  Type elem = spec_.elem == DType::kF32 ? f32 : b_.getBF16Type();
  Type kvElem = spec_.quantizedKv() ? Type(b_.getI8Type()) : elem;
  Type index = b_.getIndexType();
  // A headed kernel's memrefs have a leading dimension of KV heads.
  auto shaped = [&](ArrayRef<int64_t> shape, Type t) {
    SmallVector<int64_t> full;
    if (spec_.headed)
      full.push_back(kDyn);
    full.append(shape.begin(), shape.end());
    return stridedMemRef(full, t);
  };
  MemRefType qTy = shaped({g, kDyn, d}, elem);
  MemRefType kTy = shaped({kDyn, d}, kvElem);
  MemRefType vTy =
      spec_.vTransposed ? shaped({d, kDyn}, kvElem) : shaped({kDyn, d}, kvElem);
  MemRefType biasTy = shaped({g, kDyn, kDyn}, f32);
  MemRefType scaleTy = shaped({kDyn}, f32);
  MemRefType outTy = shaped({g, kDyn, d}, f32);
  MemRefType lseTy = shaped({g, kDyn}, f32);
  auto fnTy = b_.getFunctionType({qTy, kTy, vTy, biasTy, scaleTy, scaleTy,
                                  outTy, lseTy, f32, index, index},
                                 {});
  auto fn = func::FuncOp::create(b_, kKernelName, fnTy);
  fn->setAttr(kSpecAttrName, b_.getStringAttr(spec_.key()));
  Block *entry = fn.addEntryBlock();
  b_.setInsertionPointToStart(entry);
  Kernel kn;
  kn.outM = entry->getArgument(6);
  kn.lseM = entry->getArgument(7);
  kn.scale = entry->getArgument(8);
  kn.p0 = entry->getArgument(9);
  kn.window = entry->getArgument(10);
  // Headed: the memrefs themselves (sliced per head in the loop), else
  // tensor views of them.
  auto view = [&](Value m) { return spec_.headed ? m : toTensor(m); };
  kn.q = view(entry->getArgument(0));
  kn.k = view(entry->getArgument(1));
  kn.v = view(entry->getArgument(2));
  if (spec_.mask == MaskKind::kBias)
    kn.bias = view(entry->getArgument(3));
  if (spec_.quantizedKv()) {
    kn.kScale = view(entry->getArgument(4));
    kn.vScale = view(entry->getArgument(5));
  }
  return kn;
}

} // namespace

OwningOpRef<ModuleOp> buildAttention(MLIRContext &ctx, const KernelSpec &spec) {
  ctx.loadDialect<
      AttnkitDialect, arith::ArithDialect, bufferization::BufferizationDialect,
      func::FuncDialect, linalg::LinalgDialect, math::MathDialect,
      memref::MemRefDialect, scf::SCFDialect, tensor::TensorDialect>();
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

namespace {

/// The body of the block's contractions: acc + x · w, a bf16 weight widened
/// to f32 first.
void multiplyAccumulate(OpBuilder &b, Location loc, ValueRange args) {
  Value w = args[1];
  if (!w.getType().isF32())
    w = arith::ExtFOp::create(b, loc, b.getF32Type(), w);
  Value product = arith::MulFOp::create(b, loc, args[0], w);
  linalg::YieldOp::create(
      b, loc, ValueRange{arith::AddFOp::create(b, loc, args[2], product)});
}

/// The attention block of one spec (buildAttentionBlock).
class BlockBuilder {
public:
  BlockBuilder(MLIRContext &ctx, const BlockSpec &spec)
      : spec_(spec), b_(UnknownLoc::get(&ctx), &ctx),
        sDim_(spec.tokens > 0 ? spec.tokens : kDyn) {}

  OwningOpRef<ModuleOp> build();

private:
  struct Args {
    Value x, wq, wk, wv, bq, bk, bv, wo, kCache, vCache, out, scale, p0, window;
  };
  Args declare(ModuleOp module);
  Value zeros(ArrayRef<OpFoldResult> shape) {
    Value empty = tensor::EmptyOp::create(b_, shape, b_.getF32Type());
    Value zero = arith::ConstantOp::create(b_, b_.getF32FloatAttr(0));
    return linalg::FillOp::create(b_, zero, empty).getResult(0);
  }
  /// Q = X · Wq [+ bq] as the seed writes it: a matmul, the expand_shape
  /// that splits its columns into (heads, G, D), the transpose to
  /// [n, G, s, D].
  Value projectQueries(const Args &a);
  /// The new tokens' K (or V) projected head-major straight into the cache
  /// slots, then the cache holding them; `transposed` for a [n, D, seq]
  /// cache.
  Value projectIntoCache(const Args &a, Value w, Value bias, Value cache,
                         bool transposed);
  /// The attention's output [n, G, s, D] into `out`: back to token-major
  /// rows, or through Wo.
  void emitOutput(const Args &a, Value o);
  /// `w` [hidden, n·D] (or [n·G·D, hidden] with `rowsSplit`) seen as heads.
  Value splitWeight(Value w, ArrayRef<int64_t> perHead, bool rowsSplit);

  const BlockSpec &spec_;
  ImplicitLocOpBuilder b_;
  /// The tokens per sequence: static for a single-token decode kernel.
  const int64_t sDim_;
  OpFoldResult s_, n_, p0_, hidden_;
};

BlockBuilder::Args BlockBuilder::declare(ModuleOp module) {
  b_.setInsertionPointToEnd(module.getBody());
  const int64_t d = spec_.headDim, h = kDyn; // hidden: a run-time size
  Type f32 = b_.getF32Type();
  Type w = spec_.weight == DType::kF32 ? f32 : b_.getBF16Type();
  Type index = b_.getIndexType();
  MemRefType xTy = stridedMemRef({sDim_, h}, f32);
  MemRefType wTy = stridedMemRef({h, kDyn}, w);
  MemRefType biasTy = stridedMemRef({kDyn}, f32);
  MemRefType woTy = stridedMemRef({kDyn, h}, w);
  MemRefType kTy = stridedMemRef({kDyn, kDyn, d}, f32);
  MemRefType vTy =
      spec_.vTransposed ? stridedMemRef({kDyn, d, kDyn}, f32) : kTy;
  MemRefType outTy = stridedMemRef({sDim_, kDyn}, f32);
  auto fnTy = b_.getFunctionType({xTy, wTy, wTy, wTy, biasTy, biasTy, biasTy,
                                  woTy, kTy, vTy, outTy, f32, index, index},
                                 {});
  auto fn = func::FuncOp::create(b_, kBlockName, fnTy);
  fn->setAttr(kSpecAttrName, b_.getStringAttr(spec_.key()));
  Block *entry = fn.addEntryBlock();
  b_.setInsertionPointToStart(entry);
  Args a;
  a.x = toTensor(b_, entry->getArgument(0));
  a.wq = toTensor(b_, entry->getArgument(1));
  a.wk = toTensor(b_, entry->getArgument(2));
  a.wv = toTensor(b_, entry->getArgument(3));
  if (spec_.qkvBias) {
    a.bq = toTensor(b_, entry->getArgument(4));
    a.bk = toTensor(b_, entry->getArgument(5));
    a.bv = toTensor(b_, entry->getArgument(6));
  }
  if (spec_.outputProjection)
    a.wo = toTensor(b_, entry->getArgument(7));
  a.kCache = entry->getArgument(8);
  a.vCache = entry->getArgument(9);
  a.out = entry->getArgument(10);
  a.scale = entry->getArgument(11);
  a.p0 = entry->getArgument(12);
  a.window = entry->getArgument(13);
  s_ =
      ShapedType::isDynamic(sDim_)
          ? OpFoldResult(
                memref::DimOp::create(b_, entry->getArgument(0), 0).getResult())
          : OpFoldResult(b_.getIndexAttr(sDim_));
  n_ = memref::DimOp::create(b_, a.kCache, 0).getResult();
  hidden_ = memref::DimOp::create(b_, entry->getArgument(0), 1).getResult();
  p0_ = a.p0;
  return a;
}

Value BlockBuilder::splitWeight(Value w, ArrayRef<int64_t> perHead,
                                bool rowsSplit) {
  // [hidden, n·perHead] -> [hidden, n, perHead...], or
  // [n·perHead, hidden] -> [n, perHead..., hidden].
  SmallVector<int64_t> shape{kDyn};
  SmallVector<OpFoldResult> sizes{n_};
  for (int64_t e : perHead) {
    shape.push_back(e);
    sizes.push_back(b_.getIndexAttr(e));
  }
  ReassociationIndices heads;
  for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i)
    heads.push_back(rowsSplit ? i : i + 1);
  SmallVector<ReassociationIndices> groups;
  if (rowsSplit) {
    groups = {heads, {static_cast<int64_t>(shape.size())}};
    shape.push_back(kDyn);
    sizes.push_back(hidden_);
  } else {
    groups = {{0}, heads};
    shape.insert(shape.begin(), kDyn);
    sizes.insert(sizes.begin(), hidden_);
  }
  auto type = RankedTensorType::get(
      shape, cast<RankedTensorType>(w.getType()).getElementType());
  return tensor::ExpandShapeOp::create(b_, type, w, groups, sizes);
}

Value BlockBuilder::projectQueries(const Args &a) {
  const int64_t g = spec_.group, d = spec_.headDim;
  AffineExpr n;
  bindSymbols(b_.getContext(), n);
  OpFoldResult width =
      affine::makeComposedFoldedAffineApply(b_, b_.getLoc(), n * (g * d), {n_});
  Value init;
  if (spec_.qkvBias) {
    Value empty = tensor::EmptyOp::create(b_, ArrayRef<OpFoldResult>{s_, width},
                                          b_.getF32Type());
    init = linalg::BroadcastOp::create(b_, a.bq, empty, ArrayRef<int64_t>{0})
               .getResult()[0];
  } else {
    init = zeros({s_, width});
  }
  Value q =
      linalg::MatmulOp::create(b_, ValueRange{a.x, a.wq}, ValueRange{init})
          .getResult(0);
  auto q4Ty = RankedTensorType::get({sDim_, kDyn, g, d}, b_.getF32Type());
  Value q4 = tensor::ExpandShapeOp::create(
      b_, q4Ty, q, SmallVector<ReassociationIndices>{{0}, {1, 2, 3}},
      SmallVector<OpFoldResult>{s_, n_, b_.getIndexAttr(g),
                                b_.getIndexAttr(d)});
  Value t = tensor::EmptyOp::create(
      b_,
      ArrayRef<OpFoldResult>{n_, b_.getIndexAttr(g), s_, b_.getIndexAttr(d)},
      b_.getF32Type());
  return linalg::TransposeOp::create(b_, q4, t, ArrayRef<int64_t>{1, 2, 0, 3})
      .getResult()[0];
}

Value BlockBuilder::projectIntoCache(const Args &a, Value w, Value bias,
                                     Value cacheMem, bool transposed) {
  const int64_t d = spec_.headDim;
  MLIRContext *ctx = b_.getContext();
  Value cache = toTensor(b_, cacheMem, /*writable=*/true);
  // The new tokens' slots: [n, p0 : p0 + s, D] (or [n, D, p0 : p0 + s]).
  SmallVector<OpFoldResult> offsets{b_.getIndexAttr(0), p0_,
                                    b_.getIndexAttr(0)};
  SmallVector<OpFoldResult> sizes{n_, s_, b_.getIndexAttr(d)};
  if (transposed) {
    std::swap(offsets[1], offsets[2]);
    std::swap(sizes[1], sizes[2]);
  }
  SmallVector<OpFoldResult> ones(3, b_.getIndexAttr(1));
  Value slots = tensor::ExtractSliceOp::create(b_, cache, offsets, sizes, ones);
  Value init;
  if (bias) {
    auto biasTy = RankedTensorType::get({kDyn, d}, b_.getF32Type());
    Value heads = tensor::ExpandShapeOp::create(
        b_, biasTy, bias, SmallVector<ReassociationIndices>{{0, 1}},
        SmallVector<OpFoldResult>{n_, b_.getIndexAttr(d)});
    init = linalg::BroadcastOp::create(b_, heads, slots,
                                       ArrayRef<int64_t>{transposed ? 2 : 1})
               .getResult()[0];
  } else {
    Value zero = arith::ConstantOp::create(b_, b_.getF32FloatAttr(0));
    init = linalg::FillOp::create(b_, zero, slots).getResult(0);
  }
  // new[h, t, e] = sum_c X[t, c] W[c, h, e]: loops (h, t, c, e), e innermost
  // so the weights and the cache row are read and written along unit
  // stride.
  Value wHeads = splitWeight(w, {d}, false);
  AffineExpr h, t, c, e;
  bindDims(ctx, h, t, c, e);
  auto map = [&](ArrayRef<AffineExpr> r) {
    return AffineMap::get(4, 0, r, ctx);
  };
  SmallVector<AffineMap> maps{map({t, c}), map({c, h, e}),
                              transposed ? map({h, e, t}) : map({h, t, e})};
  using utils::IteratorType;
  SmallVector<IteratorType> iters{
      IteratorType::parallel, IteratorType::parallel, IteratorType::reduction,
      IteratorType::parallel};
  Value projected = linalg::GenericOp::create(
                        b_, TypeRange{slots.getType()}, ValueRange{a.x, wHeads},
                        ValueRange{init}, maps, iters, multiplyAccumulate)
                        .getResult(0);
  return tensor::InsertSliceOp::create(b_, projected, cache, offsets, sizes,
                                       ones);
}

void BlockBuilder::emitOutput(const Args &a, Value o) {
  const int64_t g = spec_.group, d = spec_.headDim;
  MLIRContext *ctx = b_.getContext();
  if (!spec_.outputProjection) {
    // out [s, n·G·D] viewed as [s, n, G, D]; the transpose writes it.
    auto viewTy =
        MemRefType::get({sDim_, kDyn, g, d}, b_.getF32Type(),
                        StridedLayoutAttr::get(ctx, kDyn, {kDyn, g * d, d, 1}));
    Value view = memref::ExpandShapeOp::create(
        b_, viewTy, a.out, SmallVector<ReassociationIndices>{{0}, {1, 2, 3}},
        SmallVector<OpFoldResult>{s_, n_, b_.getIndexAttr(g),
                                  b_.getIndexAttr(d)});
    Value empty = tensor::EmptyOp::create(
        b_,
        ArrayRef<OpFoldResult>{s_, n_, b_.getIndexAttr(g), b_.getIndexAttr(d)},
        b_.getF32Type());
    Value rows =
        linalg::TransposeOp::create(b_, o, empty, ArrayRef<int64_t>{2, 0, 1, 3})
            .getResult()[0];
    bufferization::MaterializeInDestinationOp::create(
        b_, TypeRange{}, rows, view, /*restrict=*/true, /*writable=*/true);
    return;
  }
  // y[t, c] = sum over (h, G, D) of O[h, G, t, D] · Wo[h, G, D, c]: the
  // heads are a reduction here (Megatron's row-parallel Wo).
  Value wo = splitWeight(a.wo, {g, d}, true);
  AffineExpr t, c, h, gi, e;
  bindDims(ctx, t, c, h, gi, e);
  auto map = [&](ArrayRef<AffineExpr> r) {
    return AffineMap::get(5, 0, r, ctx);
  };
  using utils::IteratorType;
  SmallVector<IteratorType> iters{
      IteratorType::parallel, IteratorType::parallel, IteratorType::reduction,
      IteratorType::reduction, IteratorType::reduction};
  Value init = zeros({s_, hidden_});
  Value y = linalg::GenericOp::create(b_, TypeRange{init.getType()},
                                      ValueRange{o, wo}, ValueRange{init},
                                      SmallVector<AffineMap>{map({h, gi, t, e}),
                                                             map({h, gi, e, c}),
                                                             map({t, c})},
                                      iters, multiplyAccumulate)
                .getResult(0);
  bufferization::MaterializeInDestinationOp::create(
      b_, TypeRange{}, y, a.out, /*restrict=*/true, /*writable=*/true);
}

OwningOpRef<ModuleOp> BlockBuilder::build() {
  OwningOpRef<ModuleOp> module = ModuleOp::create(b_);
  const Args a = declare(*module);
  const int64_t g = spec_.group, d = spec_.headDim;
  Value q = projectQueries(a);
  Value kCache = projectIntoCache(a, a.wk, a.bk, a.kCache, false);
  Value vCache = projectIntoCache(a, a.wv, a.bv, a.vCache, spec_.vTransposed);
  // The attention reads the cache prefix [0, p0 + s): context + new tokens.
  AffineExpr p, s;
  bindSymbols(b_.getContext(), p, s);
  OpFoldResult kvLen =
      affine::makeComposedFoldedAffineApply(b_, b_.getLoc(), p + s, {p0_, s_});
  auto prefix = [&](Value cache, bool transposed) -> Value {
    SmallVector<OpFoldResult> sizes{n_, kvLen, b_.getIndexAttr(d)};
    if (transposed)
      std::swap(sizes[1], sizes[2]);
    SmallVector<OpFoldResult> zero(3, b_.getIndexAttr(0));
    SmallVector<OpFoldResult> ones(3, b_.getIndexAttr(1));
    return tensor::ExtractSliceOp::create(b_, cache, zero, sizes, ones);
  };
  auto outTy = RankedTensorType::get({kDyn, g, sDim_, d}, b_.getF32Type());
  auto lseTy = RankedTensorType::get({kDyn, g, sDim_}, b_.getF32Type());
  auto attn = AttentionOp::create(
      b_, TypeRange{outTy, lseTy}, q, prefix(kCache, false),
      prefix(vCache, spec_.vTransposed), a.scale, /*bias=*/Value(),
      /*key_scale=*/Value(), /*value_scale=*/Value(),
      /*v_transposed=*/spec_.vTransposed);
  emitModifier(b_, attn, spec_.mask, a.p0, a.window);
  b_.setInsertionPointAfter(attn);
  emitOutput(a, attn.getOutput());
  bufferization::MaterializeInDestinationOp::create(
      b_, TypeRange{}, kCache, a.kCache, /*restrict=*/true, /*writable=*/true);
  bufferization::MaterializeInDestinationOp::create(
      b_, TypeRange{}, vCache, a.vCache, /*restrict=*/true, /*writable=*/true);
  func::ReturnOp::create(b_);
  return module;
}

} // namespace

OwningOpRef<ModuleOp> buildAttentionBlock(MLIRContext &ctx,
                                          const BlockSpec &spec) {
  ctx.loadDialect<AttnkitDialect, affine::AffineDialect, arith::ArithDialect,
                  bufferization::BufferizationDialect, func::FuncDialect,
                  linalg::LinalgDialect, memref::MemRefDialect,
                  tensor::TensorDialect>();
  return BlockBuilder(ctx, spec).build();
}

} // namespace attnkit::compiled
