// The specialization key of one compiled attention kernel. Plain C++ (no MLIR
// headers) so the backend and the kernel cache can use it cheaply. Dtypes and
// masks are the runtime's own enums: the kernels are specialized on exactly
// the problem's vocabulary, with nothing to translate.
#ifndef ATTNKIT_COMPILED_KERNEL_SPEC_H_
#define ATTNKIT_COMPILED_KERNEL_SPEC_H_

#include "runtime/dtype.h"
#include "runtime/problem.h"

#include <cstdint>
#include <string>

namespace attnkit::compiled {

/// The tile sizes, in one place: the prefill kernel's query rows per tile
/// and query head (a multiple of the 16 f32 lanes), and the keys per tile of
/// the online-softmax loop. Passes.td's option defaults, the JIT's options
/// and the stage dumper's flags all read these.
inline constexpr int64_t kPrefillQueryTile = 16;
inline constexpr int64_t kKvTile = 64;

/// Below this many query rows per sequence the decode kernel (query tile 1)
/// wins: it reads K/V once per query row; the prefill kernel reads them once
/// per 16 rows but pads every tile to 16 rows of work (16x the FLOPs of a
/// decode step, which then stops being bandwidth-bound).
inline constexpr int64_t kDecodeMaxQueries = 4;

/// The query tile the backend uses for a problem whose longest query block
/// has `maxQueries` rows.
inline int64_t queryTileFor(int64_t maxQueries) {
  return maxQueries < kDecodeMaxQueries ? 1 : kPrefillQueryTile;
}

/// Everything the generated code is specialized on. Sequence lengths, strides,
/// the causal offset, the window width and the scale are run-time arguments:
/// a new length never recompiles.
struct KernelSpec {
  int64_t headDim = 64;
  DType elem = DType::kF32;
  MaskKind mask = MaskKind::kNone;
  /// V stored as [head_dim, seq] (seq stride 1), the "transposed V" layout.
  bool vTransposed = false;
  /// Query heads sharing one KV head (GQA); 1 = MHA.
  int64_t group = 1;
  /// Query rows per tile and query head: kPrefillQueryTile selects the
  /// prefill micro-kernel, 1 the decode kernel that streams K/V rows (see
  /// vectorize_flash_pass.cc).
  int64_t queryTile = kPrefillQueryTile;

  std::string key() const {
    // Appends rather than operator+ chains: GCC 12 -Wrestrict false positive.
    std::string k = "d";
    k += std::to_string(headDim);
    k += '_';
    k += DTypeName(elem);
    k += '_';
    k += MaskKindName(mask);
    k += vTransposed ? "_vt_g" : "_v_g";
    k += std::to_string(group);
    if (queryTile != kPrefillQueryTile) {
      k += "_q";
      k += std::to_string(queryTile);
    }
    return k;
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

} // namespace attnkit::compiled

#endif // ATTNKIT_COMPILED_KERNEL_SPEC_H_
