// Split-KV (flash-decoding): when a call has fewer work items than threads --
// decode with few sequences x kv heads -- each item's keys are cut into
// splits that run as items of their own. Each split writes a partial result
// (its rows' softmax over its keys, not yet normalized against the other
// splits), and a merge combines the partials of an item into its output
// rows. One plan, one partial layout and one merge for every backend.
#ifndef ATTNKIT_RUNTIME_SPLIT_KV_H_
#define ATTNKIT_RUNTIME_SPLIT_KV_H_

#include <cstddef>
#include <cstdint>

#include "runtime/cpu_features.h"
#include "runtime/dtype.h"
#include "runtime/problem.h"

namespace attnkit {

// A split only pays when it still streams enough keys to hide the partial
// write and the merge: 512 keys x d 128 x f32 = 256 KiB of K+V, against
// (d + 2) floats per row of partial.
inline constexpr int64_t kMinKeysPerSplit = 512;
// Bounds the partial storage (items x splits blocks) and the merge's work.
// The plan asks for 2 x threads / items splits, so this only binds with more
// than 32 threads per item.
inline constexpr int64_t kMaxKvSplits = 64;
// Split boundaries fall on multiples of 64 keys from the item's first key:
// most kernels walk keys in tiles of 64 (simd kTileLanes, compiled kKvTile),
// so only an item's last tile is partial; the transposed-V decode tiles of
// 128 to 2048 keys (simd DecodeTileKeys, compiled kvTileFor) may also end a
// split with a partial tile. Divides kMinKeysPerSplit, which is what keeps
// every split of a planned item at >= kMinKeysPerSplit keys.
inline constexpr int64_t kKvSplitAlign = 64;

// The keys per tile of a decode over a transposed V in the compiled backend
// (kvTileFor) and in simd's narrower ISAs (DecodeTileKeys; its AVX-512 P.V
// takes 2048-key tiles instead, simd/README.md, "Transposed V: long runs";
// the compiled kernel measured no gain from them). Such a tile reads a slice of
// each of the d V^T rows, rows a whole cache apart: one run of
// keys x element bytes per row. Runs of 512 B streamed fastest -- 256 B bf16
// runs and 1 KiB f32 ones were slower (simd/README.md, "Transposed V:
// 512-byte runs"; README.md, the compiled transposed-V decode) -- so f32
// 128 keys, bf16 256, int8 256 (the bound; not measured).
constexpr int64_t TransposedVDecodeTileKeys(DType kv) {
  const int64_t keys = 512 / DTypeSize(kv);
  return keys < 128 ? 128 : keys > 256 ? 256 : keys;
}

// How far ahead a decode kernel (simd and compiled) prefetches the K rows
// it will dot next and the V rows it will accumulate next, in bytes of each
// stream: one row at a time, in address order, into L2 (prefetcht1; the L1
// prefetcher takes them on from there). The hardware prefetchers alone
// stream these rows at about half the rate one core consumes them; a much
// longer distance crowded L1 when the rows went there (simd/README.md,
// "Prefetch distance" and "Prefetch target"). The compiled kernel took 64
// keys of any row before (32 KiB of f32 at d 128): `bench ab` of
// decode_paired kv 16k Hq 32 / Hkv 8, 6 rounds, 8 KiB / 64 keys: BHSD bf16
// 0.92x the time (faster in 6 of 6), f32 0.96x, other layouts 0.99-1.03x
// (2-core AMD EPYC Zen 5, GCC 12.2, MLIR/LLVM 22, 2026-11-28).
inline constexpr int64_t kPrefetchBytes = 8192;
// Keys ahead for rows of row_bytes: kPrefetchBytes of them, at least 4.
constexpr int64_t PrefetchKeys(int64_t row_bytes) {
  return row_bytes >= kPrefetchBytes / 4 ? 4 : kPrefetchBytes / row_bytes;
}

// Bytes of K and V a call reads at most: every sequence's kv_len rows of
// every kv head, of K and of V (int8 scales not counted).
int64_t KvBytes(const AttentionProblem& p);

// Whether a decode call's K and V outgrow the last-level cache
// (`llc_bytes`, LastLevelCacheBytes by default; 0 = unknown: false), so
// that they stream from DRAM whatever ran before it. The compiled decode
// kernel of one kv head (BHSD) over f32 K/V then reads each tile's K and V
// rows once, one load per line in address order, before its compute,
// instead of prefetching them (KernelSpec::readAhead, Emitter::readAhead);
// the headed kernel (BSHD) over f32 or bf16 K/V each 16 keys' rows.
// From DRAM that streams faster: decode_paired kv 16k Hq 32 / Hkv 8 0.81-
// 0.84x the time; but the read is not overlapped with the compute, so
// from the caches it costs: 1.18-1.27x at kv 512-2048 called back to back
// (`bench ab`, 6-8 rounds, 2-core AMD EPYC Zen 5 with a 32 MiB L3, GCC
// 12.2, MLIR/LLVM 22, 2026-11-28; README.md, the compiled decode). The
// simd kernel keeps its prefetch there (no consistent gain measured); its
// BSHD items of several kv heads read ahead by the same rule where
// simd/kernel.h's BshdItemReadsAhead allows (f32; bf16 from 4 KiB of rows
// per key; simd/README.md, "BSHD decode items").
bool DecodeKvStreamsFromDram(const AttentionProblem& p,
                             int64_t llc_bytes = LastLevelCacheBytes());

// Whether a decode call's QK^T prefetches the K rows ahead in software: K/V
// above the cores' private caches (`private_bytes`, PrivateCacheBytes by
// default; unknown, 0: always). Only K/V that fit there are sure to be
// found again by a call that repeats; a shared last-level cache holds what
// every other call and tenant left, and in a model's decode step each
// layer's K/V comes back only after every other layer's. Below, the
// hardware prefetchers keep up and the prefetch instructions only cost:
// Hq 32 / Hkv 8 kv 512 BHSD (4 MiB) in L3, one thread, f32 64.3 -> 58.3 us
// without them, bf16 43.0 -> 41.6 us (2-core AMD EPYC Zen 5, 1 MiB L2 per
// core, 32 MiB L3, GCC 12.2, 2026-11-29). Above, from DRAM, leaving them
// out costs far more: `decode` kv 8192 bf16 (32 MiB) 1.87x the time there;
// on a 2-core Xeon guest listing a 300 MiB L3, decode_paired kv 16k
// Hkv 8 ran 1.19-1.32x the time (2026-11-29, simd/README.md, "K prefetch
// only from DRAM"), the rule then being half the last-level cache.
bool DecodePrefetchesKeys(const AttentionProblem& p,
                          int64_t private_bytes = PrivateCacheBytes());

// Bytes a call touches: every sequence's q_len rows of Q (the problem's
// dtype) and of the f32 output, for every query head, and its K and V
// (KvBytes).
int64_t CallBytes(const AttentionProblem& p);

// Whether a call outgrows the last-level cache (`llc_bytes`; 0 = unknown:
// false) so that its output is better written with non-temporal stores: no
// line of the output can still be cached when the call writes it, nor once
// the call returns, so an ordinary store only reads each line from DRAM
// first (read for ownership) to overwrite it whole. The simd prefill then
// streams its output rows (`SimdOptions::stream_output_above_bytes`;
// simd/README.md, "Output rows streamed past the caches": about 1% of an
// S 2048 prefill's time, 2-3% of an S 1024 one's on one core).
bool OutputStreamsPastCache(const AttentionProblem& p,
                            int64_t llc_bytes = LastLevelCacheBytes());

struct KvSplitPlan {
  // Partial slots per work item; 1 = no split-KV.
  int64_t splits = 1;
  // Tests force splits on short contexts to exercise the merge: then every
  // item uses all `splits`, whatever its length.
  bool forced = false;

