#include "compiled/pipeline.h"

#include "compiled/passes.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

#include "llvm/Support/raw_ostream.h"
#include "llvm/TargetParser/Host.h"

#include <functional>

using namespace mlir;

namespace attnkit::compiled {

namespace {

// No canonicalize before bufferization: it would fold the extract_slice of
// the statically shaped tensor.empty tiles back into dynamic ones, and
// dynamic allocations cannot leave the loops. (Only loops the vectorizer
// left alone still hold tensors.)
constexpr const char *kBufferizePipeline =
    "eliminate-empty-tensors,"
    "one-shot-bufferize,"
    // Folds casts into static shapes (a decode block's one-token tiles)
    // before the allocations are hoisted and put on the stack.
    "canonicalize,"
    "func.func(buffer-loop-hoisting,buffer-hoisting,"
    "promote-buffers-to-stack{max-alloc-size-in-bytes=1048576 "
    "max-rank-of-allocated-memref=4}),"
    "buffer-deallocation-pipeline,"
    "func.func(convert-linalg-to-loops)";
constexpr const char *kAfterApproximation =
    "canonicalize,cse,loop-invariant-code-motion";

constexpr const char *kLLVMPipeline =
    "func.func(convert-vector-to-scf{full-unroll=1}),"
    "convert-vector-to-llvm{reassociate-fp-reductions=1 "
    "enable-x86vector=1},"
    "expand-strided-metadata,lower-affine,convert-scf-to-cf,"
    "convert-math-to-llvm,convert-arith-to-llvm,convert-ub-to-llvm,"
    "convert-index-to-llvm,"
    "finalize-memref-to-llvm{use-generic-functions=1},"
    "convert-func-to-llvm,convert-cf-to-llvm,reconcile-unrealized-casts,"
    "canonicalize,cse";

/// Upstream passes are named in text (registerUpstreamPasses makes the text
/// parse); ours are added by their create functions, so lowering registers
/// nothing of ours (registerAttnkitPasses is for the tools' command lines).
void registerUpstreamPasses() {
  static const bool once = [] {
    registerAllPasses();
    return true;
  }();
  (void)once;
}

/// One step of a pipeline: upstream passes as text, or one of ours.
struct Step {
  const char *text = nullptr;
  std::function<std::unique_ptr<Pass>()> create = nullptr;
  bool onFunctions = false; // nested on func.func
};

LogicalResult runPipeline(ModuleOp module, std::initializer_list<Step> steps,
                          const PipelineOptions &options) {
  registerUpstreamPasses();
  PassManager pm(module->getName());
  if (options.printIrAfterAll) {
    module.getContext()->disableMultithreading();
    pm.enableIRPrinting([](Pass *, Operation *) { return false; },
                        [](Pass *, Operation *) { return true; },
                        /*printModuleScope=*/true,
                        /*printAfterOnlyOnChange=*/false);
  }
  for (const Step &step : steps) {
    if (step.create) {
      if (step.onFunctions)
        pm.addNestedPass<func::FuncOp>(step.create());
      else
        pm.addPass(step.create());
      continue;
    }
    std::string error;
    llvm::raw_string_ostream os(error);
    if (failed(parsePassPipeline(step.text, pm, os))) {
      module.emitError("bad pipeline: ") << error;
      return failure();
    }
  }
  return pm.run(module);
}

} // namespace

bool hostHasAvx512Dq() {
  static const bool has = [] {
    const llvm::StringMap<bool, llvm::MallocAllocator> features =
        llvm::sys::getHostCPUFeatures();
    for (const char *f : {"avx512f", "avx512dq"}) {
      auto it = features.find(f);
      if (it == features.end() || !it->second)
        return false;
    }
    return true;
  }();
  return has;
}

LogicalResult lowerToStage(ModuleOp module, Stage stage,
                           const PipelineOptions &options) {
  if (stage == Stage::kAttention)
    return success();
  // A block's attention has a KV-head dimension: first the loop over heads,
  // each holding its single-group attention (a no-op for an attention).
  if (failed(runPipeline(module,
                         {{.create = createSplitHeads, .onFunctions = true}},
                         options)))
    return failure();
  if (stage == Stage::kHeads)
    return success();
  if (stage == Stage::kNaive)
    return runPipeline(
        module, {{.create = createDecomposeAttention, .onFunctions = true}},
        options);
  // Every attention op is flash-rewritten; one that were not would lower
  // through the naive chain rather than be left to fail bufferization.
  if (failed(runPipeline(
          module,
          {{.create = [&] { return createFlashAttention(options.flash); },
            .onFunctions = true},
           {.create = createDecomposeAttention, .onFunctions = true},
           {.text = "cse"}},
          options)))
    return failure();
  if (stage == Stage::kFused)
    return success();
  if (failed(runPipeline(
          module,
          {{.create = [&] { return createVectorizeFlash(options.vectorize); },
            .onFunctions = true}},
          options)))
    return failure();
  bool tensorsLeft = false;
  module.walk([&](Operation *op) {
    if (isa<bufferization::ToTensorOp>(op) && !op->use_empty() &&
        llvm::any_of(op->getUsers(),
                     [](Operation *u) { return !isa<tensor::DimOp>(u); }))
      tensorsLeft = true;
    for (Type t : op->getResultTypes())
      if (isa<TensorType>(t) &&
          !isa<bufferization::ToTensorOp, tensor::DimOp>(op))
        tensorsLeft = true;
  });
  // After a complete vectorization only dead tensor views of the arguments
  // are left: canonicalize folds their dims to memref.dim and erases them;
  // the bufferization passes (a fifth of the MLIR time) have nothing to do.
  const Step approximate{
      .create = [&] { return createApproximateMath(options.math); }};
  const LogicalResult lowered =
      tensorsLeft ? runPipeline(module,
                                {{.text = kBufferizePipeline},
                                 approximate,
                                 {.text = kAfterApproximation}},
                                options)
                  : runPipeline(module,
                                {{.text = "canonicalize"},
                                 approximate,
                                 {.text = "canonicalize,cse"}},
                                options);
  if (failed(lowered))
    return failure();
  if (stage == Stage::kVectorized)
    return success();
  module.walk([](func::FuncOp fn) {
    fn->setAttr(LLVM::LLVMDialect::getEmitCWrapperAttrName(),
                UnitAttr::get(fn.getContext()));
  });
  return runPipeline(module, {{.text = kLLVMPipeline}}, options);
}

LogicalResult lowerAppendToLLVM(ModuleOp module) {
  module.walk([](func::FuncOp fn) {
    fn->setAttr(LLVM::LLVMDialect::getEmitCWrapperAttrName(),
                UnitAttr::get(fn.getContext()));
  });
  return runPipeline(
      module,
      {{.text = "func.func(convert-linalg-to-loops)"}, {.text = kLLVMPipeline}},
      {});
}

void registerAttnkitPipelines() {
  static const bool once = [] {
    PassPipelineRegistration<>(
        "attnkit-lower-to-llvm",
        "Vectorize and bufferize the flash form, lower to loops and to the "
        "LLVM dialect",
        [](OpPassManager &pm) {
          std::string pipeline =
              std::string("func.func(attnkit-vectorize-flash),") +
              kBufferizePipeline + ",attnkit-approximate-math," +
              kAfterApproximation + "," + kLLVMPipeline;
          (void)parsePassPipeline(pipeline, pm);
        });
    return true;
  }();
  (void)once;
}

} // namespace attnkit::compiled
