// attnkit-compile: the stage dumper. Builds the attention kernel of one
// problem and prints it after the pipeline stage `--emit` names, Toy
// `-emit=` style:
//   --emit=attention   the attnkit.attention op as built
//   --emit=naive       its naive Linalg chain (QK^T materialized)
//   --emit=fused       its FlashAttention form (loop over KV tiles)
//   --emit=vectorized  bufferized loop + vector code
//   --emit=llvm        the LLVM dialect
//   --emit=llvm-ir     LLVM IR (what the build hands clang-22 for the AOT
//                      kernels; a kernel listed in aot_kernels.inc is named
//                      by its AOT symbol)
// e.g.
//   attnkit-compile --emit=fused --heads 32 --kv-heads 8 --head-dim 128
//       --mask causal --dtype bf16 --layout tv [--kv-dtype i8]
// The stages' names are compiled/pipeline.h's kStageNames. attnkit-opt is
// the other tool: mlir-opt with our passes, for IR in files.
// Lengths (--batch --kv-len) are accepted for symmetry with the other
// subcommands but never change the IR: sequence dims are dynamic. --q-len
// picks the kernel family (decode below 4 rows), as the backend does.
#include "compiled/aot.h"
#include "compiled/ir_builder.h"
#include "compiled/pipeline.h"
#include "runtime/attention_block.h"
#include "runtime/limits.h"
#include "runtime/parse.h"
#include "runtime/problem.h"

#include <cstdlib>
#include <new>
#include <string_view>

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
#include "llvm/Support/ErrorHandling.h"
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
static const std::string dtypeNames = kFloatDTypeNames.Names();
static const std::string layoutNames = kKvLayoutNames.Names();
static cl::opt<std::string> maskOpt("mask", cl::desc(maskNames),
                                    cl::init("none"));
static cl::opt<std::string> dtypeOpt("dtype", cl::desc(dtypeNames),
                                     cl::init("f32"));
// K/V storage: the --dtype (default) or i8, a quantized KV cache (the
// kernel then takes k_scale/v_scale).
static cl::opt<std::string>
    kvDtypeOpt("kv-dtype", cl::desc("K/V storage: i8, or --dtype's (default)"),
               cl::init(""));
static cl::opt<std::string> layoutOpt("layout", cl::desc(layoutNames),
                                      cl::init("bhsd"));
static cl::opt<int64_t> batch("batch", cl::desc("ignored by the IR"),
                              cl::init(1));
static cl::opt<int64_t> qLen("q-len",
                             cl::desc("selects the decode (< 4) or prefill "
                                      "kernel; the IR has dynamic lengths"),
                             cl::init(16));
static cl::opt<int64_t> kvLen("kv-len",
                              cl::desc("ignored by the IR (default: --q-len)"),
                              cl::init(16));
static cl::opt<int64_t>
    queryTile("query-tile",
              cl::desc("query rows per tile (default: what the backend uses "
                       "for --q-len: 1 below 4 rows, else 16)"),
              cl::init(attnkit::compiled::kPrefillQueryTile));
static cl::opt<int64_t>
    kvTile("kv-tile",
           cl::desc("keys per tile (default: what the backend uses, "
                    "kvTileFor: 64, longer for a transposed-V decode)"),
           cl::init(attnkit::compiled::kKvTile));
// An attention block (buildAttentionBlock) instead of an attention: its
// hidden size, weight dtype, q/k/v biases and output projection.
static cl::opt<int64_t> hiddenOpt("hidden",
                                  cl::desc("build the attention block with "
                                           "this hidden size (0: the "
                                           "attention alone)"),
                                  cl::init(0));
static cl::opt<std::string>
    weightOpt("weight", cl::desc("the block's weight dtype"), cl::init("f32"));
static cl::opt<bool> qkvBiasOpt("qkv-bias",
                                cl::desc("the block's q/k/v biases"),
                                cl::init(false));
