#include "compiled/compiled_backend.h"

#include "compiled/aot.h"
#include "compiled/jit.h"
#include "compiled/pipeline.h"
#include "harness/test_support.h"
#include "runtime/accounting.h"
#include "runtime/cpu_features.h"
#include "runtime/enum_table_testing.h"
#include "runtime/kv_cache.h"
#include "runtime/random.h"
#include "runtime/split_kv.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace attnkit::compiled {
namespace {

using harness::testing::ExpectMatchesOracle;

// One problem per mask x q dtype x layout (24), its heads, head_dim and
// window drawn from `shapes`: kv heads 1..2, the group from `groups`, head_dim
// from `dims`; `lengths` sets batch, q_lens and kv_lens (and may check which
// kernel the problem takes). Each is held to the oracle (case seed
// `seed_base` + its index).
template <typename Lengths>
void SweepAgainstOracle(Rng &shapes, std::vector<int64_t> groups,
                        std::vector<int64_t> dims, std::optional<DType> kvDtype,
                        uint64_t seedBase, Lengths lengths) {
  int cases = 0;
  for (MaskKind mask :
       {MaskKind::kNone, MaskKind::kCausal, MaskKind::kWindow, MaskKind::kBias})
    for (DType dtype : {DType::kF32, DType::kBF16})
      for (KvLayout layout :
           {KvLayout::kBHSD, KvLayout::kBSHD, KvLayout::kTransposedV}) {
        AttentionProblem p;
        p.kv_heads = shapes.Range(1, 2);
        p.q_heads = p.kv_heads * groups[shapes.Below(groups.size())];
        p.head_dim = dims[shapes.Below(dims.size())];
        p.mask = mask;
        p.dtype = dtype;
        p.kv_dtype = kvDtype;
        p.layout = layout;
        if (mask == MaskKind::kWindow)
          p.window = shapes.Range(1, 70);
        lengths(p);
        if (::testing::Test::HasFatalFailure())
          return;
        ASSERT_TRUE(MakeCompiledBackend()->Supports(p).ok()) << p.ToString();
        SCOPED_TRACE(p.ToString());
        ExpectMatchesOracle(*MakeCompiledBackend(), p, seedBase + cases);
        ++cases;
      }
  EXPECT_EQ(cases, 24);
}

// Ragged batches of 1..3 (empty sequences included), lengths that straddle
// the 16-row and 64-key tiles.
void RaggedLengths(Rng &shapes, AttentionProblem &p) {
  p.batch = shapes.Range(1, 3);
  p.q_lens.clear();
  p.kv_lens.clear();
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t kv = shapes.Range(0, 150);
    p.kv_lens.push_back(kv);
    p.q_lens.push_back(shapes.Range(0, std::min<int64_t>(kv, 90)));
  }
}

// Every mask x dtype x layout, ragged batches (empty sequences included),
// GQA groups 1/2/4, head_dim not a multiple of the vector width, lengths
// that straddle the 16-row and 64-key tiles.
TEST(CompiledBackendTest, SweepAgainstOracle) {
  Rng shapes(7);
  SweepAgainstOracle(shapes, {1, 2, 4}, {8, 33, 64}, std::nullopt, 0,
                     [&](AttentionProblem &p) { RaggedLengths(shapes, p); });
}

// bf16 Q/K/V on both code paths of QK^T: vdpbf16ps (two bf16 products per
// f32 lane, Q packed in pairs of dims; where the CPU has AVX512_BF16) and
// the widened f32 FMAs. Prefill and decode kernels, every mask and layout,
// odd and small head dims (the zero-padded last pair, the masked tail of a
// decode row), GQA groups 1..5, ragged lengths.
TEST(CompiledBackendTest, Bf16DotAndWidenedQkAgainstOracle) {
  if (!CpuHasAvx512Bf16())
    GTEST_LOG_(INFO) << "no AVX512_BF16 here: both runs take the widened path";
  Rng shapes(29);
  int cases = 0;
  for (bool dot : {true, false})
    for (bool decode : {false, true})
      for (MaskKind mask : {MaskKind::kNone, MaskKind::kCausal,
                            MaskKind::kWindow, MaskKind::kBias})
        for (KvLayout layout :
             {KvLayout::kBHSD, KvLayout::kBSHD, KvLayout::kTransposedV}) {
          AttentionProblem p;
          p.kv_heads = shapes.Range(1, 2);
          p.q_heads = p.kv_heads * shapes.Range(1, 5);
          static constexpr int64_t kDims[] = {2, 7, 33, 40, 64, 95, 128};
          p.head_dim = kDims[shapes.Below(std::size(kDims))];
          p.mask = mask;
          p.dtype = DType::kBF16;
          p.layout = layout;
          if (mask == MaskKind::kWindow)
            p.window = shapes.Range(1, 70);
          RaggedLengths(shapes, p);
          if (decode) {
            for (int64_t &q : p.q_lens)
              q = std::min<int64_t>(q, 1);
          } else {
            p.kv_lens[0] = std::max<int64_t>(p.kv_lens[0], 40);
            p.q_lens[0] = std::max<int64_t>(p.q_lens[0], 20);
          }
          const KernelSpec spec = specFor(p, dot);
          ASSERT_EQ(spec.queryTile % kPrefillQueryTile, decode ? 1 : 0);
          ASSERT_EQ(spec.bf16Dot, dot && CpuHasAvx512Bf16());
          SCOPED_TRACE(p.ToString() + (dot ? " vdpbf16ps" : " widened"));
          ExpectMatchesOracle(*MakeCompiledBackend({.bf16Dot = dot}), p,
                              900 + cases);
          ++cases;
        }
  EXPECT_EQ(cases, 48);
}

// The decode kernel (q_len < 4: K/V rows streamed, softmax along keys) on
// every mask x dtype x layout, head_dim not a multiple of 16 (tails), GQA
// groups 1/2/4, ragged q_len 0..3 and kv_len straddling the 64-key tile.
TEST(CompiledBackendTest, DecodeKernelSweepAgainstOracle) {
  Rng shapes(13);
  SweepAgainstOracle(
      shapes, {1, 2, 4}, {8, 33, 64}, std::nullopt, 100,
      [&](AttentionProblem &p) {
        p.batch = 2;
        p.kv_lens = {shapes.Range(1, 150), shapes.Range(60, 140)};
        p.q_lens = {shapes.Range(0, 3), 1};
        ASSERT_EQ(specFor(p).queryTile, 1);
      });
}

// A quantized KV cache (kv_dtype=i8: int8 rows, one f32 scale per token
// and kv head) through the decode kernel: the rows converted in registers,
// k_scale on the logits, v_scale on P after the row sum. Every mask x q
// dtype x layout, GQA groups 1/2/4, head_dim 8/33/64/128 (odd ones take the
// masked tail loads of int8 rows), ragged q_len 0..3 and kv_len straddling
// the 64-key tile, an empty third sequence; the oracle works on the
// dequantized values as stored.
TEST(CompiledBackendTest, QuantizedKvDecodeSweepAgainstOracle) {
  Rng shapes(31);
  SweepAgainstOracle(
      shapes, {1, 2, 4}, {8, 33, 64, 128}, DType::kI8, 300,
      [&](AttentionProblem &p) {
        p.batch = 3;
        p.kv_lens = {shapes.Range(1, 150), shapes.Range(60, 140), 0};
        p.q_lens = {shapes.Range(0, 3), 1, 0};
        ASSERT_EQ(specFor(p).queryTile, 1);
      });
}

