#include "compiled/compiled_backend.h"

#include "runtime/accounting.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

namespace attnkit::compiled {

KernelSpec specFor(const AttentionProblem &p) {
  KernelSpec s;
  s.headDim = p.head_dim;
  s.elem = p.dtype;
  s.mask = p.mask;
  s.vTransposed = p.layout == KvLayout::kTransposedV;
  s.group = p.group_size();
  int64_t maxQ = 0;
  for (int64_t q : p.q_lens)
    maxQ = std::max(maxQ, q);
  s.queryTile = queryTileFor(maxQ);
  return s;
}

KernelCache &globalKernelCache() {
  // Leaked on purpose: the JIT'd engines must not be torn down during static
  // destruction, after LLVM's own statics are gone (a crash at exit).
  static KernelCache *cache = new KernelCache();
  return *cache;
}

namespace {

/// Rows of one work item: a multiple of the kernel's 16-row query tile, large
/// enough that K/V tiles are reused, small enough that prefill splits into
/// many items for the 2 cores.
constexpr int64_t kRowsPerItem = 64;
/// Split-KV (flash-decoding) below this many items per thread, with at least
/// this many keys per split so the partial merge stays negligible.
constexpr int64_t kMinKeysPerSplit = 512;
/// The largest GQA group (query heads per KV head) the compiled kernels take.
constexpr int64_t kMaxGroup = 128;

/// One unit of parallel work: query rows [i0, i0 + rows) of the G query
/// heads of kv head `kvh` of sequence `b`, over keys [j0, j1).
struct WorkItem {
  int64_t b, kvh, i0, rows, j0, j1;
  int64_t split = -1; // -1: the item writes `out` directly
  int64_t splits = 1;
  int64_t slot = 0; // partial storage, in units of G * kRowsPerItem rows
};

/// Element offset of [b, h, s, x] (no bounds asserts: extents may be 0).
int64_t at(const TensorView &t, int64_t b, int64_t h, int64_t s, int64_t x) {
  return b * t.strides[0] + h * t.strides[1] + s * t.strides[2] +
         x * t.strides[3];
}

/// Per-thread scratch, grown on first use for a shape and reused after.
struct Scratch {
  std::vector<float> lse;
  std::vector<float> partOut; // split-KV partial outputs [splits][G][rows][D]
  std::vector<float> partLse; // [splits][G][rows]
};

class CompiledBackend final : public Backend {
public:
  std::string_view name() const override { return "compiled"; }

  Status Supports(const AttentionProblem &p) const override {
    ATTNKIT_RETURN_IF_ERROR(p.Validate());
    // The vectorizer unrolls its row blocks over the G query heads that
    // share a KV head, so compile time grows with G: ~0.4 s at G = 64,
    // ~6 s at G = 1024 and minutes beyond (found by problem_validate_fuzz).
    // Real GQA/MQA models stay far below the bound; larger groups are left
    // to the other backends rather than stalling a run in the JIT.
    if (p.group_size() > kMaxGroup)
      return Status::Unimplemented(
          "compiled: GQA group q_heads/kv_heads=" +
          std::to_string(p.group_size()) + " exceeds " +
          std::to_string(kMaxGroup) +
          " (the kernels unroll over the group; compile time grows with it)");
    return Status::Ok();
  }

  Status Attention(const AttentionProblem &p,
                   const AttentionArgs &args) override;

