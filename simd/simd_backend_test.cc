#include "simd/simd_backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "harness/test_support.h"
#include "runtime/backend.h"
#include "runtime/enum_table_testing.h"
#include "runtime/random.h"

// GCC pairs the replaced operator new with free() below and warns; the pair
// is correct (both sides are malloc/free), so the warning is off here only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

// Counting global allocation functions: the decode-path test asserts that a
// warmed-up backend allocates nothing.
namespace {
std::atomic<int64_t> g_allocations{0};
}  // namespace

void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void* operator new(std::size_t n, std::align_val_t al) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  const std::size_t a = static_cast<std::size_t>(al);
  if (void* p = std::aligned_alloc(a, (n + a - 1) / a * a)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t al) {
  return operator new(n, al);
}
// The nothrow forms too: libstdc++'s forward to the replaced ones above, but
// ASan's do not, and a block of theirs reaching the free() below is an
// alloc-dealloc mismatch (LLVM, linked in through the registry, pairs a
// nothrow aligned new with a sized aligned delete at static initialization).
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n == 0 ? 1 : n);
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept {
  return operator new(n, t);
}
void* operator new(std::size_t n, std::align_val_t al,
                   const std::nothrow_t&) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  const std::size_t a = static_cast<std::size_t>(al);
  return std::aligned_alloc(a, (n + a - 1) / a * a);
}
void* operator new[](std::size_t n, std::align_val_t al,
                     const std::nothrow_t& t) noexcept {
  return operator new(n, al, t);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete(void* p, std::align_val_t,
                     const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::align_val_t,
                       const std::nothrow_t&) noexcept {
  std::free(p);
}

namespace attnkit::simd {
namespace {

using harness::CheckResult;
using harness::testing::ExpectMatchesOracle;

// A seeded random problem covering every feature: ragged batches with empty
// sequences, GQA/MQA, odd head dims, every mask, dtype and layout, lengths
// around the tile sizes (64, 128) and the row block (64 rows).
AttentionProblem RandomProblem(Rng& rng) {
  AttentionProblem p;
  p.batch = rng.Range(1, 3);
  p.kv_heads = rng.Range(1, 3);
  const int64_t groups[] = {1, 1, 2, 3, 4, 5, 8, 16};
  p.q_heads = p.kv_heads * groups[rng.Below(8)];
  const int64_t dims[] = {1, 3, 8, 16, 17, 31, 32, 48, 64, 80, 96, 128};
  p.head_dim = dims[rng.Below(12)];
  p.mask = static_cast<MaskKind>(rng.Below(4));
  p.dtype = rng.Bernoulli(0.5) ? DType::kF32 : DType::kBF16;
  p.layout = static_cast<KvLayout>(rng.Below(3));
  if (rng.Bernoulli(0.2)) p.scale = rng.Uniform(-0.5f, 0.5f) + 0.01f;
  const bool big = rng.Bernoulli(0.2);
  p.q_lens.clear();
  p.kv_lens.clear();
  for (int64_t b = 0; b < p.batch; ++b) {
    int64_t kv = big ? rng.Range(150, 600) : rng.Range(0, 80);
    if (rng.Bernoulli(0.1)) kv = 0;
    int64_t q = rng.Bernoulli(0.4) ? std::min<int64_t>(1, kv + 1)
                                   : rng.Range(0, big ? 70 : 20);
    if (rng.Bernoulli(0.1)) q = 0;
    if (p.mask == MaskKind::kCausal || p.mask == MaskKind::kWindow)
      q = std::min(q, kv);
    p.q_lens.push_back(q);
    p.kv_lens.push_back(kv);
  }
  if (p.mask == MaskKind::kWindow) p.window = rng.Range(1, 90);
  if (rng.Bernoulli(0.2)) p.kv_dtype = DType::kI8;
  return p;
}

class SimdIsaTest : public ::testing::TestWithParam<Isa> {
 protected:
  std::unique_ptr<Backend> Make(
      int force_splits = 0, int threads = 0,
      int64_t read_ahead_above_bytes = LastLevelCacheBytes()) {
    SimdOptions o;
    o.isa = GetParam();
    o.force_kv_splits = force_splits;
    o.num_threads = threads;
    o.read_ahead_above_bytes = read_ahead_above_bytes;
    // Forcing the DRAM paths forces the K prefetch too.
    if (read_ahead_above_bytes == 1) o.prefetch_keys_above_bytes = 1;
    return MakeSimdBackend(o);
  }
};

TEST_P(SimdIsaTest, RandomSweepMatchesOracle) {
  auto backend = Make();
  Rng rng(0x5eed, static_cast<uint64_t>(GetParam()));
  for (int c = 0; c < 40; ++c) {
    const AttentionProblem p = RandomProblem(rng);
    ASSERT_TRUE(p.Validate().ok()) << p.ToString();
    ExpectMatchesOracle(*backend, p, 1000 + c, ValueProfile::kNormal,
                        rng.Bernoulli(0.3) ? rng.Range(1, 40) : 0);
    if (HasFatalFailure() || HasFailure()) return;
  }
}

TEST_P(SimdIsaTest, AdversarialProfiles) {
  auto backend = Make();
  for (int prof = 1; prof < kNumValueProfiles; ++prof) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
      for (MaskKind mask :
           {MaskKind::kNone, MaskKind::kCausal, MaskKind::kBias}) {
        // Tile edges: 513 = 4 * 128 + 1 (decode tiles), 65 = 64 + 1.
        AttentionProblem p;
        p.batch = 2;
        p.q_heads = 4;
        p.kv_heads = 2;
        p.head_dim = 32;
        p.dtype = dt;
        p.mask = mask;
        p.q_lens = {17, 1};
        p.kv_lens = {130, 513};
        ExpectMatchesOracle(*backend, p, 77 + prof,
                            static_cast<ValueProfile>(prof));
        p.q_lens = {20, 0};  // 40 rows: the prefill path; one empty sequence
        p.kv_lens = {129, 65};
        p.layout = KvLayout::kTransposedV;
        ExpectMatchesOracle(*backend, p, 99 + prof,
                            static_cast<ValueProfile>(prof));
      }
    }
  }
}

TEST_P(SimdIsaTest, SplitKvMergeMatchesOracle) {
  Rng rng(0x5b1, static_cast<uint64_t>(GetParam()));
  for (int splits : {2, 3, 7}) {
    auto backend = Make(splits);
    for (int c = 0; c < 12; ++c) {
      const AttentionProblem p = RandomProblem(rng);
      ExpectMatchesOracle(*backend, p, 500 + c);
      if (HasFailure()) return;
    }
  }
}

// The prefill tile comes from the L1 data cache (64 or 128 keys) unless
// forced: both sizes, and one that is not a multiple of any vector width,
// over random problems (prefill rows against tiles, tails, masks, layouts,
// int8) and a causal GQA prefill whose keys end part way into a tile.
TEST_P(SimdIsaTest, PrefillTileSizesMatchOracle) {
  for (int64_t tile : {int64_t{64}, int64_t{128}, int64_t{40}}) {
    SimdOptions o;
    o.isa = GetParam();
    o.prefill_tile_keys = tile;
    auto backend = MakeSimdBackend(o);
    Rng rng(0x711e, static_cast<uint64_t>(tile));
    for (int c = 0; c < 8; ++c) {
      const AttentionProblem p = RandomProblem(rng);
      ExpectMatchesOracle(*backend, p, 300 + c);
      if (HasFailure()) return;
    }
    AttentionProblem p;
    p.q_heads = 8;
    p.kv_heads = 2;
    p.head_dim = 64;
    p.mask = MaskKind::kCausal;
    p.q_lens = {70};
    p.kv_lens = {301};
    ExpectMatchesOracle(*backend, p, 17);
    if (HasFailure()) return;
  }
}

// Output rows written past the caches (forced: every call streams): random
// problems, and prefills whose output rows are aligned to the vector
// (streamed) or not (padded rows: stored), head-major and token-major, with
// a d tail past the last whole vector, causal and not, f32 and bf16.
TEST_P(SimdIsaTest, StreamedOutputMatchesOracle) {
  SimdOptions o;
  o.isa = GetParam();
  o.stream_output_above_bytes = 1;
  auto backend = MakeSimdBackend(o);
  Rng rng(0x57e4, static_cast<uint64_t>(GetParam()));
  for (int c = 0; c < 8; ++c) {
    const AttentionProblem p = RandomProblem(rng);
    ExpectMatchesOracle(*backend, p, 400 + c);
    if (HasFailure()) return;
  }
  for (int64_t d : {int64_t{128}, int64_t{40}}) {
    for (int64_t pad : {int64_t{0}, int64_t{3}}) {
      for (bool token_major : {false, true}) {
        harness::Case c;
        c.seed = static_cast<uint64_t>(d + pad);
        c.problem.batch = 2;
        c.problem.q_heads = 8;
        c.problem.kv_heads = 2;
        c.problem.head_dim = d;
        c.problem.mask = pad == 0 ? MaskKind::kCausal : MaskKind::kNone;
        c.problem.dtype = token_major ? DType::kBF16 : DType::kF32;
        c.problem.q_lens = {70, 33};
        c.problem.kv_lens = {150, 33};
        c.io.out.pad = pad;
        c.io.out.token_major = token_major;
        const CheckResult r = harness::testing::RunOne(c, *backend);
        EXPECT_EQ(harness::OutcomeName(r.outcome),
                  harness::OutcomeName(harness::Outcome::kPass))
            << c.ToString() << "\n"
            << r.message;
      }
    }
  }
}

// A forced prefill tile outside 1..kMaxPrefillTileKeys: every call fails
// with INVALID_ARGUMENT naming the option and its value (nothing runs).
TEST(SimdOptionsTest, PrefillTileOutOfRangeIsAnError) {
  for (int64_t tile : {int64_t{-1}, int64_t{129}, int64_t{4096}}) {
    SimdOptions o;
    o.prefill_tile_keys = tile;
    auto backend = MakeSimdBackend(o);
    AttentionProblem p;
    const Status s = backend->Supports(p);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("prefill_tile_keys=" + std::to_string(tile)),
              std::string::npos)
        << s.ToString();
  }
  SimdOptions o;
  o.prefill_tile_keys = 128;
  EXPECT_TRUE(MakeSimdBackend(o)->Supports(AttentionProblem{}).ok());
}