// The prefill kernel (16-row query tiles) on an i8 cache: the key's scale
// broadcast over a vector of 16 rows' scores, the value's over P. Every
// mask x q dtype x layout, GQA groups 1/2/3/4 (3: the 5-key register block
// that does not divide the tile), odd head_dim, ragged batches with empty
// sequences, lengths straddling the 16-row and 64-key tiles.
TEST(CompiledBackendTest, QuantizedKvPrefillSweepAgainstOracle) {
  Rng shapes(37);
  SweepAgainstOracle(shapes, {1, 2, 3, 4}, {8, 33, 64}, DType::kI8, 400,
                     [&](AttentionProblem &p) {
                       RaggedLengths(shapes, p);
                       // At least one sequence takes the prefill kernel.
                       p.kv_lens[0] = std::max<int64_t>(p.kv_lens[0], 20);
                       p.q_lens[0] = std::max<int64_t>(p.q_lens[0], 17);
                       ASSERT_EQ(specFor(p).queryTile % kPrefillQueryTile, 0);
                     });
}

// i8 decode with one head: the keys split over the threads (flash-decoding),
// so each split's kernel reads the scales from its first key on, and a KV
// cache prefix whose K/V and scales have a capacity's strides.
TEST(CompiledBackendTest, QuantizedKvSplitDecodeAndCachePrefix) {
  for (MaskKind mask : {MaskKind::kNone, MaskKind::kWindow}) {
    AttentionProblem p;
    p.head_dim = 64;
    p.q_lens = {1};
    p.kv_lens = {3001};
    p.mask = mask;
    p.kv_dtype = DType::kI8;
    if (mask == MaskKind::kWindow)
      p.window = 1500;
    SCOPED_TRACE(p.ToString());
    ExpectMatchesOracle(*MakeCompiledBackend(), p, 11);
  }
  for (KvLayout layout :
       {KvLayout::kBHSD, KvLayout::kBSHD, KvLayout::kTransposedV}) {
    AttentionProblem p;
    p.batch = 2;
    p.q_heads = 4;
    p.kv_heads = 2;
    p.head_dim = 64;
    p.q_lens = {1, 20};
    p.kv_lens = {77, 130};
    p.mask = MaskKind::kCausal;
    p.kv_dtype = DType::kI8;
    p.layout = layout;
    SCOPED_TRACE(p.ToString());
    ExpectMatchesOracle(*MakeCompiledBackend(), p, 3, ValueProfile::kNormal,
                        /*kv_pad=*/256 - p.max_kv_len());
  }
}

// The K/V dtype is part of the specialization: an i8 cache gets its own
// kernel (and on-disk cache entry), never the f32/bf16 one of the same
// shape, whose K/V memrefs have another element type.
TEST(CompiledBackendTest, QuantizedKvIsItsOwnSpecialization) {
  AttentionProblem p;
  p.q_heads = 4;
  p.head_dim = 64;
  const KernelSpec plain = specFor(p);
  p.kv_dtype = DType::kI8;
  const KernelSpec quantized = specFor(p);
  EXPECT_NE(plain, quantized);
  EXPECT_TRUE(quantized.quantizedKv());
  EXPECT_EQ(quantized.key(), "d64_f32_kvi8_none_v_g4_q1");
  EXPECT_EQ(plain.key(), "d64_f32_none_v_g4_q1");
  EXPECT_NE(globalKernelCache().diskKey(plain.key()),
            globalKernelCache().diskKey(quantized.key()));
  // kv_dtype equal to the dtype is no quantization: the plain kernel.
  p.kv_dtype = DType::kF32;
  EXPECT_EQ(specFor(p), plain);
}

// Decode steps on an i8 KvCache, the compiled backend doing both halves of
// each step: AppendKv quantizes the new token into its slot (the one rule,
// the portable quantizer) and Attention reads the int8 prefix and its
// scales in place. Once the kernels are compiled and the workspaces sized,
// a step allocates nothing and copies exactly the new tokens' bytes and
// scales; each step's output matches attention in double on the values as
// stored (int8 times scale) -- what the oracle computes, written out here
// because the oracle's library sits beside this one, not below it.
TEST(CompiledBackendTest, QuantizedKvDecodeStepsAllocateNothing) {
  ASSERT_TRUE(accounting::AllocHooksInstalled());
  for (KvLayout layout :
       {KvLayout::kBHSD, KvLayout::kBSHD, KvLayout::kTransposedV}) {
    SCOPED_TRACE(std::string(KvLayoutName(layout)));
    KvCacheConfig cfg;
    cfg.batch = 2;
    cfg.kv_heads = 2;
    cfg.head_dim = 40;
    cfg.capacity = 160;
    cfg.dtype = DType::kI8;
    cfg.layout = layout;
    StatusOr<KvCache> cache = KvCache::Create(cfg);
    ASSERT_TRUE(cache.ok()) << cache.status().ToString();
    AttentionProblem p;
    p.batch = cfg.batch;
    p.q_heads = 8;
    p.kv_heads = cfg.kv_heads;
    p.head_dim = cfg.head_dim;
    p.mask = MaskKind::kCausal;
    p.kv_dtype = DType::kI8;
    p.layout = layout;
    p.q_lens = {1, 1};
    auto compiled = MakeCompiledBackend();
    Rng rng(9);
    // A context of 70 tokens, appended by the backend.
    Tensor ctxK = Tensor::Contiguous(DType::kF32, {2, 2, 70, 40});
    Tensor ctxV = Tensor::Contiguous(DType::kF32, {2, 2, 70, 40});
    FillNormal(ctxK.view, rng);
    FillNormal(ctxV.view, rng);
    ASSERT_TRUE(cache->Append(0, ctxK.view, ctxV.view, compiled.get()).ok());
    Tensor q = Tensor::Contiguous(DType::kF32, {2, 8, 1, 40});
    Tensor out = Tensor::Contiguous(DType::kF32, {2, 8, 1, 40});
    Tensor nk = Tensor::Contiguous(DType::kF32, {2, 2, 1, 40});
    Tensor nv = Tensor::Contiguous(DType::kF32, {2, 2, 1, 40});
    for (int step = 0; step < 6; ++step) {
      FillNormal(q.view, rng);
      FillNormal(nk.view, rng);
      FillNormal(nv.view, rng);
      accounting::Meter meter;
      ASSERT_TRUE(cache->Append(0, nk.view, nv.view, compiled.get()).ok());
      const std::span<const int64_t> lens = cache->lengths(0);
      p.kv_lens.assign(lens.begin(), lens.end());
      const KvCache::View kv = cache->Prefix(0);
      const AttentionArgs args{q.view,   kv.k,       kv.v,      {},
                               out.view, kv.k_scale, kv.v_scale};
      ASSERT_TRUE(compiled->Attention(p, args).ok());
      const accounting::Counts c = meter.Read();
      // Step 0 compiles the kernels and sizes the workspaces.
      if (step > 0) {
        EXPECT_EQ(c.allocs, 0) << "step " << step;
        // 2 sequences x 2 kv heads x (40 int8 + one f32 scale), K and V.
        EXPECT_EQ(c.bytes_copied, 2 * 2 * 2 * (40 + 4)) << "step " << step;
      }
      // The one query sits at the last position: every key is visible.
      const double scale = p.EffectiveScale();
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t h = 0; h < 8; ++h) {
          const int64_t g = h / 4, n = p.kv_lens[b];
          std::vector<double> w(n);
          double mx = -INFINITY, sum = 0;
          for (int64_t j = 0; j < n; ++j) {
            double dot = 0;
            for (int64_t e = 0; e < 40; ++e)
              dot += double(q.view.Load(b, h, 0, e)) * kv.k.Load(b, g, j, e) *
                     kv.k_scale.Load(b, g, j, 0);
            w[j] = dot * scale;
            mx = std::max(mx, w[j]);
          }
          for (double &x : w)
            sum += (x = std::exp(x - mx));
          for (int64_t e = 0; e < 40; ++e) {
            double o = 0;
            for (int64_t j = 0; j < n; ++j)
              o += w[j] / sum * kv.v.Load(b, g, j, e) *
                   kv.v_scale.Load(b, g, j, 0);
            ASSERT_NEAR(out.view.Load(b, h, 0, e), o, 1e-4)
                << "step " << step << " b " << b << " h " << h << " e " << e;
          }
        }
    }
  }
}

