#include "compiled/jit.h"

#include "compiled/aot.h"
#include "compiled/ir_builder.h"
#include "compiled/pipeline.h"
#include "runtime/cpu_features.h"

#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"

#include "compiled/passes_fingerprint.h"

#include "llvm/Config/llvm-config.h"
#include "llvm/ExecutionEngine/Orc/ExecutionUtils.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/ExecutionEngine/Orc/Mangling.h"
#include "llvm/ExecutionEngine/Orc/RTDyldObjectLinkingLayer.h"
#include "llvm/ExecutionEngine/SectionMemoryManager.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"

#include <chrono>
#include <cstdio>
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

/// The host's CPU and features (AVX-512 here); the default TM would not
/// enable them. Detected once per process (host CPU name + feature string
/// parsing).
const std::optional<llvm::orc::JITTargetMachineBuilder> &hostMachine() {
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
  return host;
}

/// False (and why in `error`) for a spec whose code this CPU cannot run:
/// vdpbf16ps without AVX512_BF16 (LLVM could not even select it for this
/// host). Such a kernel is neither built nor, from the AOT objects, executed.
bool runsOnThisCpu(const KernelSpec &spec, std::string &error) {
  if (spec.bf16Dot && !CpuHasAvx512Bf16()) {
    error = spec.key() +
            ": asks for vdpbf16ps (bf16Dot), and this CPU has no AVX512_BF16";
    return false;
  }
  return true;
}

/// One line on stderr: the cache is an optimization, its trouble never
/// fails a run, but it is not silent either.
void warn(const std::string &what) {
  std::fprintf(stderr, "attnkit: kernel cache: %s\n", what.c_str());
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

namespace {

/// The symbols JIT'd kernels call that the process does not export.
llvm::orc::SymbolMap runtimeSymbols(llvm::orc::MangleAndInterner interner) {
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
}

} // namespace

struct CompiledKernel::Impl {
  std::unique_ptr<llvm::TargetMachine> optTm; // used by the -O3 transformer
  std::unique_ptr<mlir::ExecutionEngine> engine;
  std::unique_ptr<llvm::orc::LLJIT> loaded; // code from the on-disk cache
};

CompiledKernel::~CompiledKernel() = default;

/// JIT-compiles a module already lowered to the LLVM dialect and returns the
/// engine owning the code; `entry` is `_mlir_ciface_<symbol>`.
std::unique_ptr<CompiledKernel::Impl>
CompiledKernel::jitLowered(mlir::ModuleOp module, const std::string &symbol,
                           unsigned optLevel, void *&entry, std::string &error,
                           double &codegenMillis, const DiskCache *dump,
                           std::string *object) {
  const std::optional<llvm::orc::JITTargetMachineBuilder> &host = hostMachine();
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
  // Keeps the object code, which dumpToObjectFile writes out for the cache.
  eo.enableObjectDump = dump != nullptr && object != nullptr;
  // ATTNKIT_JIT_PERF=1 emits jitdump records (`perf record -k 1` + `perf
  // inject --jit`) so profiles name the JIT'd code.
  eo.enablePerfNotificationListener =
      std::getenv("ATTNKIT_JIT_PERF") != nullptr;
  auto engine = mlir::ExecutionEngine::create(module, eo, std::move(*tm));
  if (!engine) {
    error = "JIT: " + llvm::toString(engine.takeError());
    return nullptr;
  }
  (*engine)->registerSymbols(runtimeSymbols);
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
  if (eo.enableObjectDump) {
    std::string why;
    if (!dump->capture(
            [&](const std::string &path) { (*engine)->dumpToObjectFile(path); },
            *object, &why)) {
      warn(why);
      object->clear();
    }
  }
  impl->engine = std::move(*engine);
  return impl;
}

std::unique_ptr<CompiledKernel> CompiledKernel::load(const std::string &object,
                                                     const char *symbol,
                                                     std::string &error) {
  initNativeTargetOnce();
  const std::optional<llvm::orc::JITTargetMachineBuilder> &host = hostMachine();
  if (!host) {
    error = "cannot detect the host CPU";
    return nullptr;
  }
  // RuntimeDyld with section memory, as mlir::ExecutionEngine links.
  auto jit =
      llvm::orc::LLJITBuilder()
          .setJITTargetMachineBuilder(*host)
          .setObjectLinkingLayerCreator([](llvm::orc::ExecutionSession &es) {
            return std::make_unique<llvm::orc::RTDyldObjectLinkingLayer>(
                es, [](const llvm::MemoryBuffer &) {
                  return std::make_unique<llvm::SectionMemoryManager>();
                });
          })
          .create();
  if (!jit) {
    error = "JIT: " + llvm::toString(jit.takeError());
    return nullptr;
  }
  llvm::orc::JITDylib &main = (*jit)->getMainJITDylib();
  auto process = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
      (*jit)->getDataLayout().getGlobalPrefix());
  if (!process) {
    error = "JIT: " + llvm::toString(process.takeError());
    return nullptr;
  }
  main.addGenerator(std::move(*process));
  llvm::orc::MangleAndInterner interner((*jit)->getExecutionSession(),
                                        (*jit)->getDataLayout());
  if (llvm::Error e =
          main.define(llvm::orc::absoluteSymbols(runtimeSymbols(interner)))) {
    error = "JIT: " + llvm::toString(std::move(e));
    return nullptr;
  }
  if (llvm::Error e = (*jit)->addObjectFile(
          llvm::MemoryBuffer::getMemBufferCopy(object, "attnkit-kernel"))) {
    error = "JIT: " + llvm::toString(std::move(e));
    return nullptr;
  }
  if (llvm::Error e = (*jit)->initialize(main)) {
    error = "JIT: " + llvm::toString(std::move(e));
    return nullptr;
  }
  auto sym = (*jit)->lookup(std::string("_mlir_ciface_") + symbol);
  if (!sym) {
    error = "lookup: " + llvm::toString(sym.takeError());
    return nullptr;
  }
  std::unique_ptr<CompiledKernel> kernel(new CompiledKernel());
  kernel->impl_ = std::make_unique<Impl>();
  kernel->entry_ = sym->toPtr<void *>();
  kernel->impl_->loaded = std::move(*jit);
  kernel->fromDisk_ = true;
  return kernel;
}

