#include "compiled/compiled_backend.h"

#include "runtime/accounting.h"
#include "runtime/cpu_features.h"
#include "runtime/parallel.h"
#include "runtime/split_kv.h"

#include <algorithm>
#include <vector>

namespace attnkit::compiled {

namespace {

/// The stack the headed decode kernel may take for its per-head state
/// (accumulator, packed q, scores, m, l, alpha of every head in the band).
constexpr int64_t kHeadedStateBytes = 256 << 10;

} // namespace

int64_t headedBand(const AttentionProblem &p) {
  // Per head: rows G (query tile 1) x (accumulator d rounded up to 16 f32,
  // packed q d rounded up to 32, a tile of scores, m, l, alpha).
  const int64_t dPad = (p.head_dim + 31) / 32 * 32;
  const int64_t tile = kvTileFor(1, KvLayout::kBSHD, p.KvDType());
  const int64_t perHead = p.group_size() * (2 * dPad + tile + 3) * 4;
  return std::clamp<int64_t>(kHeadedStateBytes / perHead, 1, p.kv_heads);
}

KernelSpec specFor(const AttentionProblem &p, bool bf16Dot,
                   int64_t cacheBytes) {
  KernelSpec s;
  s.headDim = p.head_dim;
  s.elem = p.dtype;
  if (p.quantized_kv())
    s.kvElem = DType::kI8;
  s.mask = p.mask;
  s.vTransposed = p.layout == KvLayout::kTransposedV;
  const int64_t maxQ = p.max_q_len();
  s.group = callGroupFor(maxQ, p.group_size());
  s.queryTile = queryTileFor(maxQ, s.group);
  s.bf16Dot = bf16Dot && s.bf16DotApplies() && CpuHasAvx512Bf16();
  // A BSHD cache stores the rows of all kv heads at one position side by
  // side; a decode kernel per head reads its slice of every position row
  // over the whole sequence (512 B of every 4 KiB at Hkv 8, d 128, f32),
  // which streams poorly. The headed kernel takes all the kv heads and walks
  // each KV tile 16 keys at a time with the heads inside, reading the rows
  // whole; the threads then split the keys (PlanKvSplits). A band of
  // heads per call (headedBand) keeps its state on the stack small.
  s.headed =
      s.queryTile == 1 && p.layout == KvLayout::kBSHD && headedBand(p) > 1;
  s.kvTile = kvTileFor(s.queryTile, p.layout, s.kvDType());
  // A decode over K/V that outgrow the last-level cache reads each tile
  // ahead (DecodeKvStreamsFromDram, where the measurements are): the kernel
  // of one kv head per call over f32 K/V (bf16 gained too little from DRAM
  // for what it cost from the caches), the headed kernel over f32 or bf16
  // (README.md, the compiled decode). Below that the caches may still hold
  // the rows, the read-ahead is not overlapped with the compute, and the
  // kernels prefetch.
  const DType kv = s.kvDType();
  s.readAhead = s.queryTile == 1 && !s.vTransposed &&
                (kv == DType::kF32 || (s.headed && kv == DType::kBF16)) &&
                DecodeKvStreamsFromDram(p, cacheBytes);
  return s;
}

KernelCache &globalKernelCache() {
  // Leaked on purpose: the JIT'd engines must not be torn down during static
  // destruction, after LLVM's own statics are gone (a crash at exit).
  // JIT'd kernels go through the on-disk cache in force
  // (DiskCache::defaultDir: $ATTNKIT_KERNEL_CACHE, "off" for none).
  static KernelCache *cache =
      new KernelCache(CompileOptions{.diskCacheDir = DiskCache::defaultDir()});
  return *cache;
}

namespace {

/// Rows of one work item: a multiple of the kernel's 16-row query tile, large
/// enough that K/V tiles are reused, small enough that prefill splits into
/// many items for the 2 cores.
constexpr int64_t kRowsPerItem = 64;
/// The largest GQA group (query heads per KV head) the decode kernels take.
constexpr int64_t kMaxGroup = 128;

/// One unit of parallel work: query rows [i0, i0 + rows) of the query heads
/// [hq, hq + g) (g = KernelSpec::group: all G of kv head kvh, or a prefill
/// kernel's slice of them) -- of each of kv heads [kvh, kvh + heads) -- of
/// sequence `b`, over keys [j0, j1) (several kv heads only for a headed
/// kernel, KernelSpec::headed, which takes all G).
struct WorkItem {
  int64_t b, kvh, hq, i0, rows, j0, j1;
  int64_t split = -1; // -1: the item writes `out` directly
  int64_t splits = 1;
  int64_t slot = 0; // its partial block; a group's blocks are consecutive
  int64_t heads = 1;
};

/// Element offset of [b, h, s, x] (no bounds asserts: extents may be 0).
int64_t at(const TensorView &t, int64_t b, int64_t h, int64_t s, int64_t x) {
  return b * t.strides[0] + h * t.strides[1] + s * t.strides[2] +
         x * t.strides[3];
}

/// Where split item slots keep their partial: o rows r = gi * rows + i of
/// the item's g query heads (G per kv head times its kv heads), stride D,
/// as the kernel's out memref writes them.
PartialLayout partialLayoutFor(int64_t g, int64_t d) {
  return {g * kRowsPerItem, d};
}

class CompiledBackend final : public Backend {
public:
  explicit CompiledBackend(CompiledBackendOptions options)
      : options_(options) {}

