// The specialization key of one compiled attention kernel. Plain C++ (no MLIR
// headers) so the backend and the kernel cache can use it cheaply. Dtypes and
// masks are the runtime's own enums: the kernels are specialized on exactly
// the problem's vocabulary, with nothing to translate.
#ifndef ATTNKIT_COMPILED_KERNEL_SPEC_H_
#define ATTNKIT_COMPILED_KERNEL_SPEC_H_

#include "runtime/attention_block.h"
#include "runtime/dtype.h"
#include "runtime/problem.h"
#include "runtime/split_kv.h"
#include "runtime/status.h"

#include <cstdint>
#include <optional>
#include <string>

namespace attnkit::compiled {

/// The tile sizes, in one place: the prefill kernel's query rows per tile
/// and query head (a multiple of the 16 f32 lanes), and the keys per tile of
/// the online-softmax loop (every kernel's but the decode kernels kvTileFor
/// gives longer tiles). Passes.td's option defaults, the kernel specs and
/// the stage dumper's flags all read these.
inline constexpr int64_t kPrefillQueryTile = 16;
inline constexpr int64_t kKvTile = 64;

/// Below this many query rows per sequence the decode kernel (query tile 1)
/// wins: it reads K/V once per query row; the prefill kernel reads them once
/// per 16 rows but pads every tile to 16 rows of work (16x the FLOPs of a
/// decode step, which then stops being bandwidth-bound).
inline constexpr int64_t kDecodeMaxQueries = 4;

/// The prefill kernel's rows per tile (query tile x GQA group) it grows its
/// query tile towards: its register blocks are 4 vectors of 16 rows, and each
/// K/V tile it loads serves all of them. With 16-row tiles MHA (group 1) ran
/// 1.18-1.21x slower than with 64 (S 2048, D 128, 2-core AMD EPYC Zen 5
/// family 26, GCC 12.2 with MLIR/LLVM 22, 2026-11-25).
inline constexpr int64_t kPrefillTileRows = 64;

/// The query tile the backend uses for a problem whose longest query block
/// has `maxQueries` rows and `group` query heads per KV head: 1 (decode),
/// else kPrefillQueryTile doubled while the tile's rows stay within
/// kPrefillTileRows and the longest block fills more than half of it (a
/// short prompt does not pay for 64 padded rows).
inline int64_t queryTileFor(int64_t maxQueries, int64_t group) {
  if (maxQueries < kDecodeMaxQueries)
    return 1;
  int64_t tile = kPrefillQueryTile;
  while (2 * tile * group <= kPrefillTileRows && tile < maxQueries)
    tile *= 2;
  return tile;
}

/// The most query heads of one KV head that one prefill kernel call takes.
/// The vectorizer unrolls its row blocks over them, so compile time grows
/// with the group (S 1024, d 128, f32 prefill: JIT 0.74 s at 8, 1.4 s at 16,
/// 3.6 s at 32; a group of 128 at d <= 9 ~30 s; 2-core Intel Xeon under KVM,
/// GCC 12.2 with MLIR/LLVM 22, 2026-11-27), while 4 heads x 16 queries
/// already fill the 64-row tile (kPrefillTileRows) that the prefill
/// register-blocks; a larger group is run as calls of a divisor of it
/// (prefillGroupFor), each on its slice of the query heads. Decode kernels
/// take the whole group: their K/V stream is read once for all of it.
inline constexpr int64_t kPrefillMaxGroup = 4;
/// Query heads per prefill kernel call for a GQA group of `group`: its
/// largest divisor up to kPrefillMaxGroup (1 for a prime above it).
inline int64_t prefillGroupFor(int64_t group) {
  for (int64_t g = group < kPrefillMaxGroup ? group : kPrefillMaxGroup; g > 1;
       --g)
    if (group % g == 0)
      return g;
  return 1;
}
/// Query heads per kernel call (KernelSpec::group) for a problem whose
/// longest query block has `maxQueries` rows and `group` query heads per KV
/// head: the whole group for a decode kernel, prefillGroupFor's slice else.
inline int64_t callGroupFor(int64_t maxQueries, int64_t group) {
  return maxQueries < kDecodeMaxQueries ? group : prefillGroupFor(group);
}
/// Keys per tile of the kernel whose query tile is `queryTile` (1: decode)
/// over a `layout` cache of `kv` elements: a decode over a transposed V
/// reads, per tile, a run of each of the d Vᵀ rows, rows a whole cache
/// apart, and takes longer tiles than kKvTile's 64 keys (at 64 a bf16 run is
/// 128 B, and short runs a cache apart stream slowly): f32 128 keys (512 B
/// runs, TransposedVDecodeTileKeys), bf16 and int8 kNarrowTvDecodeTile (1 KiB
/// and 512 B runs; their per-tile work -- the softmax, one transposing
/// reduction per block of Vᵀ rows -- weighs more against their cheaper
/// loads). 512 against 256 keys, 5-6 interleaved rounds: decode_paired tv
/// bf16 Hkv 8 0.866x and 0.935x the time, decode_paired_kv int8 with q f32 /
/// bf16 0.976x / 0.828x, decode kv 4k bf16 Hkv 8 0.80x, the Hkv 32 rows
/// 0.93-1.02x; f32 at 256 or 512 gained nothing, at 2048 (simd's AVX-512
/// tiles) no dtype did (2-core AMD EPYC Zen 5, MLIR/LLVM 22, 2026-11-28;
/// README.md, the transposed V decode). Every other kernel kKvTile.
inline constexpr int64_t kNarrowTvDecodeTile = 512;
inline int64_t kvTileFor(int64_t queryTile, KvLayout layout, DType kv) {
  if (queryTile != 1 || layout != KvLayout::kTransposedV)
    return kKvTile;
  return kv == DType::kF32 ? TransposedVDecodeTileKeys(kv)
                           : kNarrowTvDecodeTile;
}

/// Everything the generated code is specialized on. Sequence lengths, strides,
/// the causal offset, the window width and the scale are run-time arguments:
/// a new length never recompiles, beyond picking one of a shape's few query
/// tiles (decode; prefill 16, 32 or 64 rows: queryTileFor).
struct KernelSpec {
  int64_t headDim = 64;
  /// Storage of Q (and of K/V unless kvElem says otherwise).
  DType elem = DType::kF32;
  /// K/V storage when it differs from Q's, as AttentionProblem::kv_dtype:
  /// only kI8 (int8 rows, one f32 scale per token: the kernel takes the
  /// scale vectors and folds them into the logits and P). Unset: `elem`.
  std::optional<DType> kvElem = std::nullopt;
  MaskKind mask = MaskKind::kNone;
  /// V stored as [head_dim, seq] (seq stride 1), the "transposed V" layout.
  bool vTransposed = false;
  /// Query heads per call, all of one KV head: the GQA group (1 = MHA) for
  /// a decode kernel, a divisor of it for a prefill kernel (callGroupFor).
  int64_t group = 1;
  /// Query rows per tile and query head: a multiple of kPrefillQueryTile
  /// selects the prefill micro-kernel (queryTileFor), 1 the decode kernel that
  /// streams K/V rows (see vectorize_flash_pass.cc).
  int64_t queryTile = kPrefillQueryTile;
  /// QKᵀ on AVX512_BF16's vdpbf16ps (bf16 Q and K only): code for CPUs that
  /// have it. specFor sets it when the CPU running it does; a spec asking for
  /// it elsewhere is refused (CompiledKernel::compile), never executed.
  bool bf16Dot = false;
  /// The kernel takes a band of adjacent KV heads (their number a run-time
  /// value, the memrefs' new leading dimension; see buildAttention) instead
  /// of one. The decode kernel then walks each KV tile head by head, so a
  /// BSHD cache's position rows are read whole, not a head's slice of every
  /// row over the whole sequence (vectorize_flash_pass.cc).
  bool headed = false;
  /// A decode kernel reads its K and V rows once, in address order, before
  /// their compute instead of prefetching them: a kernel of one KV head each
  /// KV tile's, a headed kernel each 16 keys' (specFor: K/V of a call larger
  /// than the last-level cache, DecodeKvStreamsFromDram in
  /// runtime/split_kv.h; f32 for one head, f32 or bf16 headed).
  bool readAhead = false;
  /// Keys per tile of the online-softmax loop (kvTileFor).
  int64_t kvTile = kKvTile;