  Status AppendKv(const KvAppendArgs &a) override;

private:
  std::vector<Scratch> scratch_;
  std::vector<std::pair<AppendSpec, AppendFn>> appendKernels_;
  // Kernels this backend has used, so a warmed-up call skips the cache's key
  // string (an allocation) and mutex.
  std::vector<std::pair<KernelSpec, const CompiledKernel *>> kernels_;
  // Reused across calls (clear() keeps the capacity): no allocation once a
  // shape has been seen.
  std::vector<WorkItem> items_;
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

Status CompiledBackend::Attention(const AttentionProblem &p,
                                  const AttentionArgs &args) {
  ATTNKIT_RETURN_IF_ERROR(ValidateArgs(p, args));
  const KernelSpec spec = specFor(p);
  const CompiledKernel *kernel = nullptr;
  for (const auto &[known, k] : kernels_)
    if (known == spec)
      kernel = k;
  if (!kernel) {
    std::string error;
    kernel = globalKernelCache().get(spec, error);
    if (!kernel)
      return Status::Internal("compiled kernel " + spec.key() + ": " + error);
    kernels_.push_back({spec, kernel});
  }
  if (p.mask == MaskKind::kBias && args.bias.strides[3] != 1)
    return Status::Unimplemented("compiled: bias must be unit-stride along "
                                 "keys, got stride " +
                                 std::to_string(args.bias.strides[3]));

  const int64_t g = p.group_size(), d = p.head_dim;
  const int threads = omp_get_max_threads();

  // Work items: query blocks of every (sequence, kv head); decode-like
  // problems with fewer items than threads split the keys instead.
  std::vector<WorkItem> &items = items_;
  items.clear();
  int64_t blocks = 0;
  for (int64_t b = 0; b < p.batch; ++b)
    blocks += p.kv_heads * ((p.q_lens[b] + kRowsPerItem - 1) / kRowsPerItem);
  const bool splitKv = blocks < threads;
  int64_t slots = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t ql = p.q_lens[b], kl = p.kv_lens[b];
    for (int64_t kvh = 0; kvh < p.kv_heads; ++kvh)
      for (int64_t i0 = 0; i0 < ql; i0 += kRowsPerItem) {
        const int64_t rows = std::min(kRowsPerItem, ql - i0);
        int64_t splits = 1;
        if (splitKv)
          splits = std::clamp<int64_t>(kl / kMinKeysPerSplit, 1,
                                       (threads + blocks - 1) / blocks);
        const int64_t per = (kl + splits - 1) / splits;
        for (int64_t s = 0; s < splits; ++s) {
          WorkItem w{b,
                     kvh,
                     i0,
                     rows,
                     std::min(kl, s * per),
                     std::min(kl, (s + 1) * per)};
          if (splits > 1) {
            w.split = s;
            w.splits = splits;
            w.slot = slots++;
          }
          items.push_back(w);
        }
      }
  }
  if (items.empty())
    return Status::Ok();

  if (static_cast<int>(scratch_.size()) < threads)
    scratch_.resize(threads);
  const size_t rowsMax = static_cast<size_t>(g * kRowsPerItem);
  for (Scratch &s : scratch_) {
    if (s.lse.size() < rowsMax)
      s.lse.resize(rowsMax);
  }
  // Split partials live in thread 0's scratch, one slot per split item.
  Scratch &shared = scratch_[0];
  const size_t need = static_cast<size_t>(slots * g * kRowsPerItem);
  if (shared.partLse.size() < need)
    shared.partLse.resize(need);
  if (shared.partOut.size() < need * d)
    shared.partOut.resize(need * d);

  const float scale = p.EffectiveScale();
  const int64_t window = p.window;
  const TensorView &q = args.q, &k = args.k, &v = args.v, &bias = args.bias,
                   &out = args.out;
  AttentionFn fn = kernel->fn();
  const bool vt = spec.vTransposed;
  const int64_t nItems = static_cast<int64_t>(items.size());