  std::string_view name() const override { return "compiled"; }

  std::string Notes() const override {
    const KernelCache &c = globalKernelCache();
    const std::string &dir = c.options().diskCacheDir;
    std::string s =
        std::to_string(c.compilations()) + " kernel(s) JIT-compiled";
    if (dir.empty())
      s += ", no on-disk kernel cache";
    else
      s += " (" + std::to_string(c.diskStores()) + " stored), " +
           std::to_string(c.diskLoads()) + " loaded from the kernel cache " +
           dir;
    // Which of the two bf16 code paths this CPU gets.
    s += options_.bf16Dot && CpuHasAvx512Bf16()
             ? "; bf16 QK^T on vdpbf16ps (AVX512_BF16)"
             : "; bf16 QK^T widened to f32 FMAs";
    return s;
  }

  Status Supports(const AttentionProblem &p) const override {
    ATTNKIT_RETURN_IF_ERROR(p.Validate());
    // The decode kernel unrolls its row blocks over the G query heads that
    // share a KV head (it reads their K/V once), so its compile time grows
    // with G: ~0.4 s at G = 64, ~6 s at G = 1024 and minutes beyond (found
    // by problem_validate_fuzz; 2-core AMD EPYC Zen 5 family 26, GCC 12.2
    // with MLIR/LLVM 22, 2026-11-21). Real GQA/MQA models stay far below
    // the bound; larger groups are left to the other backends rather than
    // stalling a run in the JIT. A prefill kernel takes a slice of at most
    // kPrefillMaxGroup heads per call, whatever G is.
    if (callGroupFor(p.max_q_len(), p.group_size()) > kMaxGroup)
      return Status::Unimplemented(
          "compiled: GQA group q_heads/kv_heads=" +
          std::to_string(p.group_size()) + " exceeds " +
          std::to_string(kMaxGroup) + " for a decode kernel (q_len < " +
          std::to_string(kDecodeMaxQueries) +
          "; it unrolls over the group, compile time grows with it)");
    return Status::Ok();
  }

  Status Attention(const AttentionProblem &p,
                   const AttentionArgs &args) override;

  Status AppendKv(const KvAppendArgs &a) override;

  Status SupportsBlock(const AttentionBlockProblem &p) const override {
    ATTNKIT_RETURN_IF_ERROR(p.Validate());
    return specOfValidBlock(p).status();
  }