  std::string key() const {
    // Appends rather than operator+ chains: GCC 12 -Wrestrict false positive.
    std::string k = "d";
    k += std::to_string(headDim);
    k += '_';
    k += DTypeName(elem);
    if (kvElem) {
      k += "_kv";
      k += DTypeName(*kvElem);
    }
    k += '_';
    k += MaskKindName(mask);
    k += vTransposed ? "_vt_g" : "_v_g";
    k += std::to_string(group);
    if (queryTile != kPrefillQueryTile) {
      k += "_q";
      k += std::to_string(queryTile);
    }
    if (bf16Dot)
      k += "_bf16dot";
    if (headed)
      k += "_heads";
    if (readAhead)
      k += "_ra";
    if (kvTile != kKvTile) {
      k += "_k";
      k += std::to_string(kvTile);
    }
    return k;
  }
  /// K/V's storage dtype.
  DType kvDType() const { return kvElem.value_or(elem); }
  bool quantizedKv() const { return kvDType() == DType::kI8; }
  /// Whether bf16Dot can apply to this spec: Q and K both bf16.
  bool bf16DotApplies() const {
    return elem == DType::kBF16 && kvDType() == DType::kBF16;
  }
  bool operator==(const KernelSpec &) const = default;
};

/// The specialization of one compiled KV-append kernel: it copies the new
/// tokens of one (batch, kv head) into the cache, in the cache's layout.
struct AppendSpec {
  int64_t headDim = 64;
  DType elem = DType::kF32;
  /// Cache layout: unit stride along head_dim (BHSD, BSHD and K of
  /// transposed-V), along the sequence (V of transposed-V), or neither.
  enum class Unit { kDim, kSeq, kNone };
  Unit cacheUnit = Unit::kDim;
  /// New tokens: unit stride along head_dim (the usual case) or any strides.
  bool tokensDimUnit = true;

