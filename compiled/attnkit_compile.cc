// attnkit-compile: prints the IR of one pipeline stage for a problem, Toy
// `-emit=` style:
//   attnkit-compile --stage fused --heads 32 --kv-heads 8 --head-dim 128
//       --mask causal --dtype bf16 --layout tv
// Lengths (--batch --kv-len) are accepted for symmetry with the other
// subcommands but never change the IR: sequence dims are dynamic. --q-len
// picks the kernel family (decode below 4 rows), as the backend does.
#include "compiled/aot.h"
#include "compiled/ir_builder.h"
#include "compiled/pipeline.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "mlir/Target/LLVMIR/Export.h"

#include "mlir/IR/OperationSupport.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/ToolOutputFile.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/raw_ostream.h"

namespace cl = llvm::cl;
using namespace attnkit;
using namespace attnkit::compiled;

static cl::opt<std::string> stageOpt("stage",
                                     cl::desc("naive|fused|vectorized|llvm"),
                                     cl::init("fused"));
static cl::opt<int64_t> heads("heads", cl::desc("query heads"), cl::init(1));
static cl::opt<int64_t> kvHeads("kv-heads", cl::desc("kv heads (0 = heads)"),
                                cl::init(0));
static cl::opt<int64_t> headDim("head-dim", cl::init(64));
static cl::opt<std::string>
    maskOpt("mask", cl::desc("none|causal|window:W|bias"), cl::init("none"));
static cl::opt<std::string> dtypeOpt("dtype", cl::desc("f32|bf16"),
                                     cl::init("f32"));
static cl::opt<std::string> layoutOpt("layout", cl::desc("bhsd|bshd|tv"),
                                      cl::init("bhsd"));
static cl::opt<int64_t> batch("batch", cl::desc("ignored by the IR"),
                              cl::init(1));
static cl::opt<int64_t> qLen("q-len",
                             cl::desc("selects the decode (< 4) or prefill "
                                      "kernel; the IR has dynamic lengths"),
                             cl::init(16));
static cl::opt<int64_t> kvLen("kv-len", cl::desc("ignored by the IR"),
                              cl::init(1));
static cl::opt<int64_t>
    queryTile("query-tile",
              cl::desc("query rows per tile (default: what the backend uses "
                       "for --q-len: 1 below 4 rows, else 16)"),
              cl::init(16));
static cl::opt<int64_t> kvTile("kv-tile", cl::init(64));
static cl::opt<bool>
    emitLlvmIr("emit-llvm-ir",
               cl::desc("AOT: lower to LLVM and print LLVM IR (for clang -c) "
                        "with the kernel named attnkit_aot_<spec key>"),
               cl::init(false));
static cl::opt<std::string> outputFile("o", cl::desc("output file"),
                                       cl::init("-"));
static cl::opt<bool> printKey("print-key",
                              cl::desc("print the specialization key only"),
                              cl::init(false));
static cl::opt<bool> printAfterAll("print-ir-after-all",
                                   cl::desc("print the IR after every pass"),
                                   cl::init(false));

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::ParseCommandLineOptions(argc, argv, "attnkit stage dumper\n");
  auto fail = [](const llvm::Twine &msg) {
    llvm::errs() << "attnkit-compile: " << msg << "\n";
    return 2;
  };
  std::optional<Stage> stage = parseStage(stageOpt);
  if (!stage)
    return fail("unknown --stage " + stageOpt);
  int64_t kvh = kvHeads == 0 ? heads : kvHeads;
  if (heads <= 0 || kvh <= 0 || heads % kvh != 0)
    return fail("--heads must be a positive multiple of --kv-heads");
  if (headDim <= 0)
    return fail("--head-dim must be positive");
  KernelSpec spec;
  spec.headDim = headDim;
  spec.group = heads / kvh;
  // --mask window:W: W is a run-time argument, the kernel is the same.
  const std::string maskArg = maskOpt;
  const std::string maskName = maskArg.substr(0, maskArg.find(':'));
  std::optional<MaskKind> mask = ParseMaskKind(maskName);
  if (!mask || (maskName != maskArg && *mask != MaskKind::kWindow))
    return fail("unknown --mask " + maskArg);
  spec.mask = *mask;
  std::optional<DType> dtype = ParseDType(dtypeOpt);
  if (!dtype)
    return fail("unknown --dtype " + dtypeOpt);
  spec.elem = *dtype;
  std::optional<KvLayout> layout = ParseKvLayout(layoutOpt);
  if (!layout)
    return fail("unknown --layout " + layoutOpt);
  spec.vTransposed = *layout == KvLayout::kTransposedV;

  spec.queryTile =
      queryTile.getNumOccurrences() ? queryTile : queryTileFor(qLen);
  if (printKey) {
    llvm::outs() << spec.key() << "\n";
    return 0;
  }

  mlir::DialectRegistry registry;
  registerCompiledDialects(registry);
  mlir::registerAllToLLVMIRTranslations(registry);
  mlir::MLIRContext ctx(registry);
  auto module = buildNaiveAttention(ctx, spec);
  PipelineOptions options;
  options.flash.queryTile = spec.queryTile;
  options.flash.kvTile = kvTile;
  options.printIrAfterAll = printAfterAll;
  if (emitLlvmIr) {
    // The AOT symbol: the one aot.h gives the spec, which the kernel cache's
    // registry links against (aot_registry.cc).
    std::optional<std::string_view> symbol = aotSymbolFor(spec);
    if (!symbol)
      return fail(spec.key() + " is not listed in compiled/aot_kernels.inc");
    module->walk([&](mlir::func::FuncOp fn) { fn.setSymName(*symbol); });
    *stage = Stage::kLLVM;
  }
  if (mlir::failed(lowerToStage(*module, *stage, options)))
    return fail("lowering failed");
  std::string err;
  auto out = mlir::openOutputFile(outputFile, &err);
  if (!out)
    return fail(err);
  if (emitLlvmIr) {
    llvm::LLVMContext llvmCtx;
    auto llvmModule = mlir::translateModuleToLLVMIR(*module, llvmCtx);
    if (!llvmModule)
      return fail("translation to LLVM IR failed");
    llvmModule->print(out->os(), nullptr);
  } else {
    module->print(out->os());
    out->os() << "\n";
  }
  out->keep();
  return 0;
}