  Status AttentionBlock(const AttentionBlockProblem &p,
                        const AttentionBlockArgs &args) override;

private:
  /// One call of the block kernel: sequence b's tokens, KV heads [h0, h1).
  struct BlockItem {
    int64_t b, h0, h1;
    /// -1: writes `out` itself; else the partial Y slot it sums into out
    /// (output projection split over head bands: Megatron's row-parallel
    /// Wo, whose partial sums are all-reduced).
    int64_t partial = -1;
  };
  /// The kernel a validated block problem needs, or why there is none.
  StatusOr<BlockSpec> specOfValidBlock(const AttentionBlockProblem &p) const {
    ATTNKIT_RETURN_IF_ERROR(Supports(p.attention));
    return blockSpecFor(p);
  }
  void runBlockItem(const AttentionBlockProblem &p, const AttentionBlockArgs &a,
                    BlockFn fn, const BlockItem &w);

  /// What every work item of one call shares.
  struct Call {
    const AttentionProblem &p;
    const AttentionArgs &args;
    const CompiledKernel &kernel;
    PartialLayout layout;
    float scale;
    int64_t g, d; // g: query heads per call (KernelSpec::group)
    bool vTransposed;
    /// KV heads per item: > 1 runs the headed kernel (KernelSpec::headed).
    int64_t heads;
  };

  /// The kernel of `spec`: compiled (or loaded) once, then found here.
  StatusOr<const CompiledKernel *> kernelFor(const KernelSpec &spec);
  /// Fills items_ and merges_: query blocks of every (sequence, band of
  /// `heads` kv heads -- 1 but for the headed kernel -- slice of `g` query
  /// heads of a kv head, KernelSpec::group); decode-like problems
  /// with fewer items than threads split the keys instead. Returns the
  /// number of split slots.
  int64_t planItems(const AttentionProblem &p, int threads, int64_t heads,
                    int64_t g);
  /// Grows the per-thread LSE rows and the split partials to fit.
  void reserveWorkspaces(int threads, int64_t slots,
                         const PartialLayout &layout, int64_t g);
  /// The kernel on one item's views: into `out`, or into its partial slot.
  template <bool Headed>
  void runItem(const Call &c, const WorkItem &w, int thread);
  /// Merges the partials of every split item group into `out`.
  void mergeSplits(const Call &c, int threads);