std::unique_ptr<CompiledKernel>
CompiledKernel::compile(const KernelSpec &spec, const CompileOptions &options,
                        std::string &error, const DiskCache *dump,
                        std::string *object) {
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
  mlir::OwningOpRef<mlir::ModuleOp> module = buildAttention(ctx, spec);
  if (!runsOnThisCpu(spec, error))
    return nullptr;
  PipelineOptions pipeline;
  pipeline.flash.queryTile = spec.queryTile;
  pipeline.flash.kvTile = spec.kvTile;
  pipeline.vectorize.bf16Dot = spec.bf16Dot;
  pipeline.vectorize.readAhead = spec.readAhead;
  // Code for this host (hostMachine()): its exp2 on vscalefps if it can.
  pipeline.math.avx512 = hostHasAvx512Dq();
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
                 phases.codegenMillis, dump, object);
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

/// What one kernel is made of besides the attention: how its module is
/// built, and how it is lowered to the LLVM dialect.
struct CompiledKernel::Recipe {
  std::string key;
  const char *symbol;
  std::function<mlir::OwningOpRef<mlir::ModuleOp>(mlir::MLIRContext &)> build;
  std::function<mlir::LogicalResult(mlir::ModuleOp)> lower;
};

std::unique_ptr<CompiledKernel>
CompiledKernel::compileRecipe(const Recipe &recipe,
                              const CompileOptions &options, std::string &error,
                              const DiskCache *dump, std::string *object) {
  auto start = std::chrono::steady_clock::now();
  const double cpuStart = threadCpuMillis();
  initNativeTargetOnce();
  mlir::DialectRegistry registry;
  registerCompiledDialects(registry);
  mlir::registerAllToLLVMIRTranslations(registry);
  mlir::MLIRContext ctx(registry, mlir::MLIRContext::Threading::DISABLED);
  mlir::OwningOpRef<mlir::ModuleOp> module = recipe.build(ctx);
  std::string diag;
  {
    llvm::raw_string_ostream os(diag);
    mlir::ScopedDiagnosticHandler handler(&ctx, [&](mlir::Diagnostic &d) {
      os << d << "\n";
      return mlir::success();
    });
    if (mlir::failed(recipe.lower(*module))) {
      error = "lowering " + recipe.key + " failed: " + diag;
      return nullptr;
    }
  }
  std::unique_ptr<CompiledKernel> kernel(new CompiledKernel());
  kernel->impl_ =
      jitLowered(*module, recipe.symbol, options.llvmOptLevel, kernel->entry_,
                 error, kernel->phases_.codegenMillis, dump, object);
  if (!kernel->impl_) {
    error = recipe.key + ": " + error;
    return nullptr;
  }
  kernel->phases_.cpuMillis = threadCpuMillis() - cpuStart;
  kernel->compileMillis_ = std::chrono::duration<double, std::milli>(
                               std::chrono::steady_clock::now() - start)
                               .count();
  return kernel;
}

std::unique_ptr<CompiledKernel>
CompiledKernel::compileAppend(const AppendSpec &spec,
                              const CompileOptions &options, std::string &error,
                              const DiskCache *dump, std::string *object) {
  return compileRecipe(
      {spec.key(), kAppendName,
       [&](mlir::MLIRContext &ctx) { return buildKvAppend(ctx, spec); },
       lowerAppendToLLVM},
      options, error, dump, object);
}

