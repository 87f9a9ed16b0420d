//===- split_heads_pass.cc - Megatron-style tiling of the block -----------===//
//
// `attnkit-split-heads` (Passes.td has the documentation and an example):
// the attention block's loop over KV heads, built by upstream's tile-and-fuse
// driver from the consumer of a headed attnkit.attention, then each head's
// attention rewritten to the single-group form the flash rewrite takes.
//
//===----------------------------------------------------------------------===//

#include "compiled/attnkit_dialect.h"
#include "compiled/passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/MemRef/Transforms/Transforms.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Transforms/TileUsingInterface.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tensor/Transforms/Transforms.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

using namespace mlir;

namespace attnkit::compiled {

#define GEN_PASS_DEF_SPLITHEADS
#include "compiled/Passes.h.inc"

namespace {

/// The loop of `consumer` that walks the heads of `operand` (its leading
/// dimension), or -1 when the operand's map does not give one.
int64_t headLoopOf(linalg::LinalgOp consumer, OpOperand &operand) {
  AffineMap map = consumer.getMatchingIndexingMap(&operand);
  auto dim = dyn_cast<AffineDimExpr>(map.getResult(0));
  return dim ? static_cast<int64_t>(dim.getPosition()) : -1;
}

scf::SCFTileAndFuseOptions headTilingOptions(MLIRContext *ctx,
                                             ArrayRef<OpFoldResult> tiles) {
  scf::SCFTilingOptions tiling;
  tiling.setTileSizes(tiles);
  tiling.setLoopType(scf::SCFTilingOptions::LoopType::ForOp);
  scf::SCFTileAndFuseOptions options;
  options.setTilingOptions(tiling);
  // The seed's "fix fusion for reduction tiling": when the head loop is a
  // reduction (the output projection sums over heads), the consumer's
  // destination slice comes from the loop's iter_arg; fusing its producer
  // (the zero fill) would reset the accumulator in every iteration.
  options.setFusionControlFn(
      [](tensor::ExtractSliceOp slice, OpResult, bool isDestination)
          -> std::optional<scf::SCFTileAndFuseOptions::ControlFnResult> {
        if (isDestination && isa<BlockArgument>(slice.getSource()))
          return std::nullopt;
        return scf::SCFTileAndFuseOptions::ControlFnResult{};
      });
  // The seed's "fusion across expand_shape": a head's slice of the
  // projection's [tokens, heads x G x D] result passes the expand_shape
  // that splits the columns (bubbled up as a cleanup of the fusion), so
  // the matmul itself is fused on its head's columns of the weights.
  RewritePatternSet cleanup(ctx);
  tensor::populateBubbleUpExtractSliceOpPatterns(cleanup);
  tensor::populateMergeConsecutiveInsertExtractSlicePatterns(cleanup);
  options.cleanupPatterns = FrozenRewritePatternSet(std::move(cleanup));
  return options;
}

/// Erases every op of `fn` left without uses and without side effects (the
/// untiled producers after fusion), innermost and last first.
void eraseDeadOps(func::FuncOp fn, RewriterBase &rewriter) {
  bool changed = true;
  while (changed) {
    changed = false;
    SmallVector<Operation *> dead;
    fn.walk([&](Operation *op) {
      if (op != fn && isOpTriviallyDead(op))
        dead.push_back(op);
    });
    // Users come after their operands' producers: erase from the back.
    for (Operation *op : llvm::reverse(dead)) {
      rewriter.eraseOp(op);
      changed = true;
    }
  }
}

/// Drops the leading unit dimension of `t` (a tensor.collapse_shape) and
/// makes its sequence dimensions (all but the group and head_dim, which the
/// single-group op has static) dynamic: the flash rewrite takes any length,
/// also the static single token of a decode kernel.
Value dropHead(OpBuilder &b, Location loc, Value t, ArrayRef<bool> keep) {
  if (!t)
    return t;
  auto type = cast<RankedTensorType>(t.getType());
  SmallVector<ReassociationIndices> groups{{0, 1}};
  for (int64_t i = 2; i < type.getRank(); ++i)
    groups.push_back({i});
  Value single = tensor::CollapseShapeOp::create(b, loc, t, groups);
  SmallVector<int64_t> shape(type.getShape().drop_front());
  for (size_t i = 0; i < shape.size(); ++i)
    if (!keep[i])
      shape[i] = ShapedType::kDynamic;
  auto dynamic = type.clone(shape);
  if (dynamic == single.getType())
    return single;
  return tensor::CastOp::create(b, loc, dynamic, single);
}

/// One head's attention (H = 1) as the single-group op, its results
/// expanded back to one head.
void toSingleGroup(AttentionOp op, RewriterBase &rewriter) {
  rewriter.setInsertionPoint(op);
  Location loc = op.getLoc();
  const bool vt = op.getVTransposed();
  const SmallVector<bool> q{true, false, true}, kv{false, true},
      tv{true, false}, bias{true, false, false}, scales{false};
  Value query = dropHead(rewriter, loc, op.getQuery(), q);
  auto type = [&](Value theirs) {
    auto t = cast<RankedTensorType>(theirs.getType());
    SmallVector<int64_t> shape(t.getShape().drop_front());
    shape[1] = ShapedType::kDynamic; // the query rows
    return t.clone(shape);
  };
  auto single = AttentionOp::create(
      rewriter, loc, TypeRange{type(op.getOutput()), type(op.getLse())}, query,
      dropHead(rewriter, loc, op.getKey(), kv),
      dropHead(rewriter, loc, op.getValue(), vt ? tv : kv), op.getScale(),
      dropHead(rewriter, loc, op.getBias(), bias),
      dropHead(rewriter, loc, op.getKeyScale(), scales),
      dropHead(rewriter, loc, op.getValueScale(), scales),
      op.getVTransposedAttr());
  IRMapping map;
  op.getModifier().cloneInto(&single.getModifier(), map);
  SmallVector<Value> results;
  for (auto [mine, theirs] :
       llvm::zip(single->getResults(), op->getResults())) {
    auto t = cast<RankedTensorType>(theirs.getType());
    auto withoutHead = t.clone(t.getShape().drop_front());
    Value v = mine;
    if (withoutHead != v.getType())
      v = tensor::CastOp::create(rewriter, loc, withoutHead, v);
    SmallVector<ReassociationIndices> groups{{0, 1}};
    for (int64_t i = 2; i < t.getRank(); ++i)
      groups.push_back({i});
    results.push_back(
        tensor::ExpandShapeOp::create(rewriter, loc, t, v, groups));
  }
  rewriter.replaceOp(op, results);
}

/// Rows per tile of a contraction's run-time-sized parallel dims (tokens,
/// a band of heads): the weight row a reduction step reads is reused from L1
/// across the tile's rows, and the output tile stays in L2.
constexpr int64_t kRowTile = 16;

/// `generic`'s loops with the reductions first, then its parallel loops,
/// then the output's last dimension innermost: the unit-stride dimension of
/// the output and of the weights, a parallel loop LLVM vectorizes (a named
/// matmul's innermost loop is its reduction, which reads the weights with a
/// stride). Multiplies and adds may contract into FMAs.
LogicalResult interchangeForUnitStride(linalg::GenericOp generic,
                                       RewriterBase &rewriter) {
  AffineMap out = generic.getIndexingMapMatchingResult(generic->getResult(0));
  auto last = dyn_cast<AffineDimExpr>(out.getResults().back());
  if (!last)
    return success();
  SmallVector<unsigned> order;
  SmallVector<utils::IteratorType> iters = generic.getIteratorTypesArray();
  for (bool reductions : {true, false})
    for (unsigned i = 0; i < generic.getNumLoops(); ++i)
      if (i != last.getPosition() &&
          (iters[i] == utils::IteratorType::reduction) == reductions)
        order.push_back(i);
  order.push_back(last.getPosition());
  if (failed(linalg::interchangeGenericOp(rewriter, generic, order)))
    return generic->emitOpError("could not be interchanged");
  generic.getBody()->walk([&](Operation *arith) {
    if (auto fm = dyn_cast<arith::ArithFastMathInterface>(arith))
      arith->setAttr(fm.getFastMathAttrName(),
                     arith::FastMathFlagsAttr::get(
                         arith->getContext(), arith::FastMathFlags::contract));
  });
  return success();
}

/// The block's contractions (the projections, sliced or not, and Wo) as
/// generics tiled by kRowTile along their run-time-sized parallel dims but
/// the innermost, each tile in interchangeForUnitStride's order: for each
/// reduction step, the tile's rows, then a vectorized row of columns.
LogicalResult orderForUnitStride(func::FuncOp fn, RewriterBase &rewriter) {
  SmallVector<linalg::LinalgOp> contractions;
  fn.walk([&](linalg::LinalgOp op) {
    if (op.getNumReductionLoops() > 0 && op.getNumDpsInits() == 1)
      contractions.push_back(op);
  });
  for (linalg::LinalgOp op : contractions) {
    rewriter.setInsertionPoint(op);
    linalg::GenericOp generic = dyn_cast<linalg::GenericOp>(op.getOperation());
    if (!generic) {
      FailureOr<linalg::GenericOp> g = linalg::generalizeNamedOp(rewriter, op);
      if (failed(g))
        return op->emitOpError("could not be generalized");
      generic = *g;
    }
    AffineMap out = generic.getIndexingMapMatchingResult(generic->getResult(0));
    auto last = dyn_cast<AffineDimExpr>(out.getResults().back());
    SmallVector<int64_t> ranges = generic.getStaticLoopRanges();
    SmallVector<utils::IteratorType> iters = generic.getIteratorTypesArray();
    SmallVector<OpFoldResult> tiles(generic.getNumLoops(),
                                    rewriter.getIndexAttr(0));
    bool tiled = false;
    for (unsigned i = 0; i < generic.getNumLoops(); ++i)
      if (iters[i] == utils::IteratorType::parallel &&
          ShapedType::isDynamic(ranges[i]) &&
          (!last || i != last.getPosition())) {
        tiles[i] = rewriter.getIndexAttr(kRowTile);
        tiled = true;
      }
    if (tiled) {
      scf::SCFTilingOptions options;
      options.setTileSizes(tiles);
      FailureOr<scf::SCFTilingResult> t = scf::tileUsingSCF(
          rewriter, cast<TilingInterface>(generic.getOperation()), options);
      if (failed(t) || t->tiledOps.size() != 1)
        return generic->emitOpError("could not be tiled by rows");
      rewriter.replaceOp(generic, t->replacements);
      generic = cast<linalg::GenericOp>(t->tiledOps.front());
    }
    if (failed(interchangeForUnitStride(generic, rewriter)))
      return failure();
  }
  return success();
}

class SplitHeadsPass : public impl::SplitHeadsBase<SplitHeadsPass> {
public:
  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    SmallVector<AttentionOp> headed;
    fn.walk([&](AttentionOp op) {
      if (op.hasHeadDim())
        headed.push_back(op);
    });
    IRRewriter rewriter(&getContext());
    for (AttentionOp op : headed)
      if (failed(splitHeads(op, rewriter)))
        return signalPassFailure();
    // The loop's sizes still ask the untiled ops for their dims: answer
    // from their operands, so the untiled producers die.
    RewritePatternSet dims(&getContext());
    memref::populateResolveRankedShapedTypeResultDimsPatterns(dims);
    memref::populateResolveShapedTypeResultDimsPatterns(dims);
    tensor::DimOp::getCanonicalizationPatterns(dims, &getContext());
    // A head's slice of an untiled tensor.empty (the Q projection's and its
    // transpose's destinations) becomes an empty of one head: nothing of
    // all heads' size is left to allocate.
    tensor::populateFoldTensorEmptyPatterns(dims);
    if (failed(applyPatternsGreedily(fn, std::move(dims))))
      return signalPassFailure();
    eraseDeadOps(fn, rewriter);
    SmallVector<AttentionOp> tiles;
    fn.walk([&](AttentionOp op) {
      if (op.hasHeadDim() && op.getQuery().getType().getDimSize(0) == 1)
        tiles.push_back(op);
    });
    for (AttentionOp op : tiles)
      toSingleGroup(op, rewriter);
    if (!headed.empty() && failed(orderForUnitStride(fn, rewriter)))
      return signalPassFailure();
  }

private:
  LogicalResult splitHeads(AttentionOp op, RewriterBase &rewriter) {
    if (!op.getLse().use_empty() || !op.getOutput().hasOneUse())
      return op.emitOpError("expects its output to have exactly one consumer "
                            "and its lse none (the block's form)");
    OpOperand &use = *op.getOutput().getUses().begin();
    auto consumer = dyn_cast<linalg::LinalgOp>(use.getOwner());
    int64_t loop = consumer ? headLoopOf(consumer, use) : -1;
    if (loop < 0)
      return op.emitOpError("expects a linalg consumer whose indexing map "
                            "walks the output's heads with one loop");
    SmallVector<OpFoldResult> tiles(consumer.getNumLoops(),
                                    rewriter.getIndexAttr(0));
    tiles[loop] = rewriter.getIndexAttr(1);
    rewriter.setInsertionPoint(consumer);
    FailureOr<scf::SCFTileAndFuseResult> result =
        scf::tileConsumerAndFuseProducersUsingSCF(
            rewriter, cast<TilingInterface>(consumer.getOperation()),
            headTilingOptions(&getContext(), tiles));
    if (failed(result) || result->loops.size() != 1)
      return consumer->emitOpError("could not be tiled over the heads");
    setFlashRole(result->loops.front().getOperation(), FlashRole::HeadLoop);
    for (OpResult r : consumer->getResults())
      rewriter.replaceAllUsesWith(r, result->replacements.lookup(r));
    rewriter.eraseOp(consumer);
    return success();
  }
};

} // namespace

} // namespace attnkit::compiled