TEST_P(SimdIsaTest, DecodeShapesAllLayoutsAndDtypes) {
  auto backend = Make();
  for (KvLayout layout :
       {KvLayout::kBHSD, KvLayout::kBSHD, KvLayout::kTransposedV}) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
      for (int64_t d : {64, 128, 40}) {
        AttentionProblem p;
        p.batch = 2;
        p.q_heads = 8;
        p.kv_heads = 2;
        p.head_dim = d;
        p.dtype = dt;
        p.layout = layout;
        p.mask = MaskKind::kCausal;
        p.q_lens = {1, 1};
        p.kv_lens = {1030, 255};
        ExpectMatchesOracle(*backend, p, 3, ValueProfile::kNormal, 100);
      }
    }
  }
}

// bf16 prefill and decode over head dims that the AMX paths (avx512amx)
// take with their Q^T blocks kept in tiles (d <= 192), that prefill reloads
// per key block and decode leaves to the widened path (224, 256), or that
// neither takes (80: d % 32 != 0), and key runs that end part way into a
// block of 16 keys (kv 17, 200; the causal and windowed diagonals cut runs
// at every row vector): every ISA, against the oracle.
TEST_P(SimdIsaTest, Bf16HeadDimsAndKeyTails) {
  auto backend = Make();
  const int64_t dims[] = {32, 64, 96, 128, 192, 224, 256, 80};
  const MaskKind masks[] = {MaskKind::kNone, MaskKind::kCausal,
                            MaskKind::kWindow};
  for (int i = 0; i < 8; ++i) {
    for (MaskKind mask : masks) {
      AttentionProblem p;
      p.batch = 2;
      p.q_heads = 4;
      p.kv_heads = 2;
      p.head_dim = dims[i];
      p.dtype = DType::kBF16;
      p.layout = static_cast<KvLayout>(i % 3);
      p.mask = mask;
      if (mask == MaskKind::kWindow) p.window = 40;
      p.q_lens = {17, 150};
      p.kv_lens = {17, 200};
      ExpectMatchesOracle(*backend, p, 7 + i, ValueProfile::kNormal, 100);
      p.q_heads = 8;  // decode: 4 rows per kv head
      p.q_lens = {1, 1};
      ExpectMatchesOracle(*backend, p, 17 + i, ValueProfile::kNormal, 100);
      if (HasFailure()) return;
    }
  }
}