// The compiled append into an i8 cache writes exactly the bytes and scales
// the portable quantizing append writes (the one rule, bit for bit), in
// every layout, from f32 and bf16 tokens, contiguous and strided.
TEST(CompiledBackendTest, QuantizedAppendKvBitExactWithStridedAppend) {
  const std::array<int64_t, 4> cache{3, 2, 40, 24}, fresh{3, 2, 5, 24};
  auto backend = MakeCompiledBackend();
  int checked = 0;
  for (KvLayout layout :
       {KvLayout::kBHSD, KvLayout::kBSHD, KvLayout::kTransposedV})
    for (DType tokDtype : {DType::kF32, DType::kBF16})
      for (bool stridedTokens : {false, true}) {
        SCOPED_TRACE(std::string(KvLayoutName(layout)) + " " +
                     std::string(DTypeName(tokDtype)) +
                     (stridedTokens ? " strided tokens" : ""));
        Tensor kc[2], vc[2], ks[2], vs[2];
        const std::array<int64_t, 4> scaleShape{3, 2, 40, 1};
        for (int c = 0; c < 2; ++c) {
          kc[c] = Tensor::Allocate(DType::kI8, cache,
                                   KvStrides(layout, false, cache));
          vc[c] = Tensor::Allocate(DType::kI8, cache,
                                   KvStrides(layout, true, cache));
          ks[c] = Tensor::Allocate(DType::kF32, scaleShape,
                                   KvScaleStrides(scaleShape));
          vs[c] = Tensor::Allocate(DType::kF32, scaleShape,
                                   KvScaleStrides(scaleShape));
          for (Tensor *t : {&kc[c], &vc[c], &ks[c], &vs[c]})
            std::memset(t->buffer.data(), 0x5a, t->buffer.size());
        }
        const std::array<int64_t, 4> tokStrides =
            stridedTokens ? std::array<int64_t, 4>{2 * 5 * 24, 5 * 24, 1, 5}
                          : ContiguousStrides(fresh);
        Tensor nk = Tensor::Allocate(tokDtype, fresh, tokStrides);
        Tensor nv = Tensor::Allocate(tokDtype, fresh, tokStrides);
        Rng rng(22);
        FillNormal(nk.view, rng);
        FillNormal(nv.view, rng);
        const std::vector<int64_t> pos{7, 3, 35}, lens{3, 0, 5};
        KvAppendArgs ref{kc[0].view, vc[0].view, nk.view,    nv.view,
                         pos,        lens,       ks[0].view, vs[0].view};
        KvAppendArgs got{kc[1].view, vc[1].view, nk.view,    nv.view,
                         pos,        lens,       ks[1].view, vs[1].view};
        AppendKvStrided(ref);
        accounting::Meter meter;
        ASSERT_TRUE(backend->AppendKv(got).ok());
        EXPECT_EQ(meter.Read().allocs, 0);
        EXPECT_EQ(meter.Read().bytes_copied, AppendedBytes(got));
        for (int i = 0; i < 4; ++i) {
          const Tensor *a[] = {&kc[0], &vc[0], &ks[0], &vs[0]};
          const Tensor *b[] = {&kc[1], &vc[1], &ks[1], &vs[1]};
          EXPECT_EQ(std::memcmp(a[i]->buffer.data(), b[i]->buffer.data(),
                                a[i]->buffer.size()),
                    0)
              << "tensor " << i;
        }
        // The rows really landed: a stored key dequantizes to the token
        // within half a quantization step.
        const float x = nk.view.Load(2, 1, 4, 23);
        const float deq =
            kc[1].view.Load(2, 1, 39, 23) * ks[1].view.Load(2, 1, 39, 0);
        EXPECT_NEAR(deq, x, 0.5f * ks[1].view.Load(2, 1, 39, 0) + 1e-6f);
        ++checked;
      }
  EXPECT_EQ(checked, 12);
}

// Regression: the prefill (16-row) kernel register-blocks QK^T as jb keys x
// min(G, 4) row vectors with jb = 16 / min(G, 4); for G = 3 that is 5 keys,
// which does not divide the 64-key tile, and the last block stored scores
// for key 64 -- past the tile buffer (wrong results, then a crash). Every
// group 1..8 plus 12 and 16, both V layouts, full and partial key tiles:
// groups up to 4 in one call, larger ones in calls of a slice of their
// heads (prefillGroupFor: 5 and 7 one head, 6 three, 8, 12 and 16 four).
// Kernels of 1 and 2 heads also with the longer query tiles they take for
// longer prompts (32 and 64 rows of one head: queryTileFor).
TEST(CompiledBackendTest, PrefillKernelEveryGqaGroup) {
  int cases = 0;
  for (int64_t g : {1, 2, 3, 4, 5, 6, 7, 8, 12, 16})
    for (int64_t q : {18, 70})
      for (KvLayout layout : {KvLayout::kBHSD, KvLayout::kTransposedV})
        for (MaskKind mask : {MaskKind::kNone, MaskKind::kCausal}) {
          if (q == 70 && g > 2)
            continue;
          AttentionProblem p;
          p.kv_heads = 1 + (g % 2);
          p.q_heads = p.kv_heads * g;
          p.head_dim = 64;
          p.layout = layout;
          p.mask = mask;
          p.q_lens = {q};
          p.kv_lens = {q + 49 + 64 * (g % 3)};
          const int64_t call = g == 5 || g == 7 ? 1
                               : g == 6         ? 3
                                                : std::min<int64_t>(g, 4);
          ASSERT_EQ(specFor(p).group, call) << p.ToString();
          ASSERT_EQ(specFor(p).queryTile, call > 2  ? 16
                                          : q == 18 ? 32
                                                    : 64 / call);
          ASSERT_TRUE(MakeCompiledBackend()->Supports(p).ok()) << p.ToString();
          SCOPED_TRACE(p.ToString());
          ExpectMatchesOracle(*MakeCompiledBackend(), p, 200 + cases);
          ++cases;
        }
  EXPECT_EQ(cases, 48);
}

// Query heads per kernel call: a decode kernel the whole group, a prefill
// kernel the group's largest divisor up to kPrefillMaxGroup.
TEST(KernelSpecTest, CallGroupFor) {
  EXPECT_EQ(kPrefillMaxGroup, 4);
  struct Case {
    int64_t group, prefill;
  };
  for (const Case &c :
       {Case{1, 1}, Case{2, 2}, Case{3, 3}, Case{4, 4}, Case{5, 1}, Case{6, 3},
        Case{7, 1}, Case{8, 4}, Case{9, 3}, Case{10, 2}, Case{12, 4},
        Case{32, 4}, Case{127, 1}, Case{129, 3}}) {
    EXPECT_EQ(prefillGroupFor(c.group), c.prefill) << "group " << c.group;
    EXPECT_EQ(callGroupFor(kDecodeMaxQueries, c.group), c.prefill)
        << "group " << c.group;
    EXPECT_EQ(callGroupFor(kDecodeMaxQueries - 1, c.group), c.group)
        << "group " << c.group;
  }
}

// The prefill tile grows to 64 rows (query tile x group) for MHA and groups
// of 2, only as far as the longest query block fills it past half.
TEST(KernelSpecTest, QueryTileFor) {
  struct Case {
    int64_t maxQ, group, tile;
  };
  for (const Case &c :
       {Case{0, 1, 1}, Case{3, 1, 1}, Case{3, 8, 1}, Case{4, 1, 16},
        Case{16, 1, 16}, Case{17, 1, 32}, Case{32, 1, 32}, Case{33, 1, 64},
        Case{5000, 1, 64}, Case{17, 2, 32}, Case{5000, 2, 32},
        Case{5000, 3, 16}, Case{5000, 4, 16}, Case{5000, 16, 16}})
    EXPECT_EQ(queryTileFor(c.maxQ, c.group), c.tile)
        << "maxQ " << c.maxQ << " group " << c.group;
}

