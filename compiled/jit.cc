#include "compiled/jit.h"

#include "compiled/aot.h"
#include "compiled/ir_builder.h"
#include "compiled/pipeline.h"

#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"

#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/ExecutionEngine/Orc/Mangling.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <optional>

namespace attnkit::compiled {

namespace {

/// CPU time of the calling thread: on this shared machine wall time of a
/// compile mostly measures the other processes.
double threadCpuMillis() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

void initNativeTargetOnce() {
  static const bool done = [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    return true;
  }();
  (void)done;
}

} // namespace

// Targets of `finalize-memref-to-llvm{use-generic-functions=1}`: the AOT
// objects link them, the JIT maps them (registerSymbols below). They forward to
// malloc/free and count nothing themselves: in a binary that measures, the
// allocation hooks (runtime/accounting.h) count compiled code's allocations
// with everyone else's, once.
extern "C" {
void *_mlir_memref_to_llvm_alloc(size_t size) { return std::malloc(size); }
void *_mlir_memref_to_llvm_aligned_alloc(size_t alignment, size_t size) {
  return std::aligned_alloc(alignment,
                            (size + alignment - 1) / alignment * alignment);
}
void _mlir_memref_to_llvm_free(void *p) { std::free(p); }
}

struct CompiledKernel::Impl {
  std::unique_ptr<llvm::TargetMachine> optTm; // used by the -O3 transformer
  std::unique_ptr<mlir::ExecutionEngine> engine;
};

CompiledKernel::~CompiledKernel() = default;

/// JIT-compiles a module already lowered to the LLVM dialect and returns the
/// engine owning the code; `entry` is `_mlir_ciface_<symbol>`.
std::unique_ptr<CompiledKernel::Impl>
CompiledKernel::jitLowered(mlir::ModuleOp module, const std::string &symbol,
                           unsigned optLevel, void *&entry, std::string &error,
                           double &codegenMillis) {
  // The host's CPU and features (AVX-512 here); the default TM would not
  // enable them.
  // Detected once per process (host CPU name + feature string parsing).
  static const std::optional<llvm::orc::JITTargetMachineBuilder> host =
      []() -> std::optional<llvm::orc::JITTargetMachineBuilder> {
    auto b = llvm::orc::JITTargetMachineBuilder::detectHost();
    if (!b) {
      llvm::consumeError(b.takeError());
      return std::nullopt;
    }
    b->setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
    return std::move(*b);
  }();
  if (!host) {
    error = "cannot detect the host CPU";
    return nullptr;
  }
  llvm::orc::JITTargetMachineBuilder jtmbCopy = *host;
  auto *jtmb = &jtmbCopy;
  // Two target machines: ExecutionEngine::create consumes (and destroys, when
  // it returns) the one it is given, but the optimizing transformer runs
  // later, when lookup() materializes the module, so its TM must outlive
  // create(); it is kept in Impl. (Sharing one TM was a use-after-free:
  // intermittent hangs in codegen and crashes.)
  auto tm = jtmb->createTargetMachine();
  auto optTm = jtmb->createTargetMachine();
  if (!tm || !optTm) {
    error = !tm ? llvm::toString(tm.takeError())
                : llvm::toString(optTm.takeError());
    return nullptr;
  }
  auto impl = std::make_unique<CompiledKernel::Impl>();
  impl->optTm = std::move(*optTm);
  auto transformer =
      mlir::makeOptimizingTransformer(optLevel, 0, impl->optTm.get());
  mlir::ExecutionEngineOptions eo;
  eo.transformer = transformer;
  eo.jitCodeGenOptLevel = llvm::CodeGenOptLevel::Aggressive;
  eo.enableGDBNotificationListener = false;
  // ATTNKIT_JIT_PERF=1 emits jitdump records (`perf record -k 1` + `perf
  // inject --jit`) so profiles name the JIT'd code.
  eo.enablePerfNotificationListener =
      std::getenv("ATTNKIT_JIT_PERF") != nullptr;
  auto engine = mlir::ExecutionEngine::create(module, eo, std::move(*tm));
  if (!engine) {
    error = "JIT: " + llvm::toString(engine.takeError());
    return nullptr;
  }
  (*engine)->registerSymbols([](llvm::orc::MangleAndInterner interner) {
    llvm::orc::SymbolMap map;
    auto add = [&](const char *name, auto *fn) {
      map[interner(name)] = {llvm::orc::ExecutorAddr::fromPtr(fn),
                             llvm::JITSymbolFlags::Exported};
    };
    add("_mlir_memref_to_llvm_alloc", &_mlir_memref_to_llvm_alloc);
    add("_mlir_memref_to_llvm_aligned_alloc",
        &_mlir_memref_to_llvm_aligned_alloc);
    add("_mlir_memref_to_llvm_free", &_mlir_memref_to_llvm_free);
    return map;
  });
  auto start = std::chrono::steady_clock::now();
  (*engine)->initialize();
  auto sym = (*engine)->lookup(std::string("_mlir_ciface_") + symbol);
  if (!sym) {
    error = "lookup: " + llvm::toString(sym.takeError());
    return nullptr;
  }
  codegenMillis = std::chrono::duration<double, std::milli>(
                      std::chrono::steady_clock::now() - start)
                      .count();
  entry = *sym;
  impl->engine = std::move(*engine);
  return impl;
}

std::unique_ptr<CompiledKernel>
CompiledKernel::compile(const KernelSpec &spec, const CompileOptions &options,
                        std::string &error) {
  auto start = std::chrono::steady_clock::now();
  auto since = [&] {
    return std::chrono::duration<double, std::milli>(
               std::chrono::steady_clock::now() - start)
        .count();
  };
  CompilePhases phases;
  const double cpuStart = threadCpuMillis();
  initNativeTargetOnce();
  mlir::DialectRegistry registry;
  registerCompiledDialects(registry);
  mlir::registerAllToLLVMIRTranslations(registry);
  mlir::MLIRContext ctx(registry, mlir::MLIRContext::Threading::DISABLED);
  mlir::OwningOpRef<mlir::ModuleOp> module = buildNaiveAttention(ctx, spec);
  PipelineOptions pipeline;
  pipeline.flash.queryTile = spec.queryTile;
  pipeline.flash.kvTile = options.kvTile;
  phases.buildMillis = since();
  std::string diag;
  {
    llvm::raw_string_ostream os(diag);
    mlir::ScopedDiagnosticHandler handler(&ctx, [&](mlir::Diagnostic &d) {
      os << d << "\n";
      return mlir::success();
    });
    if (mlir::failed(lowerToStage(*module, Stage::kLLVM, pipeline))) {
      error = "lowering " + spec.key() + " failed: " + diag;
      return nullptr;
    }
  }

  phases.mlirMillis = since() - phases.buildMillis;
  void *entry = nullptr;
  std::unique_ptr<Impl> impl =
      jitLowered(*module, kKernelName, options.llvmOptLevel, entry, error,
                 phases.codegenMillis);
  if (!impl) {
    error = spec.key() + ": " + error;
    return nullptr;
  }
  phases.llvmMillis = since() - phases.buildMillis - phases.mlirMillis;
  phases.cpuMillis = threadCpuMillis() - cpuStart;
  std::unique_ptr<CompiledKernel> kernel(new CompiledKernel());
  kernel->phases_ = phases;
  kernel->impl_ = std::move(impl);
  kernel->entry_ = entry;
  kernel->spec_ = spec;
  kernel->compileMillis_ = std::chrono::duration<double, std::milli>(
                               std::chrono::steady_clock::now() - start)
                               .count();
  return kernel;
}

std::unique_ptr<CompiledKernel> CompiledKernel::compileAppend(
    const AppendSpec &spec, const CompileOptions &options, std::string &error) {
  auto start = std::chrono::steady_clock::now();
  const double cpuStart = threadCpuMillis();
  initNativeTargetOnce();
  mlir::DialectRegistry registry;
  registerCompiledDialects(registry);
  mlir::registerAllToLLVMIRTranslations(registry);
  mlir::MLIRContext ctx(registry, mlir::MLIRContext::Threading::DISABLED);
  mlir::OwningOpRef<mlir::ModuleOp> module = buildKvAppend(ctx, spec);
  std::string diag;
  {
    llvm::raw_string_ostream os(diag);
    mlir::ScopedDiagnosticHandler handler(&ctx, [&](mlir::Diagnostic &d) {
      os << d << "\n";
      return mlir::success();
    });
    if (mlir::failed(lowerAppendToLLVM(*module))) {
      error = "lowering " + spec.key() + " failed: " + diag;
      return nullptr;
    }
  }
  std::unique_ptr<CompiledKernel> kernel(new CompiledKernel());
  kernel->impl_ =
      jitLowered(*module, kAppendName, options.llvmOptLevel, kernel->entry_,
                 error, kernel->phases_.codegenMillis);
  if (!kernel->impl_) {
    error = spec.key() + ": " + error;
    return nullptr;
  }
  kernel->phases_.cpuMillis = threadCpuMillis() - cpuStart;
  kernel->compileMillis_ = std::chrono::duration<double, std::milli>(
                               std::chrono::steady_clock::now() - start)
                               .count();
  return kernel;
}

KernelCache::Entry *KernelCache::entry(const std::string &key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto &slot = entries_[key];
  if (!slot)
    slot = std::make_unique<Entry>();
  return slot.get(); // stable: entries are never erased
}

const CompiledKernel *KernelCache::getAppend(const AppendSpec &spec,
                                             std::string &error) {
  Entry *e = entry(spec.key());
  std::call_once(e->once, [&] {
    compilations_.fetch_add(1);
    e->kernel = CompiledKernel::compileAppend(spec, options_, e->error);
  });
  if (!e->kernel)
    error = e->error;
  return e->kernel.get();
}

const CompiledKernel *KernelCache::get(const KernelSpec &spec,
                                       std::string &error) {
  Entry *entry = this->entry(spec.key());
  std::call_once(entry->once, [&] {
    if (options_.useAot) {
      for (const AotKernel &k : aotKernels())
        if (k.spec == spec) {
          entry->kernel.reset(new CompiledKernel());
          entry->kernel->entry_ = k.entry;
          entry->kernel->spec_ = spec;
          return;
        }
    }
    compilations_.fetch_add(1);
    entry->kernel = CompiledKernel::compile(spec, options_, entry->error);
  });
  if (!entry->kernel)
    error = entry->error;
  return entry->kernel.get();
}

} // namespace attnkit::compiled