// Transposed V on AVX-512 takes tiles of up to 2048 keys (DecodeTileKeys:
// fewer for items of more than 8 rows, so their S / P fit the workspace):
// two whole tiles and a tail ending part way into a vector of keys (read in
// place up to its last whole vector, the rest widened), a tile that ends
// exactly, one key past it (a tail of one), 2 queries (8 rows per kv head);
// f32 / bf16 / int8 K/V (q bf16), head dims in place and widened, 16-32 rows
// per kv head (1024 / 512-key tiles), causal and windowed masks, and forced
// splits (tiles that start at a split's first key). (A read of keys past
// the context is not visible here: P is 0 there.)
TEST_P(SimdIsaTest, TransposedVLongTiles) {
  struct Shape {
    int splits;
    DType kv;
    int64_t q_heads, d;
    MaskKind mask;
  };
  for (const Shape& c : {Shape{0, DType::kF32, 8, 128, MaskKind::kCausal},
                         Shape{0, DType::kBF16, 8, 128, MaskKind::kCausal},
                         Shape{0, DType::kI8, 8, 128, MaskKind::kCausal},
                         Shape{0, DType::kF32, 8, 40, MaskKind::kWindow},
                         Shape{3, DType::kBF16, 8, 128, MaskKind::kWindow},
                         Shape{0, DType::kF32, 32, 64, MaskKind::kCausal}}) {
    auto backend = Make(c.splits, 2);
    AttentionProblem p;
    p.batch = 3;
    p.q_heads = c.q_heads;
    p.kv_heads = 2;
    p.head_dim = c.d;
    p.dtype = c.kv == DType::kI8 ? DType::kBF16 : c.kv;
    p.kv_dtype = c.kv;
    p.layout = KvLayout::kTransposedV;
    p.mask = c.mask;
    if (c.mask == MaskKind::kWindow) p.window = 3000;
    p.q_lens = {1, 2, 1};
    p.kv_lens = {4500, 2048, 2049};
    ExpectMatchesOracle(*backend, p,
                        static_cast<int>(c.q_heads + c.d + c.splits),
                        ValueProfile::kNormal, 0);
    if (HasFailure()) return;
  }
}