// A decode over a transposed V walks longer tiles (f32 128 keys, bf16 and
// int8 512); its prefill, the other layouts and their decodes keep kKvTile.
// specFor passes it on, and it is part of the key.
TEST(KernelSpecTest, KvTileFor) {
  using L = KvLayout;
  EXPECT_EQ(kvTileFor(1, L::kTransposedV, DType::kF32), 128);
  EXPECT_EQ(kvTileFor(1, L::kTransposedV, DType::kBF16), 512);
  EXPECT_EQ(kvTileFor(1, L::kTransposedV, DType::kI8), 512);
  for (DType t : {DType::kF32, DType::kBF16, DType::kI8}) {
    EXPECT_EQ(kvTileFor(16, L::kTransposedV, t), kKvTile);
    EXPECT_EQ(kvTileFor(64, L::kTransposedV, t), kKvTile);
    for (L l : {L::kBHSD, L::kBSHD})
      for (int64_t q : {1, 16, 64})
        EXPECT_EQ(kvTileFor(q, l, t), kKvTile);
  }
  AttentionProblem p;
  p.q_heads = 8;
  p.kv_heads = 2;
  p.head_dim = 64;
  p.dtype = DType::kBF16;
  p.layout = KvLayout::kTransposedV;
  p.q_lens = {1};
  p.kv_lens = {700};
  // The keys without the bf16 dot: specFor's default turns it on where the
  // CPU has it and it pays (CpuBf16DotPays), which made this test's keys
  // depend on the host (it failed on a Zen 5).
  const KernelSpec decode = specFor(p, /*bf16Dot=*/false);
  EXPECT_EQ(decode.kvTile, 512);
  EXPECT_EQ(decode.key(), "d64_bf16_none_vt_g4_q1_k512");
  EXPECT_EQ(specFor(p).kvTile, 512);
  if (CpuHasAvx512Bf16()) {
    EXPECT_EQ(specFor(p, true).key(), "d64_bf16_none_vt_g4_q1_bf16dot_k512");
  }
  p.q_lens = {700};
  EXPECT_EQ(specFor(p, false).kvTile, kKvTile);
  EXPECT_EQ(specFor(p, false).key(), "d64_bf16_none_vt_g4");
  if (CpuHasAvx512Bf16()) {
    EXPECT_EQ(specFor(p, true).key(), "d64_bf16_none_vt_g4_bf16dot");
  }
}

// The transposed-V decode kernel's longer tiles (kvTileFor) against the
// oracle: f32, bf16 and int8 K/V, every mask, GQA groups 1 and 4, head_dim
// 33 (masked tails) and 128, lengths of several whole tiles, one key past
// them and short of one tile, an empty sequence, and a sequence long enough
// that the threads split its keys (splits fall on 64-key boundaries, so a
// split may start or end inside a 128 or 512-key tile). Group 4 with one
// query walks a 512-key tile's steps in the loop rolled by 64 keys.
TEST(CompiledBackendTest, TransposedVDecodeTilesAgainstOracle) {
  uint64_t seed = 900;
  for (std::optional<DType> kv :
       {std::optional<DType>(), std::optional<DType>(DType::kI8)})
    for (DType dtype : {DType::kF32, DType::kBF16})
      for (MaskKind mask : {MaskKind::kNone, MaskKind::kCausal,
                            MaskKind::kWindow, MaskKind::kBias})
        for (int64_t group : {1, 4}) {
          AttentionProblem p;
          p.kv_heads = 2;
          p.q_heads = 2 * group;
          p.head_dim = group == 1 ? 33 : 128;
          p.dtype = dtype;
          p.kv_dtype = kv;
          p.layout = KvLayout::kTransposedV;
          p.mask = mask;
          if (mask == MaskKind::kWindow)
            p.window = 300;
          p.batch = 4;
          p.q_lens = {1, 2, 0, 1};
          const int64_t tile = dtype == DType::kF32 && !kv ? 128 : 512;
          p.kv_lens = {2 * tile, tile + 1, 0, tile - 28};
          ASSERT_EQ(specFor(p).kvTile, tile);
          for (bool split : {false, true}) {
            if (split) {
              p.batch = 1;
              p.q_lens = {1};
              p.kv_lens = {3001};
            }
            SCOPED_TRACE(p.ToString());
            ExpectMatchesOracle(*MakeCompiledBackend(), p, seed++);
          }
        }
}

// Regression (problem_validate_fuzz: one input spent 86 s in the JIT): the
// kernels unroll over the GQA group, so huge groups are declined with a
// status naming the group, and the largest accepted group still compiles.
TEST(CompiledBackendTest, HugeGqaGroupIsDeclinedNotCompiled) {
  auto parsed = ParseProblem("b=1,hq=129,hkv=1,d=8,q=1,kv=5");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  AttentionProblem p = *parsed;
  const Status s = MakeCompiledBackend()->Supports(p);
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("q_heads/kv_heads=129"), std::string::npos)
      << s.message();
  p.q_heads = 128;
  ASSERT_TRUE(MakeCompiledBackend()->Supports(p).ok());
  auto backend = MakeCompiledBackend();
  ExpectMatchesOracle(*backend, p, 3);
}

// A prefill kernel takes at most kPrefillMaxGroup query heads per call, so a
// group the decode kernel declines runs as a prefill in slices of a divisor
// of it (129 = 3 x 43: 43 calls of 3 heads per query block), ragged with an
// empty sequence and a decode-length one, every mask.
TEST(CompiledBackendTest, HugeGqaGroupPrefillRunsInSlicesOfItsHeads) {
  for (MaskKind mask : {MaskKind::kNone, MaskKind::kCausal, MaskKind::kWindow,
                        MaskKind::kBias}) {
    auto parsed = ParseProblem("b=3,hq=129,hkv=1,d=8,q=5:0:1,kv=70:3:9");
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    AttentionProblem p = *parsed;
    p.mask = mask;
    if (mask == MaskKind::kWindow)
      p.window = 30;
    ASSERT_TRUE(MakeCompiledBackend()->Supports(p).ok()) << p.ToString();
    const KernelSpec spec = specFor(p);
    EXPECT_EQ(spec.group, 3);
    EXPECT_EQ(spec.queryTile, kPrefillQueryTile);
    SCOPED_TRACE(p.ToString());
    ExpectMatchesOracle(*MakeCompiledBackend(), p, 7);
  }
}

// Decode (q_len 1) with one head: fewer work items than threads, so the keys
// are split (flash-decoding) and the partial (out, lse) pairs merged.
TEST(CompiledBackendTest, SplitKvDecodeMatchesOracle) {
  for (MaskKind mask : {MaskKind::kNone, MaskKind::kCausal, MaskKind::kWindow,
                        MaskKind::kBias}) {
    AttentionProblem p;
    p.head_dim = 64;
    p.q_lens = {1};
    p.kv_lens = {3001};
    p.mask = mask;
    if (mask == MaskKind::kWindow)
      p.window = 1500; // the first split sees nothing: lse = -inf there
    SCOPED_TRACE(p.ToString());
    ExpectMatchesOracle(*MakeCompiledBackend(), p, 11);
  }
}