static cl::opt<bool> woOpt("wo", cl::desc("the block's output projection"),
                           cl::init(false));
// The vdpbf16ps variant of a bf16 kernel (KernelSpec::bf16Dot): emitted for
// any host (the AOT build makes both), run only on one with AVX512_BF16.
static cl::opt<bool>
    bf16DotOpt("bf16-dot",
               cl::desc("QK^T on AVX512_BF16's vdpbf16ps (bf16 Q and K/V)"),
               cl::init(false));
// exp2 on vscalefps (attnkit-approximate-math{avx512}). Unset: whether this
// host has AVX-512F and DQ, as the JIT decides and as the AOT objects (compiled
// with -march=native) need; the IR tests set it, so their output does not
// depend on the machine.
static cl::opt<cl::boolOrDefault> avx512Exp2Opt(
    "avx512-exp2",
    cl::desc("exp2 of 16-lane vectors on AVX-512's vscalefps (default: "
             "whether this host has AVX-512F and DQ)"));
// A decode kernel that reads its K/V rows ahead (KernelSpec::readAhead; the
// backend's decode of K/V larger than the last-level cache).
static cl::opt<bool>
    readAheadOpt("read-ahead",
                 cl::desc("a decode kernel reads its K/V rows ahead (each KV "
                          "tile's; a headed one each 16 keys') instead of "
                          "prefetching them"),
                 cl::init(false));
// A band of KV heads per call (KernelSpec::headed; the backend's BSHD decode).
static cl::opt<bool>
    headedOpt("headed",
              cl::desc("the kernel takes a band of KV heads (leading dim)"),
              cl::init(false));
static cl::opt<std::string> outputFile("o", cl::desc("output file"),
                                       cl::init("-"));
static cl::opt<bool> printKey("print-key",
                              cl::desc("print the specialization key only"),
                              cl::init(false));
static cl::opt<bool> printAfterAll("print-ir-after-all",
                                   cl::desc("print the IR after every pass"),
                                   cl::init(false));

// Tiles the tool builds: the backend uses query tiles of 1 and 16 and KV
// tiles of 64; larger ones only grow the IR (a tile of 10^9 rows exhausts
// LLVM's memory), so both are capped.
static constexpr int64_t kMaxQueryTile = 256;
static constexpr int64_t kMaxKvTile = 4096;

// What the tool is doing, for its last resort when an allocation fails.
static const char *activity = "parsing the flags";