// An int8 K/V cache on the decode path: every query group size the QK^T
// row groups take (1, 2, up to 4, up to 8, more than 8 rows per kv head),
// q f32 and bf16 (bf16: QK^T on vdpbf16ps where the ISA has it), every
// layout, head dims read in place (64, 128) and widened (40), and key counts
// that end a tile, a 16-key block and a 4-key block part way.
TEST_P(SimdIsaTest, DecodeI8EveryGroupSizeAndQueryDtype) {
  auto backend = Make();
  for (KvLayout layout :
       {KvLayout::kBHSD, KvLayout::kBSHD, KvLayout::kTransposedV}) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
      for (int64_t group : {1, 2, 3, 4, 5, 8, 12}) {
        for (int64_t d : {128, 64, 40}) {
          AttentionProblem p;
          p.batch = 3;
          p.kv_heads = 2;
          p.q_heads = 2 * group;
          p.head_dim = d;
          p.dtype = dt;
          p.kv_dtype = DType::kI8;
          p.layout = layout;
          p.mask = MaskKind::kCausal;
          p.q_lens = {1, 1, 2};
          p.kv_lens = {1030, 255, 19};
          ExpectMatchesOracle(*backend, p, 5 + group, ValueProfile::kNormal,
                              100);
          if (HasFailure()) return;
        }
      }
    }
  }
}