// The headed decode kernel (BSHD: all kv heads in one call, each KV tile
// walked 16 keys at a time with the heads inside): 3 and 8 kv heads, GQA
// groups 1 and 4, every mask x q dtype, f32/bf16 and i8 K/V, head_dim 40
// (tails) and 128, ragged q_len 1..3 with an empty sequence, and a long
// sequence whose keys the threads split (partials merged across the band's
// heads), both forms of it: prefetching (the cache size unknown: 0) and, for
// f32 / bf16 K/V, reading its rows ahead (as for K/V larger than the cache:
// 1 byte); a repeated step allocates nothing. The other layouts and prefill
// keep the kernel per kv head.
TEST(CompiledBackendTest, HeadedBshdDecodeAgainstOracle) {
  Rng shapes(41);
  int cases = 0;
  for (MaskKind mask :
       {MaskKind::kNone, MaskKind::kCausal, MaskKind::kWindow, MaskKind::kBias})
    for (DType dtype : {DType::kF32, DType::kBF16})
      for (bool i8 : {false, true}) {
        AttentionProblem p;
        p.batch = 3;
        p.kv_heads = cases % 2 == 0 ? 3 : 8;
        p.q_heads = p.kv_heads * (cases % 4 < 2 ? 4 : 1);
        p.head_dim = cases % 3 == 0 ? 40 : 128;
        p.mask = mask;
        p.dtype = dtype;
        if (i8)
          p.kv_dtype = DType::kI8;
        p.layout = KvLayout::kBSHD;
        if (mask == MaskKind::kWindow)
          p.window = shapes.Range(1, 700);
        p.kv_lens = {shapes.Range(1100, 1400), shapes.Range(1, 150), 0};
        p.q_lens = {shapes.Range(1, 3), 1, 0};
        const KernelSpec spec = specFor(p);
        ASSERT_TRUE(spec.headed) << p.ToString();
        ASSERT_EQ(spec.queryTile, 1);
        SCOPED_TRACE(p.ToString());
        ASSERT_FALSE(specFor(p, false, 0).readAhead);
        ASSERT_EQ(specFor(p, false, 1).readAhead, !i8);
        for (int64_t aboveBytes : {int64_t{0}, int64_t{1}}) {
          if (i8 && aboveBytes == 1)
            continue; // int8 rows always prefetch
          SCOPED_TRACE(aboveBytes == 1 ? "read ahead" : "prefetched");
          CompiledBackendOptions options;
          options.readAheadAboveBytes = aboveBytes;
          ExpectMatchesOracle(*MakeCompiledBackend(options), p, 500 + cases);
        }
        auto backend = MakeCompiledBackend();
        // A repeated decode step allocates nothing (items, partials and
        // LSE rows of the band reuse their capacity).
        auto data = AttentionData::Create(p);
        ASSERT_TRUE(data.ok());
        Rng values(cases);
        data->Fill(p, values);
        ASSERT_TRUE(backend->Attention(p, data->args()).ok());
        accounting::Meter meter;
        ASSERT_TRUE(backend->Attention(p, data->args()).ok());
        EXPECT_EQ(meter.Read().allocs, 0);
        ++cases;
        for (KvLayout other : {KvLayout::kBHSD, KvLayout::kTransposedV}) {
          p.layout = other;
          EXPECT_FALSE(specFor(p).headed) << p.ToString();
        }
        p.layout = KvLayout::kBSHD;
        p.q_lens = {20, 1, 0};
        EXPECT_FALSE(specFor(p).headed) << p.ToString();
      }
  EXPECT_EQ(cases, 16);
}

// The read-ahead decode kernel (KernelSpec::readAhead: each KV tile's K and
// V rows read once before its compute, nothing prefetched), forced onto
// small shapes (readAheadAboveBytes 1): kv heads 1 and 4, GQA groups 1 and
// 4, every mask, head_dim 40 (tails) and 128, ragged q_len 1..3 with an
// empty sequence and a partial last tile, one sequence long enough for the
// threads to split its keys.
TEST(CompiledBackendTest, ReadAheadDecodeAgainstOracle) {
  Rng shapes(43);
  int cases = 0;
  for (MaskKind mask :
       {MaskKind::kNone, MaskKind::kCausal, MaskKind::kWindow, MaskKind::kBias})
    for (int64_t kvHeads : {1, 4})
      for (int64_t group : {1, 4}) {
        AttentionProblem p;
        p.batch = 3;
        p.kv_heads = kvHeads;
        p.q_heads = kvHeads * group;
        p.head_dim = cases % 3 == 0 ? 40 : 128;
        p.mask = mask;
        if (mask == MaskKind::kWindow)
          p.window = shapes.Range(1, 700);
        p.kv_lens = {shapes.Range(1100, 3000), shapes.Range(1, 150), 0};
        p.q_lens = {shapes.Range(1, 3), 1, 0};
        const KernelSpec spec = specFor(p, false, /*cacheBytes=*/1);
        ASSERT_TRUE(spec.readAhead) << p.ToString();
        ASSERT_EQ(spec.queryTile, 1);
        SCOPED_TRACE(p.ToString());
        CompiledBackendOptions options;
        options.readAheadAboveBytes = 1;
        ExpectMatchesOracle(*MakeCompiledBackend(options), p, 700 + cases);
        ++cases;
      }
  EXPECT_EQ(cases, 16);
}

// Who reads ahead: a decode whose K and V exceed the cache -- f32 of one kv
// head per call (BHSD), f32 or bf16 in the headed BSHD kernel -- and nothing
// else: not a call that fits, not bf16 K/V of one head per call, not int8
// K/V, not a transposed V, not a prefill, not an unknown cache size (0).
// The choice is part of the key.
TEST(KernelSpecTest, ReadAheadOnlyForDecodesLargerThanTheCache) {
  AttentionProblem p;
  p.q_heads = 32;
  p.kv_heads = 8;
  p.head_dim = 128;
  p.q_lens = {1, 1};
  p.kv_lens = {4096, 1000};
  const int64_t bytes = 2 * (4096 + 1000) * 8 * 128 * 4;
  ASSERT_EQ(KvBytes(p), bytes);
  EXPECT_FALSE(specFor(p, false, bytes).readAhead);
  EXPECT_FALSE(specFor(p, false, 0).readAhead);
  const KernelSpec ra = specFor(p, false, bytes - 1);
  EXPECT_TRUE(ra.readAhead);
  EXPECT_EQ(ra.key(), "d128_f32_none_v_g4_q1_ra");
  EXPECT_EQ(specFor(p, false, bytes).key(), "d128_f32_none_v_g4_q1");
  AttentionProblem other = p;
  other.dtype = DType::kBF16;
  EXPECT_FALSE(specFor(other, false, 1).readAhead);
  other = p;
  other.kv_dtype = DType::kI8;
  EXPECT_FALSE(specFor(other, false, 1).readAhead);
  other = p;
  other.layout = KvLayout::kTransposedV;
  EXPECT_FALSE(specFor(other, false, 1).readAhead);
  other = p;
  other.layout = KvLayout::kBSHD;
  ASSERT_TRUE(specFor(other, false, 1).headed);
  EXPECT_TRUE(specFor(other, false, bytes - 1).readAhead);
  EXPECT_EQ(specFor(other, false, bytes - 1).key(),
            "d128_f32_none_v_g4_q1_heads_ra");
  EXPECT_FALSE(specFor(other, false, bytes).readAhead);
  EXPECT_FALSE(specFor(other, false, 0).readAhead);
  other.dtype = DType::kBF16;
  EXPECT_TRUE(specFor(other, false, 1).readAhead);
  other.dtype = DType::kF32;
  other.kv_dtype = DType::kI8;
  ASSERT_TRUE(specFor(other, false, 1).headed);
  EXPECT_FALSE(specFor(other, false, 1).readAhead);
  other = p;
  other.q_lens = {20, 1};
  EXPECT_FALSE(specFor(other, false, 1).readAhead);
}

// The headed kernel keeps every head's state on the stack, so a band holds
// only as many heads as 256 KiB of state allows: wide heads with a large
// group go in several bands (the last one shorter), and a head too large
// for two in a band runs the kernel per head.
TEST(CompiledBackendTest, HeadedBandsBoundTheirState) {
  AttentionProblem p;
  p.batch = 2;
  p.kv_heads = 7;
  p.q_heads = 7 * 16;
  p.head_dim = 512;
  p.layout = KvLayout::kBSHD;
  p.mask = MaskKind::kCausal;
  p.kv_lens = {1200, 33};
  p.q_lens = {1, 1};
  EXPECT_EQ(headedBand(p), 3) << p.ToString(); // 70 KiB of state per head
  ASSERT_TRUE(specFor(p).headed);
  SCOPED_TRACE(p.ToString());
  ExpectMatchesOracle(*MakeCompiledBackend(), p, 77);
  p.q_heads = 7 * 64;
  EXPECT_EQ(headedBand(p), 1) << p.ToString();
  EXPECT_FALSE(specFor(p).headed) << p.ToString();
  p.q_heads = 7;
  p.head_dim = 64;
  EXPECT_EQ(headedBand(p), 7) << p.ToString();
}

