// attnkit-compile: the stage dumper. Builds the attention kernel of one
// problem and prints it after the pipeline stage `--emit` names, Toy
// `-emit=` style:
//   --emit=naive       the naive Linalg module (QK^T materialized)
//   --emit=fused       its FlashAttention form (loop over KV tiles)
//   --emit=vectorized  bufferized loop + vector code
//   --emit=llvm        the LLVM dialect
//   --emit=llvm-ir     LLVM IR (what the build hands clang-22 for the AOT
//                      kernels; a kernel listed in aot_kernels.inc is named
//                      by its AOT symbol)
// e.g.
//   attnkit-compile --emit=fused --heads 32 --kv-heads 8 --head-dim 128
//       --mask causal --dtype bf16 --layout tv
// The stages' names are compiled/pipeline.h's kStageNames. attnkit-opt is
// the other tool: mlir-opt with our passes, for IR in files.
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

// What --emit accepts: every pipeline stage, then LLVM IR.
static constexpr llvm::StringLiteral kLlvmIr = "llvm-ir";
static const std::string emitNames = kStageNames.Names() + "|" + kLlvmIr.str();
static cl::opt<std::string> emitOpt("emit", cl::desc(emitNames),
                                    cl::value_desc("stage"), cl::init("fused"));
static cl::opt<int64_t> heads("heads", cl::desc("query heads"), cl::init(1));
static cl::opt<int64_t> kvHeads("kv-heads", cl::desc("kv heads (0 = heads)"),
                                cl::init(0));
static cl::opt<int64_t> headDim("head-dim", cl::init(64));
// The runtime's tables name the values (the window's width is a run-time
// argument: window:W selects the same kernel as window).
static const std::string maskNames = [] {
  std::string names;
  for (const auto &e : kMaskKindNames)
    names += (names.empty() ? "" : "|") + std::string(e.name) +
             (e.value == MaskKind::kWindow ? ":W" : "");
  return names;
}();
static const std::string dtypeNames = kDTypeNames.Names();
static const std::string layoutNames = kKvLayoutNames.Names();
static cl::opt<std::string> maskOpt("mask", cl::desc(maskNames),
                                    cl::init("none"));
static cl::opt<std::string> dtypeOpt("dtype", cl::desc(dtypeNames),
                                     cl::init("f32"));
static cl::opt<std::string> layoutOpt("layout", cl::desc(layoutNames),
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
  const bool emitLlvmIr = emitOpt == kLlvmIr;
  std::optional<Stage> stage =
      emitLlvmIr ? Stage::kLLVM : kStageNames.Parse(emitOpt);
  if (!stage)
    return fail("--emit=" + emitOpt + ": not " + emitNames);
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
    return fail("--mask=" + maskArg + ": not " + maskNames);
  spec.mask = *mask;
  std::optional<DType> dtype = ParseDType(dtypeOpt);
  if (!dtype)
    return fail("--dtype=" + dtypeOpt + ": not " + dtypeNames);
  spec.elem = *dtype;
  std::optional<KvLayout> layout = ParseKvLayout(layoutOpt);
  if (!layout)
    return fail("--layout=" + layoutOpt + ": not " + layoutNames);
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
    // A listed kernel is named by its AOT symbol: the one aot.h gives the
    // spec, which the kernel cache's registry links against
    // (aot_registry.cc). Any other keeps the builder's name.
    if (std::optional<std::string_view> symbol = aotSymbolFor(spec))
      module->walk([&](mlir::func::FuncOp fn) { fn.setSymName(*symbol); });
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