std::unique_ptr<CompiledKernel>
CompiledKernel::compileBlock(const BlockSpec &spec,
                             const CompileOptions &options, std::string &error,
                             const DiskCache *dump, std::string *object) {
  PipelineOptions pipeline;
  pipeline.flash.queryTile = spec.queryTile;
  pipeline.flash.kvTile = kKvTile;
  pipeline.math.avx512 = hostHasAvx512Dq();
  return compileRecipe(
      {spec.key(), kBlockName,
       [&](mlir::MLIRContext &ctx) { return buildAttentionBlock(ctx, spec); },
       [&](mlir::ModuleOp module) {
         return lowerToStage(module, Stage::kLLVM, pipeline);
       }},
      options, error, dump, object);
}

std::string KernelCache::diskKey(const std::string &specKey) const {
  const std::optional<llvm::orc::JITTargetMachineBuilder> &host = hostMachine();
  std::string k = "spec " + specKey;
  k += "\nllvm_opt " + std::to_string(options_.llvmOptLevel);
  k += "\nllvm " LLVM_VERSION_STRING;
  k += "\ncpu " + (host ? host->getCPU() : std::string("?"));
  k += "\nfeatures " + (host ? host->getFeatures().getString() : "?");
  k += "\nsources " ATTNKIT_COMPILED_FINGERPRINT "\n";
  return k;
}

std::unique_ptr<CompiledKernel>
KernelCache::obtain(const std::string &specKey, const char *symbol,
                    const std::function<std::unique_ptr<CompiledKernel>(
                        const DiskCache *, std::string *)> &compile) {
  if (options_.diskCacheDir.empty()) {
    compilations_.fetch_add(1);
    return compile(nullptr, nullptr);
  }
  initNativeTargetOnce();
  const DiskCache disk(options_.diskCacheDir);
  const std::string key = diskKey(specKey);
  std::string why;
  if (std::optional<std::string> object = disk.load(key, &why)) {
    std::string linkError;
    if (auto kernel = CompiledKernel::load(*object, symbol, linkError)) {
      kernel->compileMillis_ = 0;
      diskLoads_.fetch_add(1);
      return kernel;
    }
    disk.remove(key);
    warn(disk.pathOf(key) + " did not link (" + linkError +
         "); removed, the kernel is rebuilt");
  } else if (!why.empty()) {
    warn(why);
  }
  compilations_.fetch_add(1);
  std::string object;
  std::unique_ptr<CompiledKernel> kernel = compile(&disk, &object);
  if (kernel && !object.empty()) {
    if (disk.store(key, object, &why)) {
      diskStores_.fetch_add(1);
    } else {
      warn(why + " (the kernel is used, not kept)");
    }
  }
  return kernel;
}

KernelCache::Entry *KernelCache::entry(const std::string &key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto &slot = entries_[key];
  if (!slot)
    slot = std::make_unique<Entry>();
  return slot.get(); // stable: entries are never erased
}

const CompiledKernel *KernelCache::getJitOnly(
    const std::string &key, const char *symbol,
    const std::function<std::unique_ptr<CompiledKernel>(
        std::string &, const DiskCache *, std::string *)> &compile,
    std::string &error) {
  Entry *e = entry(key);
  std::call_once(e->once, [&] {
    e->kernel =
        obtain(key, symbol, [&](const DiskCache *dump, std::string *object) {
          return compile(e->error, dump, object);
        });
  });
  if (!e->kernel)
    error = e->error;
  return e->kernel.get();
}

const CompiledKernel *KernelCache::getAppend(const AppendSpec &spec,
                                             std::string &error) {
  return getJitOnly(
      spec.key(), kAppendName,
      [&](std::string &why, const DiskCache *dump, std::string *object) {
        return CompiledKernel::compileAppend(spec, options_, why, dump, object);
      },
      error);
}

const CompiledKernel *KernelCache::getBlock(const BlockSpec &spec,
                                            std::string &error) {
  return getJitOnly(
      spec.key(), kBlockName,
      [&](std::string &why, const DiskCache *dump, std::string *object) {
        return CompiledKernel::compileBlock(spec, options_, why, dump, object);
      },
      error);
}

const CompiledKernel *KernelCache::get(const KernelSpec &spec,
                                       std::string &error) {
  Entry *entry = this->entry(spec.key());
  std::call_once(entry->once, [&] {
    if (!runsOnThisCpu(spec, entry->error))
      return;
    if (options_.useAot) {
      for (const AotKernel &k : aotKernels())
        if (k.spec == spec) {
          entry->kernel.reset(new CompiledKernel());
          entry->kernel->entry_ = k.entry;
          entry->kernel->spec_ = spec;
          return;
        }
    }
    entry->kernel = obtain(spec.key(), kKernelName,
                           [&](const DiskCache *dump, std::string *object) {
                             return CompiledKernel::compile(
                                 spec, options_, entry->error, dump, object);
                           });
    if (entry->kernel)
      entry->kernel->spec_ = spec;
  });
  if (!entry->kernel)
    error = entry->error;
  return entry->kernel.get();
}

} // namespace attnkit::compiled