static int run(int argc, char **argv) {
  auto fail = [](const llvm::Twine &msg) {
    llvm::errs() << "attnkit-compile: " << msg << "\n";
    return kExitUsage;
  };
  // A flag LLVM's parser rejects is bad usage too (exit 2, not 1).
  std::string parseErrors;
  llvm::raw_string_ostream parseErrorStream(parseErrors);
  if (!cl::ParseCommandLineOptions(argc, argv, "attnkit stage dumper\n",
                                   &parseErrorStream)) {
    parseErrorStream.flush();
    llvm::errs() << parseErrors;
    return kExitUsage;
  }
  const bool emitLlvmIr = emitOpt == kLlvmIr;
  std::optional<Stage> stage =
      emitLlvmIr ? Stage::kLLVM : kStageNames.Parse(emitOpt);
  if (!stage)
    return fail("--emit=" + emitOpt + ": not " + emitNames);
  int64_t kvh = kvHeads == 0 ? heads : kvHeads;
  if (queryTile < 1 || queryTile > kMaxQueryTile)
    return fail("--query-tile=" + std::to_string(queryTile.getValue()) +
                ": not in [1, " + std::to_string(kMaxQueryTile) + "]");
  if (kvTile < 1 || kvTile > kMaxKvTile)
    return fail("--kv-tile=" + std::to_string(kvTile.getValue()) +
                ": not in [1, " + std::to_string(kMaxKvTile) + "]");
  KernelSpec spec;
  // --mask window:W: W is a run-time argument, the kernel is the same.
  const std::string maskArg = maskOpt;
  const std::string maskName = maskArg.substr(0, maskArg.find(':'));
  std::optional<MaskKind> mask = ParseMaskKind(maskName);
  if (!mask || (maskName != maskArg && *mask != MaskKind::kWindow))
    return fail("--mask=" + maskArg + ": not " + maskNames);
  // window:W names its width (an integer >= 1); a bare window, the kernel.
  int64_t window = *mask == MaskKind::kWindow ? 1 : 0;
  if (maskName != maskArg) {
    std::optional<int64_t> w =
        ParseInt64(std::string_view(maskArg).substr(maskName.size() + 1));
    if (!w || *w < 1)
      return fail("--mask=" + maskArg +
                  ": the window W of window:W is not "
                  "an integer >= 1");
    window = *w;
  }
  spec.mask = *mask;
  std::optional<DType> dtype = kFloatDTypeNames.Parse(dtypeOpt);
  if (!dtype)
    return fail("--dtype=" + dtypeOpt + ": not " + dtypeNames);
  spec.elem = *dtype;
  // As the runtime's --kv-dtype: i8, or the same as --dtype (no
  // quantization).
  std::optional<DType> kvDtype;
  if (!kvDtypeOpt.empty()) {
    kvDtype = ParseDType(kvDtypeOpt);
    if (!kvDtype || (*kvDtype != DType::kI8 && *kvDtype != *dtype))
      return fail("--kv-dtype=" + kvDtypeOpt + ": not i8 or the --dtype (" +
                  dtypeOpt + ")");
    if (*kvDtype == *dtype)
      kvDtype.reset();
  }
  spec.kvElem = kvDtype;
  std::optional<KvLayout> layout = ParseKvLayout(layoutOpt);
  if (!layout)
    return fail("--layout=" + layoutOpt + ": not " + layoutNames);
  spec.vTransposed = *layout == KvLayout::kTransposedV;
  // The runtime's limits (head_dim <= kMaxHeadDim, kv heads dividing the
  // heads, lengths >= 0 and their sizes within int64, ...): the problem
  // these flags describe must be one the runtime accepts.
  AttentionProblem problem;
  problem.batch = batch;
  problem.q_heads = heads;
  problem.kv_heads = kvh;
  problem.head_dim = headDim;
  problem.mask = *mask;
  problem.window = window;
  problem.dtype = *dtype;
  problem.kv_dtype = kvDtype;
  problem.layout = *layout;
  if (batch < 1 || batch > (int64_t{1} << 20))
    return fail("--batch=" + std::to_string(batch.getValue()) +
                ": not in [1, 2^20]");
  problem.q_lens.assign(static_cast<size_t>(batch), qLen);
  problem.kv_lens.assign(static_cast<size_t>(batch),
                         kvLen.getNumOccurrences() ? kvLen : qLen);
  if (Status s = problem.Validate(); !s.ok())
    return fail("the problem of these flags: " + s.message());
  spec.headDim = headDim;
  // The query heads per call as the backend picks them (callGroupFor): the
  // whole group for a decode kernel, prefillGroupFor's slice of it else.
  const int64_t group = heads / kvh;
  if (queryTile.getNumOccurrences()) {
    spec.queryTile = queryTile;
    spec.group = queryTile == 1 ? group : prefillGroupFor(group);
  } else {
    spec.group = callGroupFor(qLen, group);
    spec.queryTile = queryTileFor(qLen, spec.group);
  }
  spec.bf16Dot = bf16DotOpt;
  spec.headed = headedOpt;
  spec.readAhead = readAheadOpt;
  spec.kvTile = kvTile.getNumOccurrences()
                    ? kvTile
                    : kvTileFor(spec.queryTile, *layout, spec.kvDType());
  if (spec.bf16Dot && !spec.bf16DotApplies())
    return fail("--bf16-dot: needs --dtype bf16 with bf16 K/V (got --dtype=" +
                dtypeOpt + (kvDtypeOpt.empty() ? "" : " --kv-dtype=") +
                kvDtypeOpt + ")");
  // The vectorizer reads ahead only in a decode kernel over rows of K and V
  // (f32 or bf16); anywhere else the key would name a kernel that does not.
  // (A block says so below.)
  if (spec.readAhead && hiddenOpt == 0 &&
      (spec.queryTile != 1 || spec.vTransposed || spec.quantizedKv()))
    return fail("--read-ahead: only a decode kernel (query tile 1) over f32 "
                "or bf16 K/V in rows (not --layout tv, not --kv-dtype i8); "
                "got query tile " +
                std::to_string(spec.queryTile) +
                (spec.vTransposed ? ", --layout tv" : "") +
                (spec.quantizedKv() ? ", --kv-dtype i8" : ""));

  std::optional<BlockSpec> block;
  if (hiddenOpt != 0) {
    if (headedOpt)
      return fail("--headed: the attention kernel's; the block (--hidden=" +
                  std::to_string(hiddenOpt) + ") splits its heads itself");
    if (readAheadOpt)
      return fail("--read-ahead: the attention kernel's; the block (--hidden=" +
                  std::to_string(hiddenOpt) + ") prefetches its K/V");
    AttentionBlockProblem bp;
    bp.attention = problem;
    bp.hidden = hiddenOpt;
    std::optional<DType> weight = kFloatDTypeNames.Parse(weightOpt);
    if (!weight)
      return fail("--weight=" + weightOpt + ": not " + dtypeNames);
    bp.weight_dtype = *weight;
    bp.qkv_bias = qkvBiasOpt;
    bp.output_projection = woOpt;
    if (Status s = bp.Validate(); !s.ok())
      return fail("the block of these flags: " + s.message());
    if (StatusOr<BlockSpec> bs = blockSpecFor(bp); bs.ok())
      block = bs.value();
    else
      return fail(bs.status().message());
  }
  if (block)
    block->queryTile = spec.queryTile;
  if (printKey) {
    llvm::outs() << (block ? block->key() : spec.key()) << "\n";
    return 0;
  }

  activity = "building and lowering the kernel";
  mlir::DialectRegistry registry;
  registerCompiledDialects(registry);
  mlir::registerAllToLLVMIRTranslations(registry);
  mlir::MLIRContext ctx(registry);
  auto module =
      block ? buildAttentionBlock(ctx, *block) : buildAttention(ctx, spec);
  PipelineOptions options;
  options.flash.queryTile = spec.queryTile;
  options.flash.kvTile = block ? kvTile : spec.kvTile;
  options.vectorize.bf16Dot = spec.bf16Dot;
  options.vectorize.readAhead = spec.readAhead;
  options.math.avx512 = avx512Exp2Opt == cl::BOU_UNSET
                            ? hostHasAvx512Dq()
                            : avx512Exp2Opt == cl::BOU_TRUE;
  options.printIrAfterAll = printAfterAll;
  if (emitLlvmIr) {
    // A listed kernel is named by its AOT symbol: the one aot.h gives the
    // spec, which the kernel cache's registry links against
    // (aot_registry.cc). Any other keeps the builder's name.
    std::optional<std::string_view> symbol;
    if (!block)
      symbol = aotSymbolFor(spec);
    if (symbol)
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

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  // The last resort, LLVM's allocations and ours: every size is checked
  // before the IR is built, so this is one the limits missed.
  llvm::install_bad_alloc_error_handler([](void *, const char *reason, bool) {
    llvm::errs() << "attnkit-compile: out of memory (" << reason << ") while "
                 << activity << "\n";
    std::_Exit(kExitFinding);
  });
  try {
    return run(argc, argv);
  } catch (const std::bad_alloc &) {
    llvm::errs() << "attnkit-compile: out of memory (std::bad_alloc) while "
                 << activity << "\n";
    return kExitFinding;
  }
}