// A KV-cache prefix: extents (capacity) larger than the lengths, strides of
// the capacity; the kernel reads only [0, kv_len).
TEST(CompiledBackendTest, CachePrefixWithCapacityStrides) {
  for (KvLayout layout :
       {KvLayout::kBHSD, KvLayout::kBSHD, KvLayout::kTransposedV}) {
    AttentionProblem p;
    p.batch = 2;
    p.q_heads = 4;
    p.kv_heads = 2;
    p.head_dim = 64;
    p.q_lens = {1, 5};
    p.kv_lens = {77, 130};
    p.mask = MaskKind::kCausal;
    p.layout = layout;
    SCOPED_TRACE(p.ToString());
    // Capacity 256: extents and strides of 256 keys.
    ExpectMatchesOracle(*MakeCompiledBackend(), p, 3, ValueProfile::kNormal,
                        /*kv_pad=*/256 - p.max_kv_len());
  }
}

// New lengths reuse the compiled kernel, and a warmed call never touches the
// heap: compiled code keeps all tiles in stack buffers hoisted out of the
// loops, and the backend's workspaces are sized by the first call of a shape.
TEST(CompiledBackendTest, NoRecompileForNewLengthsAndNoHeapAllocations) {
  ASSERT_TRUE(accounting::AllocHooksInstalled());
  AttentionProblem p;
  p.head_dim = 32;
  p.mask = MaskKind::kCausal;
  auto backend = MakeCompiledBackend();
  std::string err;
  // The kernels of this shape: decode (q_len < 4) and the prefill kernels of
  // 16, 32 and 64 query rows (queryTileFor: MHA grows its tile with the
  // longest query block).
  for (int64_t q : {1, 16, 32, 64}) {
    p.q_lens = {q};
    p.kv_lens = {q};
    ASSERT_NE(globalKernelCache().get(specFor(p), err), nullptr) << err;
  }
  const int64_t compiles = globalKernelCache().compilations();
  for (int64_t len : {1, 17, 64, 65, 200}) {
    p.q_lens = {len};
    p.kv_lens = {len + 3};
    SCOPED_TRACE(p.ToString());
    ExpectMatchesOracle(*backend, p, len);
    auto data = AttentionData::Create(p);
    ASSERT_TRUE(data.ok());
    Rng values(len);
    data->Fill(p, values);
    accounting::Meter meter;
    ASSERT_TRUE(backend->Attention(p, data->args()).ok());
    EXPECT_EQ(meter.Read().allocs, 0);
  }
  EXPECT_EQ(globalKernelCache().compilations(), compiles);
}

AttentionBlockProblem Block(std::string_view text) {
  StatusOr<AttentionBlockProblem> p = ParseAttentionBlockProblem(text);
  EXPECT_TRUE(p.ok()) << p.status().message();
  return p.value();
}

// The compiled attention block (attnkit-split-heads' loop over KV heads)
// against the f64 oracle through the runner: output, the new cache slots,
// every other cache byte. GQA prefill past the 16-row and 64-key tiles,
// decode after a context with bf16 weights, biases and Wo, ragged with an
// empty sequence in the transposed-V layout, MQA with Wo split over head
// bands (batch 1: one band per thread, partial Y summed), odd hidden and
// head_dim. Each case twice (the second call finds its kernel).
TEST(CompiledBlockTest, MatchesTheOracle) {
  auto compiled = MakeCompiledBackend();
  Backend *twice[] = {compiled.get(), compiled.get()};
  for (const char *text : {
           "b=1,hq=8,hkv=2,d=32,q=70,kv=70,mask=causal,dtype=f32,layout=bhsd,"
           "hidden=300,w=f32,qkv_bias=0,wo=0",
           "b=2,hq=4,hkv=1,d=16,q=1:1,kv=37:9,mask=window:4,dtype=f32,"
           "layout=bshd,hidden=33,w=bf16,qkv_bias=1,wo=1",
           "b=3,hq=2,hkv=2,d=5,q=3:0:7,kv=6:4:7,mask=none,dtype=f32,layout=tv,"
           "hidden=17,w=f32,qkv_bias=1,wo=0",
           "b=1,hq=6,hkv=3,d=24,q=9,kv=20,mask=causal,dtype=f32,layout=bhsd,"
           "hidden=70,w=bf16,qkv_bias=0,wo=1",
           "b=1,hq=4,hkv=4,d=16,q=2,kv=81,mask=none,dtype=f32,layout=tv,"
           "hidden=48,w=f32,qkv_bias=1,wo=1",
       }) {
    SCOPED_TRACE(text);
    const std::vector<harness::CheckResult> r =
        harness::testing::ExpectBlockMatchesOracle(twice, Block(text), 23);
    EXPECT_EQ(r.size(), 2u);
  }
}

// Decode with the compiled block: one new token per sequence, projected
// straight into its cache slot by the kernel specialized on one token,
// whose every intermediate is statically shaped and on the stack. Once its
// kernel is compiled, a step allocates nothing (heap or compiled-code
// allocations, which reach the same meter) and copies nothing; lengths
// that grow each step never recompile.
TEST(CompiledBlockTest, DecodeStepsAllocateAndCopyNothing) {
  ASSERT_TRUE(accounting::AllocHooksInstalled());
  auto compiled = MakeCompiledBackend();
  AttentionBlockProblem last =
      Block("b=2,hq=8,hkv=2,d=64,q=1:1,kv=48:40,mask=causal,dtype=f32,"
            "layout=bhsd,hidden=256,w=bf16,qkv_bias=1,wo=1");
  StatusOr<AttentionBlockData> d = AttentionBlockData::Create(last);
  ASSERT_TRUE(d.ok());
  Rng rng(5);
  d.value().Fill(last, rng);
  const AttentionBlockArgs &a = d.value().args();
  ASSERT_TRUE(compiled->AttentionBlock(last, a).ok()); // compiles
  const int64_t compiles = globalKernelCache().compilations();
  harness::testing::ExpectBlockDecodeStepsAllocateAndCopyNothing(*compiled,
                                                                 last, a, 8);
  EXPECT_EQ(globalKernelCache().compilations(), compiles);
  // Batch 1 splits the KV heads over the threads; Wo's partial sums live in
  // a workspace sized on the first call, then reused.
  AttentionBlockProblem one =
      Block("b=1,hq=8,hkv=2,d=64,q=1,kv=30,mask=none,dtype=f32,layout=tv,"
            "hidden=128,w=f32,qkv_bias=0,wo=1");
  StatusOr<AttentionBlockData> d1 = AttentionBlockData::Create(one);
  ASSERT_TRUE(d1.ok());
  d1.value().Fill(one, rng);
  ASSERT_TRUE(compiled->AttentionBlock(one, d1.value().args()).ok());
  accounting::Meter meter;
  ASSERT_TRUE(compiled->AttentionBlock(one, d1.value().args()).ok());
  EXPECT_EQ(meter.Read().allocs, 0);
}

// What the compiled block does not take is declined by name, not computed
// wrongly: an additive attention bias.
TEST(CompiledBlockTest, AnAttentionBiasIsDeclinedByName) {
  auto compiled = MakeCompiledBackend();
  const AttentionBlockProblem p =
      Block("b=1,hq=2,hkv=1,d=8,q=3,kv=3,mask=bias,dtype=f32,layout=bhsd,"
            "hidden=16,w=f32,qkv_bias=0,wo=0");
  const Status s = compiled->SupportsBlock(p);
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("mask=bias"), std::string::npos) << s.message();
  StatusOr<AttentionBlockData> d = AttentionBlockData::Create(p);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(compiled->AttentionBlock(p, d.value().args()).code(),
            StatusCode::kUnimplemented);
}