// BSHD decode groups adjacent kv heads into one work item (simd_backend.cc
// MakePlan): with 1 thread every kv head of a sequence is one item, with 2
// half of them, with 3 an uneven split (the last item has fewer heads).
// Every mask, both dtypes, ragged and empty sequences, 1-2 queries per
// sequence (4-8 rows per head), and forced splits (the merge walks the rows
// of all the item's heads). f32 items read their blocks ahead when the K/V
// outgrow the cache (bf16 rows here are too short to: BshdReadAheadItems):
// forced (1 byte) and as decided (these fit).
TEST_P(SimdIsaTest, BshdDecodeItemsSpanningKvHeads) {
  for (int threads : {1, 2, 3}) {
    for (int splits : {0, 3}) {
      for (int64_t above : {int64_t{1}, LastLevelCacheBytes()}) {
        auto backend = Make(splits, threads, above);
        for (MaskKind mask : {MaskKind::kNone, MaskKind::kCausal,
                              MaskKind::kWindow, MaskKind::kBias}) {
          for (DType dt : {DType::kF32, DType::kBF16}) {
            AttentionProblem p;
            p.batch = 3;
            p.q_heads = 20;
            p.kv_heads = 5;
            p.head_dim = 64;
            p.dtype = dt;
            p.layout = KvLayout::kBSHD;
            p.mask = mask;
            if (mask == MaskKind::kWindow) p.window = 50;
            p.q_lens = {1, 2, 0};
            p.kv_lens = {300, 77, 5};
            ExpectMatchesOracle(*backend, p, 40 + threads * 7 + splits,
                                ValueProfile::kNormal, 3);
            if (HasFailure()) return;
          }
        }
      }
    }
  }
}

// BSHD items that read their blocks ahead, forced (1 byte) and as decided.
// Wide position rows (Hkv 32, d 128: f32 16 KiB, bf16 8 KiB): at kv 300
// (too few keys to split) the threads split the kv heads; at kv 1300 an
// item takes whole rows (read ahead in P.V spans of 16 keys, the last tile's
// ending part way into one) and the threads split the keys even though half
// a row outgrows a 4 KiB page (MakePlan). Hkv 8 f32 (4 KiB rows) reads P.V
// spans of a whole tile; Hkv 8 bf16 (2 KiB rows) takes whole rows either
// way and prefetches.
TEST_P(SimdIsaTest, BshdReadAheadItems) {
  for (int64_t above : {int64_t{1}, LastLevelCacheBytes()}) {
    auto backend = Make(0, 2, above);
    for (int64_t kv : {300, 1300}) {
      for (int64_t hkv : {32, 8}) {
        for (DType dt : {DType::kF32, DType::kBF16}) {
          AttentionProblem p;
          p.q_heads = 2 * hkv;
          p.kv_heads = hkv;
          p.head_dim = 128;
          p.dtype = dt;
          p.layout = KvLayout::kBSHD;
          p.mask = MaskKind::kCausal;
          p.q_lens = {1};
          p.kv_lens = {kv};
          ExpectMatchesOracle(*backend, p, static_cast<int>(kv + hkv),
                              ValueProfile::kNormal, 3);
          if (HasFailure()) return;
        }
      }
    }
  }
}

