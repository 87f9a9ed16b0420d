// JIT compilation of attention kernels and the thread-safe kernel cache.
// No MLIR headers here: the backend includes this.
#ifndef ATTNKIT_COMPILED_JIT_H_
#define ATTNKIT_COMPILED_JIT_H_

#include "compiled/disk_cache.h"
#include "compiled/kernel_spec.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace mlir {
class ModuleOp;
} // namespace mlir

namespace attnkit::compiled {

/// The MLIR memref descriptor of rank N (`StridedMemRefType` of
/// CRunnerUtils.h): {allocated, aligned, offset, sizes[N], strides[N]}.
template <int N> struct MemRefDesc {
  const void *allocated;
  const void *aligned;
  int64_t offset;
  int64_t sizes[N];
  int64_t strides[N];
};

/// `_mlir_ciface_attention`, see buildAttention for the arguments (every
/// kernel has the scale vectors; only an i8 K/V kernel reads them).
using AttentionFn = void (*)(MemRefDesc<3> *q, MemRefDesc<2> *k,
                             MemRefDesc<2> *v, MemRefDesc<3> *bias,
                             MemRefDesc<1> *kScale, MemRefDesc<1> *vScale,
                             MemRefDesc<3> *out, MemRefDesc<2> *lse,
                             float scale, int64_t p0, int64_t window);

/// `_mlir_ciface_attention` of a headed spec (KernelSpec::headed): the same
/// arguments with a leading dimension of H adjacent KV heads (q, bias, out
/// [H, G, ...], k, v [H, ...], the scales and lse one rank up too).
using HeadedAttentionFn = void (*)(MemRefDesc<4> *q, MemRefDesc<3> *k,
                                   MemRefDesc<3> *v, MemRefDesc<4> *bias,
                                   MemRefDesc<2> *kScale, MemRefDesc<2> *vScale,
                                   MemRefDesc<4> *out, MemRefDesc<3> *lse,
                                   float scale, int64_t p0, int64_t window);

/// `_mlir_ciface_kv_append`, see buildKvAppend: copies new tokens [0, n) of
/// (b, h) to positions [pos, pos + n) of the cache.
using AppendFn = void (*)(MemRefDesc<4> *cache, MemRefDesc<4> *tokens,
                          int64_t b, int64_t h, int64_t pos, int64_t n);

/// `_mlir_ciface_attention_block`, see buildAttentionBlock: one sequence's
/// tokens x, the weights (and biases) of a band of KV heads, those heads'
/// caches and the out rows.
using BlockFn = void (*)(MemRefDesc<2> *x, MemRefDesc<2> *wq, MemRefDesc<2> *wk,
                         MemRefDesc<2> *wv, MemRefDesc<1> *bq,
                         MemRefDesc<1> *bk, MemRefDesc<1> *bv,
                         MemRefDesc<2> *wo, MemRefDesc<3> *kCache,
                         MemRefDesc<3> *vCache, MemRefDesc<2> *out, float scale,
                         int64_t p0, int64_t window);

struct CompileOptions {
  /// LLVM IR optimization level of the JIT (0-3).
  unsigned llvmOptLevel = 3;
  /// Serve the kernels compiled ahead of time (aot.h) instead of JIT-ing
  /// their specializations.
  bool useAot = true;
  /// The on-disk kernel cache's directory (disk_cache.h): JIT'd object code
  /// is stored there and later processes load it instead of compiling.
  /// Empty: none.
  std::string diskCacheDir;
};

class CompiledKernel;

/// Where the compile time of one kernel went (milliseconds).
struct CompilePhases {
  double buildMillis = 0;   // context + naive IR
  double mlirMillis = 0;    // our passes and the MLIR lowering to LLVM dialect
  double llvmMillis = 0;    // translation, LLVM optimization and codegen
  double codegenMillis = 0; // of which: LLVM optimization + codegen (lookup)
  double cpuMillis = 0;     // CPU time of the whole compile (one thread)
};

/// One JIT-compiled specialization. Immutable after creation; `fn` may be
/// called concurrently from any number of threads.
class CompiledKernel {
public:
  ~CompiledKernel();
  /// The attention entry point (kernels from `compile`).
  AttentionFn fn() const { return reinterpret_cast<AttentionFn>(entry_); }
  /// The entry point of a headed attention kernel (KernelSpec::headed).
  HeadedAttentionFn headedFn() const {
    return reinterpret_cast<HeadedAttentionFn>(entry_);
  }
  /// The KV-append entry point (kernels from `compileAppend`).
  AppendFn appendFn() const { return reinterpret_cast<AppendFn>(entry_); }
  /// The attention-block entry point (kernels from `compileBlock`).
  BlockFn blockFn() const { return reinterpret_cast<BlockFn>(entry_); }
  double compileMillis() const { return compileMillis_; }
  const CompilePhases &phases() const { return phases_; }
  /// Compiled ahead of time (linked in), not by the JIT.
  bool aot() const { return impl_ == nullptr; }
  /// Loaded from the on-disk kernel cache, not compiled by this process.
  bool fromDisk() const { return fromDisk_; }
  const KernelSpec &spec() const { return spec_; }