  // Items are handed out through one atomic counter, not `omp for
  // schedule(dynamic)`: LLVM's OpenMP runtime (the process's libgomp.so.1
  // through MLIR's RUNPATH) mallocs on every dynamic loop start, and the
  // decode meter requires zero allocations per step.
  auto runItem = [&](const WorkItem &w, Scratch &mine) {
    const int64_t h0 = w.kvh * g; // first query head of the group
    const int64_t n = w.j1 - w.j0;
    const int64_t p0 = p.kv_lens[w.b] - p.q_lens[w.b] + w.i0 - w.j0;
    auto qd = desc<3>(q.data, at(q, w.b, h0, 0, 0) + w.i0 * q.strides[2],
                      {g, w.rows, d}, {q.strides[1], q.strides[2], 1});
    auto kd = desc<2>(k.data, at(k, w.b, w.kvh, 0, 0) + w.j0 * k.strides[2],
                      {n, d}, {k.strides[2], 1});
    auto vd =
        vt ? desc<2>(v.data, at(v, w.b, w.kvh, 0, 0) + w.j0 * v.strides[2],
                     {d, n}, {v.strides[3], 1})
           : desc<2>(v.data, at(v, w.b, w.kvh, 0, 0) + w.j0 * v.strides[2],
                     {n, d}, {v.strides[2], 1});
    MemRefDesc<3> bd = desc<3>(out.data, 0, {g, 0, 0}, {0, 0, 1});
    if (p.mask == MaskKind::kBias) {
      const int64_t hs = bias.shape[1] == 1 ? 0 : bias.strides[1];
      const int64_t hb = bias.shape[1] == 1 ? 0 : h0;
      bd = desc<3>(bias.data,
                   at(bias, w.b, hb, 0, 0) + w.i0 * bias.strides[2] +
                       w.j0 * bias.strides[3],
                   {g, w.rows, n}, {hs, bias.strides[2], 1});
    }
    MemRefDesc<3> od;
    MemRefDesc<2> ld;
    if (w.split < 0) {
      od = desc<3>(out.data, at(out, w.b, h0, 0, 0) + w.i0 * out.strides[2],
                   {g, w.rows, d}, {out.strides[1], out.strides[2], 1});
      ld = desc<2>(mine.lse.data(), 0, {g, w.rows}, {w.rows, 1});
    } else {
      const int64_t slot = w.slot * g * kRowsPerItem;
      od = desc<3>(shared.partOut.data(), slot * d, {g, w.rows, d},
                   {w.rows * d, d, 1});
      ld = desc<2>(shared.partLse.data(), slot, {g, w.rows}, {w.rows, 1});
    }
    fn(&qd, &kd, &vd, &bd, &od, &ld, scale, p0, window);
  };
  std::atomic<int64_t> next{0};
  auto runItems = [&](Scratch &mine) {
    for (int64_t it = next.fetch_add(1, std::memory_order_relaxed); it < nItems;
         it = next.fetch_add(1, std::memory_order_relaxed))
      runItem(items[it], mine);
  };
  if (threads > 1 && nItems > 1) {
#pragma omp parallel
    runItems(scratch_[omp_get_thread_num()]);
  } else {
    runItems(scratch_[0]);
  }

  // Merge the partial (out, lse) pairs of each split item group:
  // out = sum_s exp(lse_s - lse) out_s with lse = log sum_s exp(lse_s); a row
  // whose partials are all -inf (no visible key) stays zeros.
  for (int64_t it = 0; it < nItems; ++it) {
    const WorkItem &w = items[it];
    if (w.split != 0)
      continue;
    const int64_t rowsAll = g * w.rows;
    auto lseOf = [&](int64_t s, int64_t r) {
      return shared.partLse[items[it + s].slot * g * kRowsPerItem + r];
    };
    for (int64_t r = 0; r < rowsAll; ++r) {
      const int64_t gi = r / w.rows, i = r % w.rows;
      float *o = static_cast<float *>(out.data) +
                 at(out, w.b, w.kvh * g + gi, w.i0 + i, 0);
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t s = 0; s < w.splits; ++s)
        mx = std::max(mx, lseOf(s, r));
      std::fill(o, o + d, 0.0f);
      if (mx == -std::numeric_limits<float>::infinity())
        continue;
      float wsum = 0;
      for (int64_t s = 0; s < w.splits; ++s)
        wsum += std::exp(lseOf(s, r) - mx);
      for (int64_t s = 0; s < w.splits; ++s) {
        const float wgt = std::exp(lseOf(s, r) - mx) / wsum;
        const float *po = shared.partOut.data() +
                          (items[it + s].slot * g * kRowsPerItem + r) * d;
        for (int64_t x = 0; x < d; ++x)
          o[x] += wgt * po[x];
      }
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
    // string + map + mutex, ~0.4 us) would cost more than the copy, so the
    // backend remembers the kernels of the specs it has used.
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
    // Serial appends skip the parallel region entirely: LLVM's OpenMP
    // runtime allocates even for a `parallel if(false)` region.
    if (elems >= kParallelAppendElems) {
#pragma omp parallel for collapse(2)
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t h = 0; h < heads; ++h)
          copyHead(b, h);
    } else {
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t h = 0; h < heads; ++h)
          copyHead(b, h);
    }
  }
  accounting::RecordCopy(AppendedBytes(a));
  return Status::Ok();
}

} // namespace

std::unique_ptr<Backend> MakeCompiledBackend() {
  return std::make_unique<CompiledBackend>();
}

} // namespace attnkit::compiled