// A BHSD decode whose K/V outgrow the cache (forced: 1 byte): P.V's last
// row pair of each tile fetches the next tile's K rows (NextTileKeys) --
// GQA groups of 4 and 8 (two and four row pairs) and 2 (one pair: none),
// tiles ending part way, causal and not; the results as without it.
TEST_P(SimdIsaTest, DecodeFromDramFetchesNextTileKeys) {
  auto backend = Make(0, 2, 1);
  for (int64_t g : {4, 8, 2}) {
    for (int64_t kv : {1300, 257}) {
      AttentionProblem p;
      p.q_heads = 2 * g;
      p.kv_heads = 2;
      p.head_dim = 128;
      p.mask = kv == 257 ? MaskKind::kCausal : MaskKind::kNone;
      p.q_lens = {1};
      p.kv_lens = {kv};
      ExpectMatchesOracle(*backend, p, static_cast<int>(kv + g));
      if (HasFailure()) return;
    }
  }
}

// Fewer sequences than threads and long enough contexts: one BSHD item
// takes all its kv heads and the threads split its keys (MakePlan); the
// merge of those splits, every mask, f32 / bf16 / i8 K/V, and a ragged
// second sequence too short to split; f32 items reading their blocks ahead
// (forced: 1 byte) and not.
TEST_P(SimdIsaTest, BshdDecodeWholeRowItemsSplitTheirKeys) {
  for (int threads : {2, 3}) {
    for (int64_t above : {int64_t{1}, LastLevelCacheBytes()}) {
      auto backend = Make(0, threads, above);
      for (MaskKind mask : {MaskKind::kNone, MaskKind::kCausal,
                            MaskKind::kWindow, MaskKind::kBias}) {
        for (int kvt = 0; kvt < 3; ++kvt) {
          AttentionProblem p;
          p.batch = threads - 1;
          p.q_heads = 20;
          p.kv_heads = 5;
          p.head_dim = 64;
          p.dtype = kvt == 1 ? DType::kBF16 : DType::kF32;
          if (kvt == 2) p.kv_dtype = DType::kI8;
          p.layout = KvLayout::kBSHD;
          p.mask = mask;
          if (mask == MaskKind::kWindow) p.window = 700;
          p.q_lens.assign(static_cast<size_t>(p.batch), 1);
          p.kv_lens = {1700};
          if (p.batch > 1) p.kv_lens.push_back(90);
          ExpectMatchesOracle(*backend, p, 90 + threads * 3 + kvt,
                              ValueProfile::kNormal, 3);
          if (HasFailure()) return;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllIsas, SimdIsaTest,
                         ::testing::ValuesIn(AvailableIsas()),
                         [](const ::testing::TestParamInfo<Isa>& info) {
                           return std::string(IsaName(info.param));
                         });

// Every ISA on the same problems and data, each held to the oracle's
// tolerance: two ISAs then differ by at most twice the bound. Nothing tighter
// is expected between them: their vector widths, hence summation orders,
// differ.
TEST(SimdTest, IsasAgreeWithEachOther) {
  const std::vector<Isa> isas = AvailableIsas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.front(), Isa::kScalar);
  EXPECT_NE(std::find(isas.begin(), isas.end(), BestIsa()), isas.end());
  std::vector<std::unique_ptr<Backend>> owned;
  std::vector<Backend*> backends;
  for (Isa isa : isas) {
    SimdOptions o;
    o.isa = isa;
    owned.push_back(MakeSimdBackend(o));
    backends.push_back(owned.back().get());
  }
  Rng rng(42);
  for (int c = 0; c < 10; ++c) {
    const std::vector<CheckResult> results =
        ExpectMatchesOracle(backends, RandomProblem(rng), c);
    for (size_t i = 0; i < results.size(); ++i) {
      EXPECT_FALSE(results[i].failed())
          << "(the failure above is ISA " << IsaName(isas[i]) << ")";
    }
  }
}

TEST(SimdTest, FullyMaskedRowsAreZerosNeverNaN) {
  AttentionProblem p;
  p.batch = 3;
  p.q_heads = 4;
  p.kv_heads = 2;
  p.head_dim = 24;
  p.mask = MaskKind::kBias;
  p.q_lens = {3, 2, 20};
  p.kv_lens = {0, 70, 300};
  auto data = AttentionData::Create(p);
  ASSERT_TRUE(data.ok());
  Rng rng(5);
  data->Fill(p, rng);
  const AttentionArgs& a = data->args();
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t j = 0; j < 300; ++j) a.bias.Store(2, h, 4, j, ninf);
  auto backend = MakeSimdBackend();
  ASSERT_TRUE(backend->Attention(p, a).ok());
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t e = 0; e < 24; ++e) {
      EXPECT_EQ(a.out.Load(0, h, 0, e), 0.0f);  // empty context
      EXPECT_EQ(a.out.Load(2, h, 4, e), 0.0f);  // all -inf bias row
      EXPECT_FALSE(std::isnan(a.out.Load(2, h, 5, e)));
    }
}

TEST(SimdTest, ThreadCountDoesNotChangeBits) {
  // Work items are independent, so 1 and 2 threads must agree exactly (a
  // race on a shared workspace would not).
  AttentionProblem p;
  p.batch = 2;
  p.q_heads = 8;
  p.kv_heads = 2;
  p.head_dim = 64;
  p.mask = MaskKind::kCausal;
  p.q_lens = {150, 90};
  p.kv_lens = {400, 90};
  auto data = AttentionData::Create(p);
  ASSERT_TRUE(data.ok());
  Rng rng(11);
  data->Fill(p, rng);
  const AttentionArgs& a = data->args();
  std::vector<float> outs[2];
  for (int threads : {1, 2}) {
    SimdOptions o;
    o.num_threads = threads;
    ASSERT_TRUE(MakeSimdBackend(o)->Attention(p, a).ok());
    const float* f = a.out.As<float>();
    outs[threads - 1].assign(f, f + a.out.NumElements());
  }
  EXPECT_EQ(outs[0], outs[1]);
}

TEST(SimdTest, WarmDecodeDoesNotAllocate) {
  for (int splits : {0, 4}) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
      AttentionProblem p;
      p.q_heads = 32;
      p.kv_heads = 8;
      p.head_dim = 128;
      p.dtype = dt;
      p.mask = MaskKind::kCausal;
      p.q_lens = {1};
      p.kv_lens = {3000};
      auto data = AttentionData::Create(p);
      ASSERT_TRUE(data.ok());
      Rng rng(3);
      data->Fill(p, rng);
      SimdOptions o;
      o.force_kv_splits = splits;
      auto backend = MakeSimdBackend(o);
      ASSERT_TRUE(backend->Attention(p, data->args()).ok());  // warm-up
      int64_t before = g_allocations.load();
      ASSERT_TRUE(backend->Attention(p, data->args()).ok());
      EXPECT_EQ(g_allocations.load() - before, 0) << "same shape";
      AttentionProblem smaller = p;
      smaller.kv_lens = {2000};
      before = g_allocations.load();
      ASSERT_TRUE(backend->Attention(smaller, data->args()).ok());
      EXPECT_EQ(g_allocations.load() - before, 0) << "smaller shape";
    }
  }
}