  // Splits of an item that sees `keys` keys: `splits`, fewer when the item
  // is too short for each to keep kMinKeysPerSplit keys (ragged batches:
  // `splits` was planned for the longest sequence), never fewer than 1.
  int64_t SplitsFor(int64_t keys) const;
  // Split s of an item whose rows see `keys`: consecutive ranges whose union
  // is exactly `keys`, boundaries at multiples of kKvSplitAlign from
  // keys.begin. Empty for s >= SplitsFor(keys), so a caller that runs every
  // one of `splits` slots gets empty partials for the surplus.
  KeyRange Range(KeyRange keys, int64_t s) const;
};

// The plan for `items` work items on `threads` threads whose longest key
// range has `max_keys` keys; force_splits >= 1 overrides it (tests).
KvSplitPlan PlanKvSplits(int64_t items, int threads, int64_t max_keys,
                         int64_t force_splits = 0);

// Where one split's partial result lives: one float block of
//   o[rows][stride], then m[rows], then l[rows].
// Row r stands for the output o[r] / l[r] with
//   o = sum_j 2^(x_j - m) v_j,   l = sum_j 2^(x_j - m)
// over the split's keys j, x_j being the logit in log2 units
// (scale * log2(e) * q.k, plus bias * log2(e)). m is any reference the
// kernel kept -- the running max, or a stale one under lazy rescaling; it
// need not be the max of the x_j -- and -inf when the split saw no key (o
// and l are then ignored, whatever they hold). This is what an online
// softmax in exp2 has in its registers at the end of a split (the simd
// kernels), so they store it without any extra work; a kernel that returns
// the normalized output and its LSE converts with PartialFromLse.
struct PartialLayout {
  int64_t rows = 0;    // row capacity of one block
  int64_t stride = 0;  // floats between o rows, >= head_dim

  constexpr size_t floats() const {
    return static_cast<size_t>(rows * (stride + 2));
  }
  // T: float or const float.
  template <typename T>
  constexpr T* o(T* block, int64_t r) const {
    return block + r * stride;
  }
  template <typename T>
  constexpr T* m(T* block, int64_t r) const {
    return block + rows * stride + r;
  }
  template <typename T>
  constexpr T* l(T* block, int64_t r) const {
    return block + rows * stride + rows + r;
  }
};

// For a kernel that wrote, for rows [0, n), the normalized output o / l into
// o and its natural-log LSE (ln l + m ln 2, -inf for no key) into m: makes
// the block the layout's (m in log2 units, l = 1). Per row, not per element:
// the kernel's own loop stays as it is.
void PartialFromLse(const PartialLayout& layout, float* block, int64_t n);

// Writes out[0, d) = row r merged over `splits` partial blocks laid out back
// to back from `first`:
//   out = sum_s 2^(m_s - M) o_s / sum_s 2^(m_s - M) l_s,   M = max_s m_s,
// i.e. every split rescaled to a common max (flash-decoding's merge). A row
// no split saw a key for (M = -inf) is zeros, never NaN.
void MergePartialRow(const PartialLayout& layout, const float* first,
                     int64_t splits, int64_t r, int64_t d, float* out);

}  // namespace attnkit

#endif  // ATTNKIT_RUNTIME_SPLIT_KV_H_