// Compiled code allocates through the memref heap functions (the AOT objects
// link them, the JIT maps them); they reach the one allocation meter, each
// call counted once.
extern "C" void *_mlir_memref_to_llvm_alloc(size_t size);
extern "C" void *_mlir_memref_to_llvm_aligned_alloc(size_t alignment,
                                                    size_t size);
extern "C" void _mlir_memref_to_llvm_free(void *p);

TEST(CompiledBackendTest, CompiledCodeAllocationsReachTheMeter) {
  ASSERT_TRUE(accounting::AllocHooksInstalled());
  accounting::Meter meter;
  void *a = _mlir_memref_to_llvm_alloc(100);
  void *b = _mlir_memref_to_llvm_aligned_alloc(64, 100);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 64, 0u);
  _mlir_memref_to_llvm_free(a);
  _mlir_memref_to_llvm_free(b);
  const accounting::Counts c = meter.Read();
  EXPECT_EQ(c.allocs, 2);
  EXPECT_EQ(c.frees, 2);
  // 100 bytes, and 100 rounded up to the 64-byte alignment.
  EXPECT_EQ(c.bytes_allocated, 100 + 128);
}

// The compiled append is bit-exact with the portable strided one in every
// cache layout and dtype, for ragged positions (one sequence appends nothing,
// one fills the cache to capacity) and for contiguous and strided new
// tokens; it writes nothing else (whole buffers compared) and, warmed, it
// allocates nothing.
TEST(CompiledBackendTest, AppendKvBitExactWithStridedAppend) {
  const std::array<int64_t, 4> cache{3, 2, 40, 24}, fresh{3, 2, 5, 24};
  auto backend = MakeCompiledBackend();
  int checked = 0;
  for (KvLayout layout :
       {KvLayout::kBHSD, KvLayout::kBSHD, KvLayout::kTransposedV})
    for (DType dtype : {DType::kF32, DType::kBF16})
      for (bool stridedTokens : {false, true}) {
        SCOPED_TRACE(std::string(KvLayoutName(layout)) + " " +
                     std::string(DTypeName(dtype)) +
                     (stridedTokens ? " strided tokens" : ""));
        Tensor kc[2], vc[2];
        Rng rng(21);
        for (int c = 0; c < 2; ++c) {
          kc[c] =
              Tensor::Allocate(dtype, cache, KvStrides(layout, false, cache));
          vc[c] =
              Tensor::Allocate(dtype, cache, KvStrides(layout, true, cache));
        }
        FillNormal(kc[0].view, rng);
        FillNormal(vc[0].view, rng);
        std::memcpy(kc[1].buffer.data(), kc[0].buffer.data(),
                    kc[0].buffer.size());
        std::memcpy(vc[1].buffer.data(), vc[0].buffer.data(),
                    vc[0].buffer.size());
        // Strided tokens: head_dim is not the unit-stride dim.
        const std::array<int64_t, 4> tokStrides =
            stridedTokens ? std::array<int64_t, 4>{2 * 5 * 24, 5 * 24, 1, 5}
                          : ContiguousStrides(fresh);
        Tensor nk = Tensor::Allocate(dtype, fresh, tokStrides);
        Tensor nv = Tensor::Allocate(dtype, fresh, tokStrides);
        FillNormal(nk.view, rng);
        FillNormal(nv.view, rng);
        const std::vector<int64_t> pos{7, 3, 35}, lens{3, 0, 5};
        KvAppendArgs ref{kc[0].view, vc[0].view, nk.view, nv.view,
                         pos,        lens,       {},      {}};
        KvAppendArgs got{kc[1].view, vc[1].view, nk.view, nv.view,
                         pos,        lens,       {},      {}};
        AppendKvStrided(ref);
        // The first append of a spec compiles (and allocates); warm the
        // backend on a third cache of the same layout, then measure.
        Tensor kw = Tensor::Allocate(dtype, cache, kc[0].view.strides);
        Tensor vw = Tensor::Allocate(dtype, cache, vc[0].view.strides);
        ASSERT_TRUE(
            backend
                ->AppendKv(
                    {kw.view, vw.view, nk.view, nv.view, pos, lens, {}, {}})
                .ok());
        accounting::Meter meter;
        ASSERT_TRUE(backend->AppendKv(got).ok());
        EXPECT_EQ(meter.Read().allocs, 0);
        EXPECT_EQ(std::memcmp(kc[0].buffer.data(), kc[1].buffer.data(),
                              kc[0].buffer.size()),
                  0);
        EXPECT_EQ(std::memcmp(vc[0].buffer.data(), vc[1].buffer.data(),
                              vc[0].buffer.size()),
                  0);
        // The tokens really landed (the comparison is not of two no-ops).
        EXPECT_EQ(kc[1].view.Load(2, 1, 39, 23), nk.view.Load(2, 1, 4, 23));
        EXPECT_EQ(vc[1].view.Load(0, 0, 7, 0), nv.view.Load(0, 0, 0, 0));
        ++checked;
      }
  EXPECT_EQ(checked, 12);
  // Past the capacity: the validation error, nothing written.
  Tensor kc = Tensor::Allocate(DType::kF32, cache,
                               KvStrides(KvLayout::kBHSD, false, cache));
  Tensor vc = Tensor::Allocate(DType::kF32, cache,
                               KvStrides(KvLayout::kBHSD, true, cache));
  Tensor nk = Tensor::Contiguous(DType::kF32, fresh);
  const std::vector<int64_t> pos{36, 0, 0}, lens{5, 1, 1};
  EXPECT_EQ(
      backend->AppendKv({kc.view, vc.view, nk.view, nk.view, pos, lens, {}, {}})
          .code(),
      StatusCode::kOutOfRange);
}