TEST(SimdTest, InvalidInputIsAStatus) {
  AttentionProblem p;
  p.head_dim = 8;
  p.q_lens = {2};
  p.kv_lens = {2};
  auto data = AttentionData::Create(p);
  ASSERT_TRUE(data.ok());
  AttentionArgs a = data->args();
  a.k.shape[3] = 7;
  auto backend = MakeSimdBackend();
  const Status s = backend->Attention(p, a);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("k:"), std::string::npos) << s.ToString();
  p.kv_heads = 0;
  EXPECT_EQ(backend->Attention(p, data->args()).code(),
            StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------- append

TEST(SimdAppendTest, BitExactVersusStridedAppendInEveryLayout) {
  Rng rng(21);
  for (KvLayout layout :
       {KvLayout::kBHSD, KvLayout::kBSHD, KvLayout::kTransposedV}) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
      for (int new_order = 0; new_order < 3; ++new_order) {
        const int64_t B = 3, H = 2, cap = 90, d = 37, n = 20;
        const std::array<int64_t, 4> cshape{B, H, cap, d}, nshape{B, H, n, d};
        Tensor kc[2], vc[2];
        for (int x = 0; x < 2; ++x) {
          kc[x] =
              Tensor::Allocate(dt, cshape, KvStrides(layout, false, cshape));
          vc[x] = Tensor::Allocate(dt, cshape, KvStrides(layout, true, cshape));
        }
        Rng fill(7);
        FillNormal(kc[0].view, fill);
        FillNormal(vc[0].view, fill);
        std::memcpy(kc[1].buffer.data(), kc[0].buffer.data(),
                    kc[0].buffer.size());
        std::memcpy(vc[1].buffer.data(), vc[0].buffer.data(),
                    vc[0].buffer.size());
        // New tokens in BHSD, BSHD or sequence-major order.
        const std::array<int, 4> orders[] = {
            {0, 1, 2, 3}, {0, 2, 1, 3}, {0, 1, 3, 2}};
        Tensor nk = Tensor::Allocate(
            dt, nshape, PermutedStrides(nshape, orders[new_order]));
        Tensor nv = Tensor::Allocate(
            dt, nshape, PermutedStrides(nshape, orders[new_order]));
        FillNormal(nk.view, fill);
        FillNormal(nv.view, fill);
        const std::vector<int64_t> pos = {0, 33, 70}, lens = {n, 0, 20};
        KvAppendArgs args[2];
        for (int x = 0; x < 2; ++x)
          args[x] = {kc[x].view, vc[x].view, nk.view, nv.view,
                     pos,        lens,       {},      {}};
        AppendKvStrided(args[0]);
        ASSERT_TRUE(MakeSimdBackend()->AppendKv(args[1]).ok());
        EXPECT_EQ(std::memcmp(kc[0].buffer.data(), kc[1].buffer.data(),
                              kc[0].buffer.size()),
                  0)
            << KvLayoutName(layout) << " " << DTypeName(dt) << " " << new_order;
        EXPECT_EQ(std::memcmp(vc[0].buffer.data(), vc[1].buffer.data(),
                              vc[0].buffer.size()),
                  0)
            << KvLayoutName(layout) << " " << DTypeName(dt) << " " << new_order;
      }
    }
  }
  (void)rng;
}

TEST(SimdAppendTest, OverflowIsOutOfRangeAndWritesNothing) {
  const std::array<int64_t, 4> cshape{1, 1, 8, 4}, nshape{1, 1, 3, 4};
  Tensor kc = Tensor::Contiguous(DType::kF32, cshape);
  Tensor vc = Tensor::Contiguous(DType::kF32, cshape);
  Tensor nk = Tensor::Contiguous(DType::kF32, nshape);
  Tensor nv = Tensor::Contiguous(DType::kF32, nshape);
  Rng rng(1);
  FillNormal(nk.view, rng);
  const std::vector<int64_t> pos = {6}, lens = {3};
  const Status s = MakeSimdBackend()->AppendKv(
      {kc.view, vc.view, nk.view, nv.view, pos, lens, {}, {}});
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.ToString();
  for (int64_t j = 0; j < 8; ++j) EXPECT_EQ(kc.view.Load(0, 0, j, 0), 0.0f);
}

TEST(SimdTest, IsaTableRoundTrips) {
  attnkit::testing::ExpectRoundTrip(kIsaNames, "Isa");
}

}  // namespace
}  // namespace attnkit::simd