  /// Per-thread LSE output of unsplit items (the kernel always writes one).
  std::vector<std::vector<float>> lse_;
  /// Split partial blocks, one per split item.
  std::vector<float> partials_;
  std::vector<std::pair<AppendSpec, AppendFn>> appendKernels_;
  // Kernels this backend has used, so a warmed-up call skips the cache's key
  // string (an allocation) and mutex.
  std::vector<std::pair<KernelSpec, const CompiledKernel *>> kernels_;
  const CompiledBackendOptions options_;
  // Reused across calls (clear() keeps the capacity): no allocation once a
  // shape has been seen.
  std::vector<WorkItem> items_;
  std::vector<int64_t> merges_; // the first split item of each split group
  std::vector<BlockItem> blockItems_;
  /// Partial Y rows of head bands past the first (output projection only).
  std::vector<float> blockPartials_;
  std::vector<std::pair<BlockSpec, const CompiledKernel *>> blockKernels_;
};

template <int N>
MemRefDesc<N> desc(const void *base, int64_t offset,
                   std::initializer_list<int64_t> sizes,
                   std::initializer_list<int64_t> strides) {
  MemRefDesc<N> d;
  d.allocated = d.aligned = base;
  d.offset = offset;
  std::copy(sizes.begin(), sizes.end(), d.sizes);
  std::copy(strides.begin(), strides.end(), d.strides);
  return d;
}

StatusOr<const CompiledKernel *>
CompiledBackend::kernelFor(const KernelSpec &spec) {
  for (const auto &[known, k] : kernels_)
    if (known == spec)
      return k;
  std::string error;
  const CompiledKernel *kernel = globalKernelCache().get(spec, error);
  if (!kernel)
    return Status::Internal("compiled kernel " + spec.key() + ": " + error);
  kernels_.push_back({spec, kernel});
  return kernel;
}

int64_t CompiledBackend::planItems(const AttentionProblem &p, int threads,
                                   int64_t heads, int64_t g) {
  items_.clear();
  merges_.clear();
  const int64_t group = p.group_size();
  // Kernel calls per query block: a band of kv heads x a slice of g heads.
  const int64_t calls = (p.kv_heads + heads - 1) / heads * (group / g);
  int64_t blocks = 0;
  for (int64_t b = 0; b < p.batch; ++b)
    blocks += calls * ((p.q_lens[b] + kRowsPerItem - 1) / kRowsPerItem);
  const KvSplitPlan plan = PlanKvSplits(blocks, threads, p.max_kv_len());
  int64_t slots = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t ql = p.q_lens[b], kl = p.kv_lens[b];
    const int64_t splits = plan.SplitsFor(kl);
    // Head (or band) by head (the threads share its K/V in cache), each one's
    // query blocks last first: under a causal mask the costliest, so the
    // items left when the threads run out of work are the cheapest.
    const int64_t qblocks = (ql + kRowsPerItem - 1) / kRowsPerItem;
    for (int64_t kvh = 0; kvh < p.kv_heads; kvh += heads)
      for (int64_t hq = kvh * group; hq < (kvh + 1) * group; hq += g)
        for (int64_t qb = qblocks - 1; qb >= 0; --qb) {
          const int64_t i0 = qb * kRowsPerItem;
          const int64_t rows = std::min(kRowsPerItem, ql - i0);
          WorkItem w{b, kvh, hq, i0, rows, 0, kl};
          w.heads = std::min(heads, p.kv_heads - kvh);
          if (splits == 1) {
            items_.push_back(w);
            continue;
          }
          merges_.push_back(static_cast<int64_t>(items_.size()));
          for (int64_t s = 0; s < splits; ++s) {
            const KeyRange keys = plan.Range({0, kl}, s);
            w.j0 = keys.begin;
            w.j1 = keys.end;
            w.split = s;
            w.splits = splits;
            w.slot = slots++;
            items_.push_back(w);
          }
        }
  }
  return slots;
}

void CompiledBackend::reserveWorkspaces(int threads, int64_t slots,
                                        const PartialLayout &layout,
                                        int64_t g) {
  if (static_cast<int>(lse_.size()) < threads)
    lse_.resize(threads);
  const size_t rowsMax = static_cast<size_t>(g * kRowsPerItem);
  for (std::vector<float> &lse : lse_)
    if (lse.size() < rowsMax)
      lse.resize(rowsMax);
  const size_t need = static_cast<size_t>(slots) * layout.floats();
  if (partials_.size() < need)
    partials_.resize(need);
}

/// `m` with a leading dimension of `heads` (stride `stride`) for a headed
/// kernel; `m` itself otherwise.
template <bool Headed, int N>
auto withHeads(const MemRefDesc<N> &m, int64_t heads, int64_t stride) {
  if constexpr (!Headed) {
    return m;
  } else {
    MemRefDesc<N + 1> r;
    r.allocated = m.allocated;
    r.aligned = m.aligned;
    r.offset = m.offset;
    r.sizes[0] = heads;
    r.strides[0] = stride;
    std::copy(m.sizes, m.sizes + N, r.sizes + 1);
    std::copy(m.strides, m.strides + N, r.strides + 1);
    return r;
  }
}

template <bool Headed>
void CompiledBackend::runItem(const Call &c, const WorkItem &w, int thread) {
  const AttentionProblem &p = c.p;
  const TensorView &q = c.args.q, &k = c.args.k, &v = c.args.v,
                   &bias = c.args.bias, &out = c.args.out;
  const int64_t g = c.g, d = c.d, nh = w.heads;
  const int64_t h0 = w.hq; // first query head of the call
  const int64_t n = w.j1 - w.j0;
  const int64_t p0 = p.kv_lens[w.b] - p.q_lens[w.b] + w.i0 - w.j0;
  // Each view as the kernel of one kv head takes it, then (headed) with the
  // item's kv heads in front.
  auto lead = [&](const auto &m, int64_t stride) {
    return withHeads<Headed>(m, nh, stride);
  };
  auto qd = lead(desc<3>(q.data, at(q, w.b, h0, 0, 0) + w.i0 * q.strides[2],
                         {g, w.rows, d}, {q.strides[1], q.strides[2], 1}),
                 g * q.strides[1]);
  auto kd = lead(desc<2>(k.data, at(k, w.b, w.kvh, 0, 0) + w.j0 * k.strides[2],
                         {n, d}, {k.strides[2], 1}),
                 k.strides[1]);
  auto vd =
      lead(c.vTransposed
               ? desc<2>(v.data, at(v, w.b, w.kvh, 0, 0) + w.j0 * v.strides[2],
                         {d, n}, {v.strides[3], 1})
               : desc<2>(v.data, at(v, w.b, w.kvh, 0, 0) + w.j0 * v.strides[2],
                         {n, d}, {v.strides[2], 1}),
           v.strides[1]);
  auto bd = lead(desc<3>(out.data, 0, {g, 0, 0}, {0, 0, 1}), 0);
  // An i8 K/V's scales of keys [j0, j1) (unit stride along the sequence,
  // KvScaleStrides); other kernels never read them.
  auto ksd = lead(desc<1>(out.data, 0, {0}, {1}), 0), vsd = ksd;
  if (p.quantized_kv()) {
    const TensorView &ks = c.args.k_scale, &vs = c.args.v_scale;
    ksd = lead(desc<1>(ks.data, at(ks, w.b, w.kvh, w.j0, 0), {n}, {1}),
               ks.strides[1]);
    vsd = lead(desc<1>(vs.data, at(vs, w.b, w.kvh, w.j0, 0), {n}, {1}),
               vs.strides[1]);
  }
  if (p.mask == MaskKind::kBias) {
    const int64_t hs = bias.shape[1] == 1 ? 0 : bias.strides[1];
    const int64_t hb = bias.shape[1] == 1 ? 0 : h0;
    bd = lead(desc<3>(bias.data,
                      at(bias, w.b, hb, 0, 0) + w.i0 * bias.strides[2] +
                          w.j0 * bias.strides[3],
                      {g, w.rows, n}, {hs, bias.strides[2], 1}),
              g * hs);
  }
  auto call = [&](auto &od, auto &ld) {
    if constexpr (Headed)
      c.kernel.headedFn()(&qd, &kd, &vd, &bd, &ksd, &vsd, &od, &ld, c.scale, p0,
                          p.window);
    else
      c.kernel.fn()(&qd, &kd, &vd, &bd, &ksd, &vsd, &od, &ld, c.scale, p0,
                    p.window);
  };
  if (w.split < 0) {
    auto od =
        lead(desc<3>(out.data, at(out, w.b, h0, 0, 0) + w.i0 * out.strides[2],
                     {g, w.rows, d}, {out.strides[1], out.strides[2], 1}),
             g * out.strides[1]);
    auto ld = lead(desc<2>(lse_[thread].data(), 0, {g, w.rows}, {w.rows, 1}),
                   g * w.rows);
    call(od, ld);
    return;
  }
  // The kernel writes the normalized output into the block's o rows and
  // its LSE into the m slots; PartialFromLse turns that into the layout.
  const PartialLayout &layout = c.layout;
  float *block = partials_.data() + w.slot * layout.floats();
  auto od = lead(desc<3>(block, 0, {g, w.rows, d}, {w.rows * d, d, 1}),
                 g * w.rows * d);
  auto ld = lead(
      desc<2>(block, layout.rows * layout.stride, {g, w.rows}, {w.rows, 1}),
      g * w.rows);
  call(od, ld);
  PartialFromLse(layout, block, nh * g * w.rows);
}

void CompiledBackend::mergeSplits(const Call &c, int threads) {
  const TensorView &out = c.args.out;
  ForEachItem(
      static_cast<int64_t>(merges_.size()), threads, [&](int64_t m, int) {
        const WorkItem &w = items_[merges_[m]];
        const float *first = partials_.data() + w.slot * c.layout.floats();
        for (int64_t r = 0; r < w.heads * c.g * w.rows; ++r) {
          const int64_t gi = r / w.rows, i = r % w.rows;
          float *o = static_cast<float *>(out.data) +
                     at(out, w.b, w.hq + gi, w.i0 + i, 0);
          MergePartialRow(c.layout, first, w.splits, r, c.d, o);
        }
      });
}

Status CompiledBackend::Attention(const AttentionProblem &p,
                                  const AttentionArgs &args) {
  ATTNKIT_RETURN_IF_ERROR(ValidateArgs(p, args));
  const KernelSpec spec =
      specFor(p, options_.bf16Dot, options_.readAheadAboveBytes);
  // KV heads per work item: a band of them for the headed kernel.
  const int64_t heads = spec.headed ? headedBand(p) : 1;
  StatusOr<const CompiledKernel *> kernel = kernelFor(spec);
  if (!kernel.ok())
    return kernel.status();
  if (p.mask == MaskKind::kBias && args.bias.strides[3] != 1)
    return Status::Unimplemented("compiled: bias must be unit-stride along "
                                 "keys, got stride " +
                                 std::to_string(args.bias.strides[3]));
  const int threads = MaxThreads();
  const int64_t g = spec.group, d = p.head_dim;
  const int64_t slots = planItems(p, threads, heads, g);
  if (items_.empty())
    return Status::Ok();
  const Call call{p,
                  args,
                  *kernel.value(),
                  partialLayoutFor(heads * g, d),
                  p.EffectiveScale(),
                  g,
                  d,
                  spec.vTransposed,
                  heads};
  reserveWorkspaces(threads, slots, call.layout, heads * g);
  ForEachItem(static_cast<int64_t>(items_.size()), threads,
              [&](int64_t it, int thread) {
                if (call.heads > 1)
                  runItem<true>(call, items_[it], thread);
                else
                  runItem<false>(call, items_[it], thread);
              });
  mergeSplits(call, threads);
  return Status::Ok();
}

void CompiledBackend::runBlockItem(const AttentionBlockProblem &p,
                                   const AttentionBlockArgs &a, BlockFn fn,
                                   const BlockItem &w) {
  const AttentionProblem &at = p.attention;
  const int64_t g = at.group_size(), d = at.head_dim, hidden = p.hidden;
  const int64_t n = w.h1 - w.h0, ql = at.q_lens[w.b];
  const int64_t qCols = w.h0 * g * d, kvCols = w.h0 * d;
  auto x = desc<2>(a.x.data, w.b * a.x.strides[0], {ql, hidden},
                   {a.x.strides[2], 1});
  auto weight = [&](const TensorView &t, int64_t col, int64_t cols) {
    return desc<2>(t.data, col, {hidden, cols}, {t.strides[2], 1});
  };
  auto wq = weight(a.wq, qCols, n * g * d), wk = weight(a.wk, kvCols, n * d),
       wv = weight(a.wv, kvCols, n * d);
  auto bias = [&](const TensorView &t, int64_t col, int64_t cols) {
    return p.qkv_bias ? desc<1>(t.data, col, {cols}, {1})
                      : desc<1>(a.out.data, 0, {0}, {1});
  };
  auto bq = bias(a.bq, qCols, n * g * d), bk = bias(a.bk, kvCols, n * d),
       bv = bias(a.bv, kvCols, n * d);
  auto wo = p.output_projection
                ? desc<2>(a.wo.data, qCols * a.wo.strides[2],
                          {n * g * d, hidden}, {a.wo.strides[2], 1})
                : desc<2>(a.out.data, 0, {0, hidden}, {hidden, 1});
  auto cache = [&](const TensorView &c, bool transposed) {
    const int64_t base = w.b * c.strides[0] + w.h0 * c.strides[1];
    return transposed ? desc<3>(c.data, base, {n, d, c.shape[2]},
                                {c.strides[1], c.strides[3], 1})
                      : desc<3>(c.data, base, {n, c.shape[2], d},
                                {c.strides[1], c.strides[2], 1});
  };
  auto kc = cache(a.k_cache, false);
  auto vc = cache(a.v_cache, at.layout == KvLayout::kTransposedV);
  MemRefDesc<2> out;
  if (!p.output_projection)
    out = desc<2>(a.out.data, w.b * a.out.strides[0] + qCols, {ql, n * g * d},
                  {a.out.strides[2], 1});
  else if (w.partial < 0)
    out = desc<2>(a.out.data, w.b * a.out.strides[0], {ql, hidden},
                  {a.out.strides[2], 1});
  else
    out = desc<2>(blockPartials_.data(), w.partial * at.max_q_len() * hidden,
                  {ql, hidden}, {hidden, 1});
  fn(&x, &wq, &wk, &wv, &bq, &bk, &bv, &wo, &kc, &vc, &out, at.EffectiveScale(),
     at.kv_lens[w.b] - ql, at.window);
}

Status CompiledBackend::AttentionBlock(const AttentionBlockProblem &p,
                                       const AttentionBlockArgs &args) {
  ATTNKIT_RETURN_IF_ERROR(ValidateBlockArgs(p, args)); // p.Validate() too
  StatusOr<BlockSpec> specOr = specOfValidBlock(p);
  if (!specOr.ok())
    return specOr.status();
  const BlockSpec &spec = specOr.value();
  const AttentionProblem &at = p.attention;
  if (args.k_cache.strides[3] != 1 ||
      (at.layout == KvLayout::kTransposedV ? args.v_cache.strides[2]
                                           : args.v_cache.strides[3]) != 1)
    return Status::Unimplemented(
        "compiled: the block's caches need a unit-stride head_dim (K, V) or "
        "sequence (transposed V)");
  const CompiledKernel *kernel = nullptr;
  for (const auto &[known, k] : blockKernels_)
    if (known == spec)
      kernel = k;
  if (!kernel) {
    std::string error;
    kernel = globalKernelCache().getBlock(spec, error);
    if (!kernel)
      return Status::Internal("compiled block kernel " + spec.key() + ": " +
                              error);
    blockKernels_.push_back({spec, kernel});
  }
  // Work items: a sequence per thread when there are enough; else each
  // sequence's KV heads in bands, one per thread (tensor parallelism).
  const int threads = MaxThreads();
  const int64_t bands =
      at.batch >= threads ? 1 : std::min<int64_t>(at.kv_heads, threads);
  blockItems_.clear();
  int64_t partials = 0;
  for (int64_t b = 0; b < at.batch; ++b) {
    if (at.q_lens[b] == 0)
      continue;
    for (int64_t band = 0; band < bands; ++band) {
      BlockItem w{b, at.kv_heads * band / bands,
                  at.kv_heads * (band + 1) / bands};
      if (p.output_projection && band > 0)
        w.partial = partials++;
      blockItems_.push_back(w);
    }
  }
  const size_t need = static_cast<size_t>(partials * at.max_q_len() * p.hidden);
  if (blockPartials_.size() < need)
    blockPartials_.resize(need);
  const BlockFn fn = kernel->blockFn();
  ForEachItem(
      static_cast<int64_t>(blockItems_.size()), threads,
      [&](int64_t i, int) { runBlockItem(p, args, fn, blockItems_[i]); });
  // The all-reduce: every band's partial Y added to the first band's rows.
  for (const BlockItem &w : blockItems_) {
    if (w.partial < 0)
      continue;
    const float *part =
        blockPartials_.data() + w.partial * at.max_q_len() * p.hidden;
    for (int64_t i = 0; i < at.q_lens[w.b]; ++i) {
      float *row = static_cast<float *>(args.out.data) +
                   w.b * args.out.strides[0] + i * args.out.strides[2];
      for (int64_t c = 0; c < p.hidden; ++c)
        row[c] += part[i * p.hidden + c];
    }
  }
  return Status::Ok();
}

/// The append kernel for one (cache, new tokens) pair: specialized on the
/// unit-stride dims of both, so the copy is a contiguous run (BHSD/BSHD) or a
/// strided scatter along the sequence (V of transposed-V).
AppendSpec appendSpecFor(const TensorView &cache, const TensorView &tokens) {
  AppendSpec s;
  s.headDim = cache.shape[3];
  s.elem = cache.dtype;
  s.cacheUnit = cache.strides[3] == 1   ? AppendSpec::Unit::kDim
                : cache.strides[2] == 1 ? AppendSpec::Unit::kSeq
                                        : AppendSpec::Unit::kNone;
  s.tokensDimUnit = tokens.strides[3] == 1;
  return s;
}

MemRefDesc<4> desc4(const TensorView &t) {
  MemRefDesc<4> d;
  d.allocated = d.aligned = t.data;
  d.offset = 0;
  std::copy(t.shape.begin(), t.shape.end(), d.sizes);
  std::copy(t.strides.begin(), t.strides.end(), d.strides);
  return d;
}

/// Below this many elements an append stays on the calling thread: a
/// decode step writes B x H x D elements (8 x 128 = 1024 for the benchmark
/// shape), far less than an OpenMP fork/join costs.
constexpr int64_t kParallelAppendElems = int64_t{1} << 18;

Status CompiledBackend::AppendKv(const KvAppendArgs &a) {
  ATTNKIT_RETURN_IF_ERROR(ValidateAppend(a));
  // An i8 cache: the one quantization rule (runtime/dtype.h's
  // QuantizeRowI8), which AppendKvStrided applies straight into the slot.
  // Not compiled, on purpose: the cache's bytes must equal every other
  // writer's bit for bit, so a compiled quantizer would have to reproduce
  // the rule's f32 division (no reciprocal multiply: fast-math would
  // change the rounding of x / scale) and round-half-to-even exactly,
  // and would still do the same work -- a decode step quantizes
  // batch x kv_heads rows of head_dim values, microseconds against the
  // attention's pass over the whole cache.
  if (a.k_cache.dtype == DType::kI8) {
    AppendKvStrided(a);
    return Status::Ok();
  }
  const int64_t batch = a.k_cache.shape[0], heads = a.k_cache.shape[1];
  int64_t elems = 0;
  for (int64_t b = 0; b < batch; ++b)
    elems += a.new_lens[b] * heads * a.k_cache.shape[3];
  if (elems == 0)
    return Status::Ok();
  const std::pair<const TensorView *, const TensorView *> pairs[] = {
      {&a.k_cache, &a.new_k}, {&a.v_cache, &a.new_v}};
  for (auto [cache, tokens] : pairs) {
    const AppendSpec spec = appendSpecFor(*cache, *tokens);
    // A decode step appends 1 token per head: the kernel-cache lookup (key
    // string + map + mutex, ~0.4 us on a 2-core AMD EPYC Zen 5 family 26,
    // GCC 12.2, 2026-11-21) would cost more than the copy, so the backend
    // remembers the kernels of the specs it has used.
    AppendFn fn = nullptr;
    for (const auto &[known, f] : appendKernels_)
      if (known == spec)
        fn = f;
    if (!fn) {
      std::string error;
      const CompiledKernel *kernel = globalKernelCache().getAppend(spec, error);
      if (!kernel)
        return Status::Internal("compiled append " + spec.key() + ": " + error);
      fn = kernel->appendFn();
      appendKernels_.push_back({spec, fn});
    }
    MemRefDesc<4> cd = desc4(*cache), td = desc4(*tokens);
    auto copyHead = [&](int64_t b, int64_t h) {
      if (a.new_lens[b] == 0)
        return;
      // The kernel takes its descriptors by pointer; give each call its
      // own copies (it does not write them, but the ABI does not say so).
      MemRefDesc<4> c = cd, t = td;
      fn(&c, &t, b, h, a.positions[b], a.new_lens[b]);
    };
    ForEachItem(batch * heads, elems >= kParallelAppendElems ? MaxThreads() : 1,
                [&](int64_t t, int) { copyHead(t / heads, t % heads); });
  }
  accounting::RecordCopy(AppendedBytes(a));
  return Status::Ok();
}

} // namespace

std::unique_ptr<Backend> MakeCompiledBackend(CompiledBackendOptions options) {
  return std::make_unique<CompiledBackend>(options);
}

std::unique_ptr<Backend> MakeCompiledBackend() {
  return MakeCompiledBackend(CompiledBackendOptions{});
}

} // namespace attnkit::compiled
