// Run-time ISA choice. Compiled with the project's common flags: it only
// reads CPUID (through xsimd) and calls into the per-ISA translation units.
#include "runtime/cpu_features.h"
#include "simd/kernel.h"

namespace attnkit::simd {

namespace internal {

WorkspaceLayout ComputeLayout(int64_t head_dim) {
  const size_t dp = static_cast<size_t>(PaddedDim(head_dim));
  const size_t rows = kMaxRows;
  WorkspaceLayout L;
  size_t at = 0;
  auto take = [&](size_t n) {
    const size_t off = at;
    at += (n + 15) / 16 * 16;  // keep every region 64-byte aligned
    return off;
  };
  L.queries = take(rows * dp);
  // S^T of the prefill path [kMaxPrefillTileKeys][rows], or S of the decode
  // path [rows][tile] (up to kMaxRows rows when a job spans kv heads; a long
  // transposed-V tile only for rows x tile within kMaxRows x kDecodeTileKeys:
  // DecodeTileKeys).
  L.scores = take(static_cast<size_t>(kMaxPrefillTileKeys > kDecodeTileKeys
                                          ? kMaxPrefillTileKeys
                                          : kDecodeTileKeys) *
                  rows);
  L.out = take(dp * rows);
  L.k_tile = take(static_cast<size_t>(kMaxPrefillTileKeys) * dp);
  L.v_tile = take(static_cast<size_t>(kDecodeTileKeys) * dp);
  L.row_max = take(rows);
  L.row_sum = take(rows);
  L.rescale = take(rows);
  L.zeros = take(static_cast<size_t>(kLongTvTileKeys) + dp);
  L.total = at;
  return L;
}

const KernelOps* OpsFor(Isa isa) {
  const auto cpu = xsimd::available_architectures();
  switch (isa) {
    case Isa::kScalar:
      return &ScalarOps();
    case Isa::kAvx2:
      return cpu.fma3_avx2 ? &Avx2Ops() : nullptr;
    case Isa::kAvx512:
      return cpu.avx512bw ? &Avx512Ops() : nullptr;
    case Isa::kAvx512Bf16:
      return cpu.avx512bw && CpuHasAvx512Bf16() ? &Avx512Bf16Ops() : nullptr;
    case Isa::kAvx512Amx:
      return cpu.avx512bw && CpuHasAmxBf16() ? &Avx512AmxOps() : nullptr;
  }
  return nullptr;
}

const KernelOps* BestOps() {
  static const KernelOps* const best = xsimd::dispatch<
      xsimd::arch_list<xsimd::avx512bw, xsimd::fma3<xsimd::avx2>, ScalarArch>>(
      SelectOps{})();
  return best;
}

}  // namespace internal

std::vector<Isa> AvailableIsas() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16,
                  Isa::kAvx512Amx}) {
    if (internal::OpsFor(isa) != nullptr) isas.push_back(isa);
  }
  return isas;
}

Isa BestIsa() { return internal::BestOps()->isa; }

}  // namespace attnkit::simd