// The kernels compiled ahead of time (build-time attnkit-compile + clang-22)
// are served without JIT, and agree with the JIT'd kernels of the same
// specialization and with the oracle — prefill and decode kernels.
TEST(CompiledBackendTest, AotAndJitKernelsAgree) {
  if (aotKernels().empty())
    GTEST_SKIP() << "built with ATTNKIT_AOT_KERNELS=OFF";
  struct Case {
    int64_t d, g, q, n;
    DType dtype;
    MaskKind mask;
    bool bf16Dot = false;
    int64_t kvHeads = 1;    // > 1: a BSHD decode, the headed kernel
    bool readAhead = false; // the spec's, as for K/V larger than the cache
  };
  // bf16: both ISA variants (the vdpbf16ps one where the CPU has it).
  for (const Case &c :
       {Case{64, 1, 70, 150, DType::kF32, MaskKind::kCausal},
        Case{128, 4, 1, 300, DType::kBF16, MaskKind::kNone},
        Case{128, 4, 1, 300, DType::kBF16, MaskKind::kNone, true},
        Case{64, 4, 40, 130, DType::kBF16, MaskKind::kCausal},
        Case{64, 4, 40, 130, DType::kBF16, MaskKind::kCausal, true},
        Case{128, 4, 1, 300, DType::kF32, MaskKind::kCausal, false, 3},
        Case{128, 1, 1, 300, DType::kBF16, MaskKind::kNone, true, 3},
        Case{128, 4, 1, 300, DType::kBF16, MaskKind::kCausal, false, 3, true},
        Case{128, 4, 1, 300, DType::kF32, MaskKind::kCausal, false, 1, true}}) {
    AttentionProblem p;
    p.kv_heads = c.kvHeads;
    p.q_heads = c.g * c.kvHeads;
    p.layout = c.kvHeads > 1 ? KvLayout::kBSHD : KvLayout::kBHSD;
    p.head_dim = c.d;
    p.q_lens = {c.q};
    p.kv_lens = {c.n};
    p.dtype = c.dtype;
    p.mask = c.mask;
    SCOPED_TRACE(p.ToString());
    const KernelSpec spec =
        specFor(p, c.bf16Dot, c.readAhead ? int64_t{1} : LastLevelCacheBytes());
    SCOPED_TRACE(spec.key());
    EXPECT_EQ(spec.bf16Dot, c.bf16Dot && CpuHasAvx512Bf16());
    ASSERT_EQ(spec.readAhead, c.readAhead);
    ASSERT_EQ(spec.headed, c.kvHeads > 1);
    CompileOptions aotOpts, jitOpts;
    jitOpts.useAot = false;
    KernelCache aotCache(aotOpts), jitCache(jitOpts);
    std::string err;
    const CompiledKernel *aot = aotCache.get(spec, err);
    const CompiledKernel *jit = jitCache.get(spec, err);
    ASSERT_NE(aot, nullptr) << err;
    ASSERT_NE(jit, nullptr) << err;
    EXPECT_TRUE(aot->aot()) << spec.key() << " is not among the AOT kernels";
    EXPECT_FALSE(jit->aot());
    EXPECT_EQ(aotCache.compilations(), 0);
    EXPECT_EQ(jitCache.compilations(), 1);
    // The backend is served the AOT kernel (the global cache prefers it), so
    // this checks the AOT code against the oracle.
    const CompiledKernel *served = globalKernelCache().get(spec, err);
    ASSERT_NE(served, nullptr) << err;
    EXPECT_TRUE(served->aot());
    ExpectMatchesOracle(*MakeCompiledBackend({.bf16Dot = c.bf16Dot}), p, 17);

    auto data = AttentionData::Create(p);
    ASSERT_TRUE(data.ok());
    Rng values(17);
    data->Fill(p, values);
    const AttentionArgs &a = data->args();
    const int64_t h = c.kvHeads;
    std::vector<float> outJit(h * c.g * c.q * c.d), lse(h * c.g * c.q);
    // Every kv head of the problem in one call: the headed kernel's band.
    auto run = [&](const CompiledKernel &kernel, float *out) {
      MemRefDesc<4> qd{
          a.q.data,
          a.q.data,
          0,
          {h, c.g, c.q, c.d},
          {c.g * a.q.strides[1], a.q.strides[1], a.q.strides[2], 1}};
      MemRefDesc<3> kd{a.k.data,
                       a.k.data,
                       0,
                       {h, c.n, c.d},
                       {a.k.strides[1], a.k.strides[2], 1}};
      MemRefDesc<3> vd{a.v.data,
                       a.v.data,
                       0,
                       {h, c.n, c.d},
                       {a.v.strides[1], a.v.strides[2], 1}};
      MemRefDesc<4> bd{out, out, 0, {h, c.g, 0, 0}, {0, 0, 0, 1}};
      MemRefDesc<2> sd{out, out, 0, {h, 0}, {0, 1}}; // no i8 K/V: not read
      MemRefDesc<4> od{out,
                       out,
                       0,
                       {h, c.g, c.q, c.d},
                       {c.g * c.q * c.d, c.q * c.d, c.d, 1}};
      MemRefDesc<3> ld{
          lse.data(), lse.data(), 0, {h, c.g, c.q}, {c.g * c.q, c.q, 1}};
      const float scale = p.EffectiveScale();
      if (kernel.spec().headed) {
        kernel.headedFn()(&qd, &kd, &vd, &bd, &sd, &sd, &od, &ld, scale,
                          c.n - c.q, 0);
        return;
      }
      // One kv head: the same views without their leading dimension.
      auto drop = [](const auto &m) {
        constexpr int N = std::size(decltype(m.sizes){}) - 1;
        MemRefDesc<N> r{m.allocated, m.aligned, m.offset, {}, {}};
        std::copy(m.sizes + 1, m.sizes + N + 1, r.sizes);
        std::copy(m.strides + 1, m.strides + N + 1, r.strides);
        return r;
      };
      auto q3 = drop(qd), o3 = drop(od);
      auto k2 = drop(kd), v2 = drop(vd), l2 = drop(ld);
      auto b3 = drop(bd);
      auto s1 = drop(sd);
      kernel.fn()(&q3, &k2, &v2, &b3, &s1, &s1, &o3, &l2, scale, c.n - c.q, 0);
    };
    // The output rows the views above write: [heads, q, d], contiguous.
    ASSERT_EQ(a.out.strides[3], 1);
    ASSERT_EQ(a.out.strides[2], c.d);
    ASSERT_EQ(a.out.strides[1], c.q * c.d);
    run(*aot, static_cast<float *>(a.out.data));
    run(*jit, outJit.data());
    // Two compilers (clang -O3 vs the JIT's LLVM pipeline) of one IR: equal
    // to f32 rounding.
    const float *outAot = static_cast<const float *>(a.out.data);
    for (size_t i = 0; i < outJit.size(); ++i)
      ASSERT_NEAR(outAot[i], outJit[i],
                  1e-6f * std::max(1.0f, std::fabs(outJit[i])))
          << "element " << i;
  }
}

// Every kernel of compiled/aot_kernels.inc (the list CMake compiled) is
// served by the kernel cache for the spec the backend computes from a problem
// of that shape, with no JIT compile: a kernel the lookup missed would
// silently be JIT-compiled instead.
TEST(CompiledBackendTest, EveryListedAotKernelIsServedWithoutJit) {
  if (aotKernels().empty())
    GTEST_SKIP() << "built with ATTNKIT_AOT_KERNELS=OFF";
  EXPECT_EQ(aotKernels().size(), std::size(kAotKernelList));
  KernelCache cache;
  for (const AotListed &listed : kAotKernelList) {
    AttentionProblem p;
    // A headed kernel is a BSHD decode's, for 2+ kv heads.
    p.kv_heads = listed.spec.headed ? 2 : 1;
    p.q_heads = listed.spec.group * p.kv_heads;
    p.layout = listed.spec.headed ? KvLayout::kBSHD : KvLayout::kBHSD;
    p.head_dim = listed.spec.headDim;
    p.dtype = listed.spec.elem;
    p.mask = listed.spec.mask;
    if (p.mask == MaskKind::kWindow)
      p.window = 8;
    p.q_lens = {listed.spec.queryTile};
    p.kv_lens = {100};
    ASSERT_TRUE(p.Validate().ok()) << p.ToString();
    SCOPED_TRACE(listed.spec.key());
    // The backend's spec, with or without vdpbf16ps as listed (with it only
    // where this CPU has AVX512_BF16); a read-ahead kernel's for K/V larger
    // than the cache (here 1 byte: these 100 keys).
    const KernelSpec spec =
        specFor(p, listed.spec.bf16Dot,
                listed.spec.readAhead ? int64_t{1} : LastLevelCacheBytes());
    KernelSpec asListed = spec;
    asListed.bf16Dot = listed.spec.bf16Dot;
    EXPECT_EQ(asListed, listed.spec);
    EXPECT_EQ(spec.bf16Dot, listed.spec.bf16Dot && CpuHasAvx512Bf16());
    std::string err;
    const CompiledKernel *kernel = cache.get(listed.spec, err);
    if (listed.spec.bf16Dot && !CpuHasAvx512Bf16()) {
      // Built for the other ISA: refused, never run.
      EXPECT_EQ(kernel, nullptr);
      EXPECT_NE(err.find("AVX512_BF16"), std::string::npos) << err;
      continue;
    }
    ASSERT_NE(kernel, nullptr) << err;
    EXPECT_TRUE(kernel->aot());
  }
  EXPECT_EQ(cache.compilations(), 0);
}

TEST(CompiledBackendTest, KernelCacheIsThreadSafe) {
  KernelCache cache;
  KernelSpec spec;
  spec.headDim = 24;
  std::vector<const CompiledKernel *> got(4);
#pragma omp parallel for num_threads(4)
  for (int t = 0; t < 4; ++t) {
    std::string err;
    got[t] = cache.get(spec, err);
  }
  EXPECT_EQ(cache.compilations(), 1);
  for (const CompiledKernel *k : got)
    EXPECT_EQ(k, got[0]);
  ASSERT_NE(got[0], nullptr);
  EXPECT_GT(got[0]->compileMillis(), 0.0);
}

TEST(PipelineTest, StageTableRoundTrips) {
  attnkit::testing::ExpectRoundTrip(kStageNames, "Stage");
}

} // namespace
} // namespace attnkit::compiled