  std::string key() const {
    static constexpr const char *kUnit[] = {"dim", "seq", "none"};
    std::string k = "append_d";
    k += std::to_string(headDim);
    k += '_';
    k += DTypeName(elem);
    k += "_cache_";
    k += kUnit[static_cast<int>(cacheUnit)];
    k += tokensDimUnit ? "_tok_dim" : "_tok_none";
    return k;
  }
  bool operator==(const AppendSpec &) const = default;
};

/// The specialization of one compiled attention block (seed 000's
/// Megatron-style listing, see buildAttentionBlock): X f32, the weights in
/// `weight`, the KV cache f32. The number of KV heads (the band of heads one
/// call covers), the hidden size, the sequence lengths and every stride are
/// run-time values.
struct BlockSpec {
  int64_t headDim = 64;
  int64_t group = 1;
  DType weight = DType::kF32;
  MaskKind mask = MaskKind::kNone; // none, causal or window
  bool vTransposed = false;
  bool qkvBias = false;
  bool outputProjection = false;
  /// The flash rewrite's query tile inside the head loop (as KernelSpec's).
  int64_t queryTile = kPrefillQueryTile;
  /// Tokens per sequence when every sequence has the same small number (a
  /// decode step: 1); 0 = a run-time length. A static count makes every
  /// intermediate statically shaped, so it lives on the stack: the decode
  /// kernel allocates nothing.
  int64_t tokens = 0;

  std::string key() const {
    std::string k = "block_d";
    k += std::to_string(headDim);
    k += "_g";
    k += std::to_string(group);
    k += "_w";
    k += DTypeName(weight);
    k += '_';
    k += MaskKindName(mask);
    k += vTransposed ? "_vt" : "_v";
    k += qkvBias ? "_bias" : "";
    k += outputProjection ? "_wo" : "";
    if (queryTile != kPrefillQueryTile) {
      k += "_q";
      k += std::to_string(queryTile);
    }
    if (tokens > 0) {
      k += "_s";
      k += std::to_string(tokens);
    }
    return k;
  }
  bool operator==(const BlockSpec &) const = default;
};

/// The block kernel a (validated) block problem needs, or Unimplemented for
/// what the compiled block does not take (an additive attention bias).
inline StatusOr<BlockSpec> blockSpecFor(const AttentionBlockProblem &p) {
  const AttentionProblem &a = p.attention;
  if (a.mask == MaskKind::kBias)
    return Status::Unimplemented(
        "compiled: the attention block takes no additive attention bias "
        "(mask=bias)");
  BlockSpec s;
  s.headDim = a.head_dim;
  s.group = a.group_size();
  s.weight = p.weight_dtype;
  s.mask = a.mask;
  s.vTransposed = a.layout == KvLayout::kTransposedV;
  s.qkvBias = p.qkv_bias;
  s.outputProjection = p.output_projection;
  int64_t maxQ = 0;
  for (int64_t q : a.q_lens)
    maxQ = q > maxQ ? q : maxQ;
  s.queryTile = queryTileFor(maxQ, s.group);
  // A decode step (one new token in every non-empty sequence) gets the
  // kernel specialized on it.
  bool single = maxQ == 1;
  for (int64_t q : a.q_lens)
    single = single && (q == 1 || q == 0);
  s.tokens = single ? 1 : 0;
  return s;
}

} // namespace attnkit::compiled

#endif // ATTNKIT_COMPILED_KERNEL_SPEC_H_
