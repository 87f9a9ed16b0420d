// Internal contract between the simd backend's driver (simd_backend.cc: plan,
// OpenMP, split-KV merge) and its per-architecture kernels (one translation
// unit per ISA, flash_<isa>.cc, each compiled with that ISA's flags). Nothing
// here is public API.
#ifndef ATTNKIT_SIMD_KERNEL_H_
#define ATTNKIT_SIMD_KERNEL_H_

#include <cstddef>
#include <cstdint>

#include "runtime/dtype.h"
#include "runtime/problem.h"
#include "runtime/split_kv.h"
#include "simd/simd_backend.h"
#include "xsimd/config/xsimd_arch.hpp"

namespace attnkit::simd::internal {

// Rows of one work item: the query heads sharing a KV head, stacked with a
// block of queries (row r = query r / group_heads, head r % group_heads of
// BlockJob), so each K/V tile is loaded once for up to kMaxRows rows. 64 rows
// = 4 AVX-512 vectors, the register block of the micro-kernels.
inline constexpr int kMaxRows = 64;
// Keys per tile of the prefill path (rows along the vector lanes), chosen per
// CPU by the size of its L1 data cache: a 64-key S^T tile of 64 rows is
// 16 KiB and stays in a 32 KiB L1 next to the 32 KiB Q^T's working rows,
// where 128 keys (32 KiB of S^T) ran 1.03-1.06x the time (Zen 4, 32 KiB
// L1D); with a 48 KiB L1 (Zen 5, recent Intel cores) 128 keys halve the
// accumulator loads and stores of P.V per FLOP and ran 0.98-0.99x
// (simd/README.md, "Prefill tile by L1 size"). K/V tiles of 128 keys x
// d=128 are 64 KiB each: the working set stays in a 1 MiB L2 either way.
// kMaxPrefillTileKeys sizes the workspace.
inline constexpr int64_t kMaxPrefillTileKeys = 128;
inline constexpr int64_t kMinL1ForLongPrefillTiles = int64_t{48} << 10;
constexpr int64_t PrefillTileKeysFor(int64_t l1d_bytes) {
  return l1d_bytes >= kMinL1ForLongPrefillTiles ? kMaxPrefillTileKeys : 64;
}
// Keys per tile of the decode path (d along the lanes, few rows) for an item
// of `rows` rows. Longer tiles amortize the per-tile softmax reductions (and
// the haddp of P.V over transposed V); shorter ones keep the K and V streams
// from DRAM both moving (each tile reads K, then V). 128 by default; BHSD
// items of f32 or bf16 K/V and up to kLongDecodeTileRows rows (a GQA group
// of 4 or fewer, MHA) take 256, which read 0.92-0.99x the time of 128 (2-core
// AMD EPYC Zen 5, 48 KiB L1D, GCC 12.2, 2026-11-28; int8 within noise:
// simd/README.md, "Decode tile length"). Transposed V instead reads a d-row
// slice of V^T per tile, one run of tile x element bytes per row, rows a whole
// cache apart. Narrower ISAs take the keys that make those runs 512 B
// (TransposedVDecodeTileKeys, runtime/split_kv.h: f32 128, bf16 and int8 256)
// and prefetch the next tile's runs during QK^T. On AVX-512 (`vector_floats`
// 16: P.V over V^T on the QK^T micro-kernel, 16 V^T rows at a time, the next
// 16 rows' heads prefetched) a tv tile is kLongTvTileKeys long -- 8 KiB runs
// of f32, 4 KiB of bf16, which the hardware prefetchers stream -- or as long
// as the rows' S / P fit the workspace's kMaxRows x kDecodeTileKeys: f32 and
// bf16 tv decode_paired kv 16k Hkv 8 68 -> 81% and 73 -> 80% of the paired
// read pass, decode Hkv 32 0.79-0.87x the time (2-core AMD EPYC Zen 5,
// GCC 12.2, 2026-11-28; simd/README.md, "Transposed V: long runs").
// kDecodeTileKeys: the longest decode tile of the other layouts (the
// workspace's S / P and V^T regions). An item's S / P rows are its own tile
// apart: with a 256 stride for every layout, BSHD items (16-64 rows, whose S
// then no longer fits in L1) read 1.07-1.11x slower (simd/README.md,
// "Transposed V: 512-byte runs").
inline constexpr int64_t kDecodeTileKeys = 256;
inline constexpr int64_t kLongTvTileKeys = 2048;
inline constexpr int64_t kLongDecodeTileRows = 4;
constexpr int64_t DecodeTileKeys(KvLayout layout, DType kv, int64_t rows,
                                 int vector_floats) {
  if (layout == KvLayout::kTransposedV) {
    const int64_t runs = TransposedVDecodeTileKeys(kv);
    if (vector_floats != 16) return runs;
    const int64_t fit = kDecodeTileKeys * kMaxRows / (rows > 0 ? rows : 1);
    const int64_t keys =
        fit < kLongTvTileKeys ? fit / 16 * 16 : kLongTvTileKeys;
    return keys > runs ? keys : runs;
  }
  return layout == KvLayout::kBHSD && kv != DType::kI8 &&
                 rows <= kLongDecodeTileRows
             ? 256
             : 128;
}
static_assert(
    DecodeTileKeys(KvLayout::kTransposedV, DType::kI8, 1, 8) <=
        kDecodeTileKeys &&
    DecodeTileKeys(KvLayout::kTransposedV, DType::kF32, 1, 8) == 128 &&
    DecodeTileKeys(KvLayout::kTransposedV, DType::kF32, 4, 16) ==
        kLongTvTileKeys &&
    DecodeTileKeys(KvLayout::kTransposedV, DType::kBF16, 32, 16) == 512 &&
    DecodeTileKeys(KvLayout::kTransposedV, DType::kBF16, kMaxRows, 16) ==
        kDecodeTileKeys &&
    DecodeTileKeys(KvLayout::kTransposedV, DType::kF32, kMaxRows, 16) *
            kMaxRows <=
        kDecodeTileKeys * kMaxRows &&
    DecodeTileKeys(KvLayout::kBHSD, DType::kI8, 4, 16) == 128 &&
    DecodeTileKeys(KvLayout::kBHSD, DType::kBF16, 4, 16) == kDecodeTileKeys &&
    DecodeTileKeys(KvLayout::kBHSD, DType::kF32, 5, 16) == 128 &&
    DecodeTileKeys(KvLayout::kBSHD, DType::kF32, 1, 16) == 128);
// Whether a BSHD decode item of `heads` adjacent kv heads reads each block
// of its K and V rows once in address order before the block's compute
// (ReadAhead, decode_kernel.h) instead of prefetching them: only for a call
// whose K/V stream from DRAM (`kv_from_dram`, DecodeKvStreamsFromDram), on
// the AVX-512 in-place QK^T micro-kernel (`vector_floats` 16, d a multiple
// of it); f32 items, and bf16 items whose rows of one key span at least a
// 4 KiB page (the compute then leaves page-sized gaps in the prefetched
// stream; 2 KiB rows, Hkv 8 at d 128, prefetch: simd/README.md, "BSHD
// decode items"). MakePlan sizes its items by the same rule.
inline constexpr int64_t kBf16ReadAheadRowBytes = 4096;
inline bool BshdItemReadsAhead(const AttentionProblem& p, int64_t heads,
                               int vector_floats, bool kv_from_dram) {
  const DType kv = p.KvDType();
  return kv_from_dram && vector_floats == 16 && heads > 1 &&
         p.layout == KvLayout::kBSHD && p.head_dim % vector_floats == 0 &&
         (kv == DType::kF32 ||
          (kv == DType::kBF16 &&
           heads * p.head_dim * DTypeSize(kv) >= kBf16ReadAheadRowBytes));
}
// Lazy rescale threshold in log2 units (see flash_impl.h).
inline constexpr float kLazyRescaleLog2 = 8.0f;

// head_dim rounded up to 32: a multiple of every vector width (16 f32 lanes,
// 32 bf16 lanes), so padded rows never need a scalar tail.
constexpr int64_t PaddedDim(int64_t d) { return (d + 31) / 32 * 32; }

// Offsets (in floats, each 64-byte aligned) of one thread's workspace.
struct WorkspaceLayout {
  size_t queries = 0;  // the rows' Q, packed for the path
  size_t scores = 0;   // one tile's S (then P)
  size_t out = 0;      // the unnormalized O accumulator
  size_t k_tile = 0;   // K rows widened to f32 (when not read in place)
  size_t v_tile = 0;   // V rows widened to f32 (when not read in place)
  size_t row_max = 0;  // running max m per row (log2 units)
  size_t row_sum = 0;  // running sum l per row
  size_t rescale = 0;  // per row: this tile's alpha = exp2(m_old - m_new)
  size_t zeros = 0;    // kLongTvTileKeys + PaddedDim zeros, never written
  size_t total = 0;    // floats in all
};
WorkspaceLayout ComputeLayout(int64_t head_dim);

// Where a split-KV job writes its partial result (BlockJob::partial): the
// unnormalized O of row r, its running max m (log2 units) and sum l, exactly
// the online softmax's state at the end of the job.
constexpr PartialLayout PartialLayoutFor(int64_t head_dim) {
  return {kMaxRows, PaddedDim(head_dim)};
}

// One work item of sequence `batch`: rows (queries first_query ..
// first_query + queries - 1) x (query heads first_group_head ..
// first_group_head + group_heads - 1 of kv head kv_head's group, i.e. q head
// kv_head * group_size + first_group_head + g), over keys [kv_begin, kv_end)
// (all of the rows' visible keys unless split).
struct BlockJob {
  const AttentionProblem* problem = nullptr;
  const AttentionArgs* args = nullptr;
  int64_t batch = 0;
  int64_t kv_head = 0;
  int64_t first_group_head = 0, group_heads = 1;
  int64_t first_query = 0, queries = 1;
  // kv heads kv_head .. kv_head + kv_heads - 1, each with the rows above
  // (row r = kv head r / (queries * group_heads)); more than one only when
  // queries * group_heads < the vector width (the decode path) and
  // kv_heads * queries * group_heads <= kMaxRows.
  int64_t kv_heads = 1;
  int64_t kv_begin = 0, kv_end = 0;
  float scale_log2e = 1.0f;  // scale * log2(e): logits in log2 units, exp2
  float* partial = nullptr;  // null: write args->out; else PartialLayoutFor
  // The call's K/V outgrow the last-level cache (DecodeKvStreamsFromDram,
  // SimdOptions::read_ahead_above_bytes): decode items of several kv heads
  // read their blocks ahead (decode_kernel.h, Item::read_ahead).
  bool kv_from_dram = false;
  // The call's K/V exceed the cores' private caches (DecodePrefetchesKeys,
  // SimdOptions::prefetch_keys_above_bytes): decode QK^T prefetches the K
  // rows ahead (KeysAhead), and P.V whole f32 V rows (PvWholeRows).
  bool prefetch_keys = true;
  // The call outgrows the last-level cache (OutputStreamsPastCache,
  // SimdOptions::stream_output_above_bytes): the prefill writes its output
  // rows with non-temporal stores (WriteOut, prefill_kernel.h).
  bool stream_out = false;
  // Keys per prefill tile (PrefillTileKeysFor, SimdOptions::
  // prefill_tile_keys): 1..kMaxPrefillTileKeys, 64 or 128 unless forced.
  int64_t prefill_tile = 64;
  int64_t rows() const { return kv_heads * queries * group_heads; }
};

struct KernelOps {
  Isa isa;
  int vector_floats;  // f32 lanes per vector
  int max_rows;       // rows per work item: 4 vectors (<= kMaxRows)
  // ws: a zeroed-at-allocation workspace of ComputeLayout(d).total floats.
  void (*run_block)(const BlockJob& job, float* ws);
};

// The scalar fallback as an xsimd-dispatchable architecture tag: always
// available, lowest version, so xsimd::dispatch ends its walk here.
struct ScalarArch {
  static constexpr bool supported() noexcept { return true; }
  static constexpr bool available() noexcept { return true; }
  static constexpr unsigned version() noexcept { return 0; }
  static constexpr std::size_t alignment() noexcept { return 0; }
  static constexpr bool requires_alignment() noexcept { return false; }
  static constexpr const char* name() noexcept { return "scalar"; }
};

// xsimd::dispatch functor: one explicit specialization per architecture,
// each defined in that architecture's translation unit (xsimd's documented
// pattern), so dispatch.cc itself needs no ISA flags.
struct SelectOps {
  template <class Arch>
  const KernelOps* operator()(Arch) const;
};
template <>
const KernelOps* SelectOps::operator()(xsimd::avx512bw) const;
template <>
const KernelOps* SelectOps::operator()(xsimd::fma3<xsimd::avx2>) const;
template <>
const KernelOps* SelectOps::operator()(ScalarArch) const;

// Per-ISA tables (defined in flash_<isa>.cc).
const KernelOps& Avx512Ops();
const KernelOps& Avx512Bf16Ops();
const KernelOps& Avx512AmxOps();
const KernelOps& Avx2Ops();
const KernelOps& ScalarOps();

// One step of a kernel path, for simd/microkernel_test.cc (XNNPACK's tester
// pattern: each building block against a scalar loop, on every ISA). Each
// runs on the job's rows (in run_block's order: kv head, then query, then
// head) and keys [j0, j0 + nt), nt <= the path's tile (BlockJob::prefill_tile,
// DecodeTileKeys), with `ws` a zeroed workspace as for run_block.
struct TileSteps {
  // scores[r * nt + j] = Q[r] . K[j0 + j] (no scale, no mask).
  void (*qk)(const BlockJob& job, int64_t j0, int64_t nt, float* ws,
             float* scores);
  // out[r * d + e] += sum_j probs[r * nt + j] * V[j0 + j][e].
  void (*pv)(const BlockJob& job, int64_t j0, int64_t nt, const float* probs,
             float* ws, float* out);
};
// One ISA's steps: the prefill path's (lanes = rows; up to KernelOps::
// max_rows rows, one kv head) and the decode path's (lanes = d or keys; up
// to kMaxRows rows). Defined in tile_steps_<isa>.cc, translation units of
// their own (library attnkit_simd_steps, linked by tests only) so that the
// kernels' translation units are compiled exactly as the backend runs them.
struct KernelSteps {
  Isa isa;
  TileSteps prefill, decode;
  // out[i] = the softmax's 2^x[i] as both paths compute it, i < n.
  void (*exp2)(const float* x, int64_t n, float* out);
};
const KernelSteps& ScalarSteps();
const KernelSteps& Avx2Steps();
const KernelSteps& Avx512Steps();
const KernelSteps& Avx512Bf16Steps();
const KernelSteps& Avx512AmxSteps();
// The steps for `isa`, or null when this CPU cannot run it (as OpsFor).
const KernelSteps* StepsFor(Isa isa);

// The ops for `isa`, or null when this CPU cannot run it.
const KernelOps* OpsFor(Isa isa);
// The best ops for this CPU (xsimd::dispatch, then the bf16 refinement).
const KernelOps* BestOps();

}  // namespace attnkit::simd::internal

#endif  // ATTNKIT_SIMD_KERNEL_H_