  /// Builds, lowers and JIT-compiles `spec`. On failure returns null and sets
  /// `error`. With `object`, the object code is also put there (through
  /// `dump`'s directory), for the on-disk cache.
  static std::unique_ptr<CompiledKernel>
  compile(const KernelSpec &spec, const CompileOptions &options,
          std::string &error, const DiskCache *dump = nullptr,
          std::string *object = nullptr);
  static std::unique_ptr<CompiledKernel>
  compileAppend(const AppendSpec &spec, const CompileOptions &options,
                std::string &error, const DiskCache *dump = nullptr,
                std::string *object = nullptr);
  static std::unique_ptr<CompiledKernel>
  compileBlock(const BlockSpec &spec, const CompileOptions &options,
               std::string &error, const DiskCache *dump = nullptr,
               std::string *object = nullptr);
  /// Links object code from the on-disk cache into a fresh JIT and looks up
  /// `_mlir_ciface_<symbol>`. Null with `error` when it does not link.
  static std::unique_ptr<CompiledKernel>
  load(const std::string &object, const char *symbol, std::string &error);

  struct Impl;

private:
  friend class KernelCache; // wraps AOT entry points
  CompiledKernel() = default;
  /// A module's build and lowering (jit.cc): the append's and the block's.
  struct Recipe;
  static std::unique_ptr<CompiledKernel>
  compileRecipe(const Recipe &recipe, const CompileOptions &options,
                std::string &error, const DiskCache *dump, std::string *object);
  static std::unique_ptr<Impl>
  jitLowered(mlir::ModuleOp module, const std::string &symbol,
             unsigned optLevel, void *&entry, std::string &error,
             double &codegenMillis, const DiskCache *dump, std::string *object);
  std::unique_ptr<Impl> impl_;
  void *entry_ = nullptr;
  bool fromDisk_ = false;
  double compileMillis_ = 0;
  CompilePhases phases_;
  KernelSpec spec_;
};

/// Kernels by specialization key; compiles each key once. Thread-safe:
/// concurrent `get`s of one new key compile it once (the others wait), and a
/// cached kernel is returned without blocking on compilations of other keys
/// any longer than the map lookup.
class KernelCache {
public:
  explicit KernelCache(CompileOptions options = {}) : options_(options) {}
  /// Null on failure, with `error` set.
  const CompiledKernel *get(const KernelSpec &spec, std::string &error);
  /// The KV-append kernel of `spec` (same cache, same once-per-key rule).
  const CompiledKernel *getAppend(const AppendSpec &spec, std::string &error);
  /// The attention-block kernel of `spec` (same cache, same rule).
  const CompiledKernel *getBlock(const BlockSpec &spec, std::string &error);
  /// JIT compilations (AOT kernels and kernels loaded from disk do not
  /// count).
  int64_t compilations() const { return compilations_.load(); }
  /// Kernels loaded from the on-disk cache, and stored into it.
  int64_t diskLoads() const { return diskLoads_.load(); }
  int64_t diskStores() const { return diskStores_.load(); }
  const CompileOptions &options() const { return options_; }

  /// The on-disk cache's key text of a kernel: its spec key and everything
  /// else that determines its code (options, LLVM version, host CPU and
  /// features, the compiled tier's sources).
  std::string diskKey(const std::string &specKey) const;

private:
  /// A JIT kernel through the on-disk cache when there is one: loaded when
  /// a verified entry links, else compiled by `compile` and stored.
  std::unique_ptr<CompiledKernel>
  obtain(const std::string &specKey, const char *symbol,
         const std::function<std::unique_ptr<CompiledKernel>(
             const DiskCache *, std::string *)> &compile);

  struct Entry {
    std::once_flag once;
    std::unique_ptr<CompiledKernel> kernel;
    std::string error;
  };
  Entry *entry(const std::string &key);
  /// A kernel only the JIT makes (no AOT variant), compiled once per key.
  const CompiledKernel *
  getJitOnly(const std::string &key, const char *symbol,
             const std::function<std::unique_ptr<CompiledKernel>(
                 std::string &, const DiskCache *, std::string *)> &compile,
             std::string &error);
  CompileOptions options_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<Entry>> entries_;
  std::atomic<int64_t> compilations_{0};
  std::atomic<int64_t> diskLoads_{0};
  std::atomic<int64_t> diskStores_{0};
};

} // namespace attnkit::compiled

#endif // ATTNKIT_COMPILED_JIT_H_
