// AMX tiles for bf16 QK^T (the avx512amx kernels, built with -mamx-tile
// -mamx-bf16): the tile configuration and the one product both paths use.
// tdpbf16ps C[m][n] += sum_k A[m][2k] B[k][2n] + A[m][2k+1] B[k][2n+1]: with
// A = 16 K rows of 32 bf16 (read in place, any row stride) and B = 16 pairs
// of Q^T for n rows (Q^T pairs [d/2][rows][2]), C[key][row] holds S^T.
// Products of bf16 are exact in f32 and the sums f32, as vdpbf16ps; the tile
// unit flushes denormal inputs and results to zero (|error| < 2^-126 per
// product).
//
// Include ONLY from the kernel headers (see simd/isa.h: everything here
// lives in the per-ISA namespace ATTNKIT_SIMD_NS).
#ifndef ATTNKIT_SIMD_NS
#error "define ATTNKIT_SIMD_NS before including simd/amx.h"
#endif

#ifndef ATTNKIT_SIMD_AMX_H_
#define ATTNKIT_SIMD_AMX_H_

#include <cstdint>

#if defined(__AMX_BF16__)
#include <immintrin.h>
#endif

namespace attnkit::simd::internal::ATTNKIT_SIMD_NS {
namespace {

#if defined(__AMX_BF16__)
inline constexpr bool kAmx = true;
#else
inline constexpr bool kAmx = false;
#endif

// Tiles: 0 C, 1 A, 2 .. 2 + kAmxQBlocks the Q^T blocks of 32 values of d
// (d <= 192 keeps a row group's in tiles).
inline constexpr int kAmxQBlocks = 6;

// The tile configuration, loaded for the life of a work item (or a test's
// QkTile call) that takes an AMX path and released at its end, so no thread
// keeps tile state between calls. Loaded per QK^T call instead (up to 8 runs
// of keys per tile on a causal diagonal), the load and release cost ~230-320
// TSC ticks on the Xeon host, next to ~2000 for the tile products of a
// 64-row x 128-key prefill tile. `cols`: the rows of Q per tile product (C's
// and B's columns), up to 16.
struct AmxTiles {
  bool on;
  AmxTiles(bool use, int64_t cols) : on(kAmx && use) {
#if defined(__AMX_BF16__)
    if (!on) return;
    alignas(64) unsigned char config[64] = {};
    config[0] = 1;  // palette 1: 8 tiles of up to 16 rows x 64 bytes
    for (int t = 0; t < 2 + kAmxQBlocks; ++t) {
      const auto bytes = static_cast<uint16_t>(t == 1 ? 64 : cols * 4);
      config[16 + 2 * t] = static_cast<unsigned char>(bytes);  // bytes a row
      config[16 + 2 * t + 1] = static_cast<unsigned char>(bytes >> 8);
      config[48 + t] = 16;  // rows
    }
    _tile_loadconfig(config);
#else
    (void)cols;
#endif
  }
  ~AmxTiles() {
#if defined(__AMX_BF16__)
    if (on) _tile_release();
#endif
  }
  AmxTiles(const AmxTiles&) = delete;
  AmxTiles& operator=(const AmxTiles&) = delete;
};

#if defined(__AMX_BF16__)
// The tile operands below are literal numbers, one case per tile: GCC's
// intrinsics paste them into the instruction's text (without optimization,
// `%tmm` followed by whatever expression was given).

// Q^T blocks b < nb (nb <= kAmxQBlocks) into tiles 2 + b: block b at
// q + b * block (uint16 elements), its 16 pair rows `stride` bytes apart.
inline void AmxLoadQ(const uint16_t* q, int64_t block, int64_t stride,
                     int64_t nb) {
  for (int64_t b = 0; b < nb; ++b) {
    const uint16_t* src = q + b * block;
    switch (b) {
      case 0:
        _tile_loadd(2, src, stride);
        break;
      case 1:
        _tile_loadd(3, src, stride);
        break;
      case 2:
        _tile_loadd(4, src, stride);
        break;
      case 3:
        _tile_loadd(5, src, stride);
        break;
      case 4:
        _tile_loadd(6, src, stride);
        break;
      default:
        _tile_loadd(7, src, stride);
        break;
    }
  }
}

// C = 16 K rows from k (rows `kstride` bytes apart) times Q^T: with
// `resident`, blocks b < nb in tiles 2 + b (AmxLoadQ); otherwise each block
// loaded into tile 2 from q + b * block (rows `qstride` bytes apart) before
// its product. C is left in tile 0.
inline void AmxKeyBlock(const uint16_t* k, int64_t kstride, int64_t nb,
                        bool resident, const uint16_t* q, int64_t block,
                        int64_t qstride) {
  _tile_zero(0);
  for (int64_t b = 0; b < nb; ++b) {
    _tile_loadd(1, k + b * 32, kstride);
    if (!resident) {
      _tile_loadd(2, q + b * block, qstride);
      _tile_dpbf16ps(0, 1, 2);
      continue;
    }
    switch (b) {
      case 0:
        _tile_dpbf16ps(0, 1, 2);
        break;
      case 1:
        _tile_dpbf16ps(0, 1, 3);
        break;
      case 2:
        _tile_dpbf16ps(0, 1, 4);
        break;
      case 3:
        _tile_dpbf16ps(0, 1, 5);
        break;
      case 4:
        _tile_dpbf16ps(0, 1, 6);
        break;
      default:
        _tile_dpbf16ps(0, 1, 7);
        break;
    }
  }
}

// The last nk < 16 K rows of d values from k (ks apart) into `pad` as 16
// rows of d, zero past nk: so a tile load reads no row past the keys.
inline void AmxPadKeys(const uint16_t* k, int64_t ks, int64_t nk, int64_t d,
                       uint16_t* pad) {
  for (int64_t kk = 0; kk < 16; ++kk)
    for (int64_t e = 0; e < d; ++e)
      pad[kk * d + e] = kk < nk ? k[kk * ks + e] : uint16_t{0};
}
#endif

}  // namespace
}  // namespace attnkit::simd::internal::ATTNKIT_SIMD_NS

#endif  // ATTNKIT_SIMD_AMX_H_
