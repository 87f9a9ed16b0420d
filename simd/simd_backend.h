// Backend 3: hand-written FlashAttention-style prefill and decode kernels
// (online softmax over KV tiles, no
// S x S buffer) and in-place KV append, vectorized with xsimd per ISA (chosen
// at run time) and parallelized with OpenMP.
#ifndef ATTNKIT_SIMD_SIMD_BACKEND_H_
#define ATTNKIT_SIMD_SIMD_BACKEND_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "runtime/backend.h"
#include "runtime/cpu_features.h"
#include "runtime/enum_table.h"

namespace attnkit::simd {

// The kernel families. kAvx512Bf16 is AVX-512 plus vdpbf16ps for the QK^T
// dot products of bf16 storage; kAvx512Amx is AVX-512 plus AMX tiles for the
// prefill path's bf16 QK^T (everything else as kAvx512).
enum class Isa : uint8_t {
  kScalar = 0,
  kAvx2,
  kAvx512,
  kAvx512Bf16,
  kAvx512Amx
};
inline constexpr auto kIsaNames = MakeEnumTable<Isa>({
    {Isa::kScalar, "scalar"},
    {Isa::kAvx2, "avx2"},
    {Isa::kAvx512, "avx512"},
    {Isa::kAvx512Bf16, "avx512bf16"},
    {Isa::kAvx512Amx, "avx512amx"},
});
static_assert(kIsaNames.RoundTrips());
inline std::string_view IsaName(Isa isa) { return kIsaNames.Name(isa); }

// Every ISA this CPU can run, scalar first.
std::vector<Isa> AvailableIsas();
// What MakeSimdBackend() picks on this CPU.
Isa BestIsa();

struct SimdOptions {
  // Unset: the best ISA of the running CPU. Set to an ISA the CPU lacks:
  // MakeSimdBackend returns a backend whose every call fails with
  // FAILED_PRECONDITION (never an illegal instruction).
  std::optional<Isa> isa;
  int num_threads = 0;  // 0: omp_get_max_threads()
  // Split-KV (flash-decoding): 0 decides from the work-item count and the
  // thread count; n >= 1 forces n splits per work item (tests).
  int force_kv_splits = 0;
  // Decode items of several kv heads (BSHD) over f32 K/V larger than this
  // (bf16: see BshdItemReadsAhead in kernel.h) read each block ahead
  // instead of prefetching it
  // (DecodeKvStreamsFromDram, runtime/split_kv.h; ReadAhead in
  // decode_kernel.h). Tests set 1 to run those paths on small shapes.
  int64_t read_ahead_above_bytes = LastLevelCacheBytes();
  // Decode calls whose K/V exceed this many bytes prefetch the K rows ahead
  // of QK^T (DecodePrefetchesKeys, runtime/split_kv.h; 0: always).
  int64_t prefetch_keys_above_bytes = PrivateCacheBytes();
  // Calls whose Q, K, V and output together exceed this many bytes
  // (OutputStreamsPastCache, runtime/split_kv.h; 0: none) write their
  // prefill output rows with non-temporal stores where a row is aligned to
  // the vector. Tests set 1 to run that path on small shapes.
  int64_t stream_output_above_bytes = LastLevelCacheBytes();
  // Keys per prefill tile: 0 decides from the L1 data cache
  // (PrefillTileKeysFor in simd/kernel.h: 128 with 48 KiB or more, else
  // 64); 1..128 forces it (tests, measurements). Anything else: every call
  // fails with INVALID_ARGUMENT.
  int64_t prefill_tile_keys = 0;
};

// The backend owns per-thread workspaces, grown on first use of a shape and
// reused after (the decode path never allocates once warm). One backend
// object serves one caller at a time; it parallelizes internally.
std::unique_ptr<Backend> MakeSimdBackend();
std::unique_ptr<Backend> MakeSimdBackend(const SimdOptions& options);

}  // namespace attnkit::simd

#endif  // ATTNKIT_SIMD_SIMD_BACKEND_H_
