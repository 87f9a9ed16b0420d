#include "runtime/split_kv.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "runtime/random.h"

namespace attnkit {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The ranges of all `plan.splits` slots of an item over `keys`: consecutive,
// their union exactly `keys`, every boundary but the end on the alignment
// grid. Returns the ranges for further checks.
std::vector<KeyRange> CheckCover(const KvSplitPlan& plan, KeyRange keys) {
  std::vector<KeyRange> ranges;
  int64_t at = keys.begin;
  for (int64_t s = 0; s < plan.splits; ++s) {
    const KeyRange r = plan.Range(keys, s);
    EXPECT_EQ(r.begin, at) << "split " << s << " of " << plan.splits;
    EXPECT_GE(r.end, r.begin) << "split " << s;
    if (r.end != keys.end) {
      EXPECT_EQ((r.end - keys.begin) % kKvSplitAlign, 0) << "split " << s;
    }
    at = r.end;
    ranges.push_back(r);
  }
  EXPECT_EQ(at, keys.end) << "splits=" << plan.splits;
  return ranges;
}

// K and V bytes of a call: every sequence's keys (ragged, one empty), every
// kv head, the K/V element size; a call streams from DRAM only past the
// cache it is given, and never when the cache size is unknown (0).
TEST(DecodeKvBytesTest, SumsSequencesAndComparesWithTheCache) {
  auto parsed = ParseProblem("b=3,hq=8,hkv=2,d=64,q=1:1:1,kv=100:0:28");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  AttentionProblem p = *parsed;
  EXPECT_EQ(KvBytes(p), 2 * 128 * 2 * 64 * 4);
  p.dtype = DType::kBF16;
  EXPECT_EQ(KvBytes(p), 2 * 128 * 2 * 64 * 2);
  p.kv_dtype = DType::kI8;
  EXPECT_EQ(KvBytes(p), 2 * 128 * 2 * 64);
  const int64_t bytes = KvBytes(p);
  EXPECT_TRUE(DecodeKvStreamsFromDram(p, bytes - 1));
  EXPECT_FALSE(DecodeKvStreamsFromDram(p, bytes));
  EXPECT_FALSE(DecodeKvStreamsFromDram(p, 0));
  EXPECT_EQ(DecodeKvStreamsFromDram(p),
            DecodeKvStreamsFromDram(p, LastLevelCacheBytes()));
  // K prefetched above the private caches, and always when they are
  // unknown.
  EXPECT_TRUE(DecodePrefetchesKeys(p, bytes - 1));
  EXPECT_FALSE(DecodePrefetchesKeys(p, bytes));
  EXPECT_TRUE(DecodePrefetchesKeys(p, 0));
  EXPECT_EQ(DecodePrefetchesKeys(p),
            DecodePrefetchesKeys(p, PrivateCacheBytes()));
}

// A call's bytes: Q in its dtype and the f32 output for every query of
// every query head (ragged, one empty), plus K and V; its output streams
// past the caches only when the call outgrows the cache it is given, never
// when the cache size is unknown (0).
TEST(CallBytesTest, SumsQOutKvAndComparesWithTheCache) {
  auto parsed = ParseProblem("b=3,hq=8,hkv=2,d=64,q=5:0:2,kv=100:0:28");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  AttentionProblem p = *parsed;
  EXPECT_EQ(CallBytes(p), 7 * 8 * 64 * (4 + 4) + KvBytes(p));
  p.dtype = DType::kBF16;
  EXPECT_EQ(CallBytes(p), 7 * 8 * 64 * (2 + 4) + KvBytes(p));
  p.kv_dtype = DType::kI8;
  EXPECT_EQ(CallBytes(p), 7 * 8 * 64 * (2 + 4) + 2 * 128 * 2 * 64);
  const int64_t bytes = CallBytes(p);
  EXPECT_TRUE(OutputStreamsPastCache(p, bytes - 1));
  EXPECT_FALSE(OutputStreamsPastCache(p, bytes));
  EXPECT_FALSE(OutputStreamsPastCache(p, 0));
  EXPECT_EQ(OutputStreamsPastCache(p),
            OutputStreamsPastCache(p, LastLevelCacheBytes()));
}

TEST(SplitKvPlanTest, SplitsOnlyWhenItemsAreFewerThanThreads) {
  EXPECT_EQ(PlanKvSplits(/*items=*/2, /*threads=*/2, 1 << 20).splits, 1);
  EXPECT_EQ(PlanKvSplits(8, 2, 1 << 20).splits, 1);
  EXPECT_EQ(PlanKvSplits(0, 2, 1 << 20).splits, 1);
  EXPECT_EQ(PlanKvSplits(1, 1, 1 << 20).splits, 1);
  EXPECT_EQ(PlanKvSplits(1, 2, 1 << 20).splits, 4);  // two per thread
  EXPECT_EQ(PlanKvSplits(3, 4, 1 << 20).splits, 3);
  EXPECT_EQ(PlanKvSplits(1, 256, 1 << 20).splits, kMaxKvSplits);
  // Too short to give every split kMinKeysPerSplit keys.
  EXPECT_EQ(PlanKvSplits(1, 2, kMinKeysPerSplit * 2 - 1).splits, 1);
  EXPECT_EQ(PlanKvSplits(1, 2, kMinKeysPerSplit * 2).splits, 2);
  EXPECT_EQ(PlanKvSplits(1, 8, 0).splits, 1);
}

// Every planned item, whatever its length up to the planned maximum: the
// splits cover its keys exactly, and none is shorter than kMinKeysPerSplit
// unless it is the item's only one.
TEST(SplitKvPlanTest, PlannedSplitsCoverKeysAndStayLongEnough) {
  for (int threads : {2, 3, 8, 64, 200}) {
    for (int64_t items : {1, 2, 5}) {
      for (int64_t max_keys : {0, 100, 1023, 1024, 5000, 40000}) {
        const KvSplitPlan plan = PlanKvSplits(items, threads, max_keys);
        ASSERT_GE(plan.splits, 1);
        ASSERT_LE(plan.splits, kMaxKvSplits);
        for (int64_t n = 0; n <= max_keys; n += n < 3000 ? 1 : 97) {
          for (int64_t begin : {0, 37}) {
            const KeyRange keys{begin, begin + n};
            const std::vector<KeyRange> ranges = CheckCover(plan, keys);
            int64_t used = 0;
            for (const KeyRange& r : ranges) {
              if (r.empty()) continue;
              ++used;
              if (plan.SplitsFor(n) > 1) {
                ASSERT_GE(r.end - r.begin, kMinKeysPerSplit)
                    << "n=" << n << " splits=" << plan.SplitsFor(n);
              }
            }
            ASSERT_EQ(used, n == 0 ? 0 : plan.SplitsFor(n)) << "n=" << n;
            if (HasFailure()) return;
          }
        }
      }
    }
  }
}

// Forced splits (tests of the merge on short contexts) still cover exactly;
// they may leave some splits empty.
TEST(SplitKvPlanTest, ForcedSplitsCoverKeys) {
  for (int64_t force : {1, 2, 3, 7, 64}) {
    const KvSplitPlan plan = PlanKvSplits(100, 2, 10, force);
    EXPECT_TRUE(plan.forced);
    EXPECT_EQ(plan.splits, force);
    for (int64_t n : {0, 1, 63, 64, 65, 100, 300, 513, 5000}) {
      EXPECT_EQ(plan.SplitsFor(n), force);
      CheckCover(plan, {5, 5 + n});
      if (HasFailure()) return;
    }
  }
}

// Attention of `rows` rows over keys [0, n): logits x[r][j] in log2 units
// (scale * log2(e) already applied, as the kernels do before anything is
// split) and values v[j][e].
struct Rows {
  int64_t rows = 0, n = 0, d = 0;
  std::vector<float> x, v;
  bool masked(int64_t r, int64_t j) const { return x[r * n + j] == kNegInf; }
};

Rows RandomRows(Rng& rng, int64_t rows, int64_t n, int64_t d, double offset) {
  Rows a{rows, n, d, {}, {}};
  for (int64_t i = 0; i < rows * n; ++i) {
    a.x.push_back(static_cast<float>(offset + 6.0 * rng.Normal()));
  }
  for (int64_t i = 0; i < n * d; ++i) {
    a.v.push_back(static_cast<float>(rng.Normal()));
  }
  return a;
}

// The double-precision answer over all keys; zeros for a row with none.
std::vector<double> Exact(const Rows& a) {
  std::vector<double> out(static_cast<size_t>(a.rows * a.d), 0.0);
  for (int64_t r = 0; r < a.rows; ++r) {
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < a.n; ++j)
      mx = std::max<double>(mx, a.x[r * a.n + j]);
    if (std::isinf(mx)) continue;
    double l = 0;
    for (int64_t j = 0; j < a.n; ++j) {
      if (a.masked(r, j)) continue;
      const double p = std::exp2(double{a.x[r * a.n + j]} - mx);
      l += p;
      for (int64_t e = 0; e < a.d; ++e)
        out[r * a.d + e] += p * a.v[j * a.d + e];
    }
    for (int64_t e = 0; e < a.d; ++e) out[r * a.d + e] /= l;
  }
  return out;
}

// A split's partial as the simd kernels leave it: f32 online softmax in
// log2 units, unnormalized o, with m lagging the true max by `lag` (lazy
// rescaling keeps a stale max up to 8 below it). Empty splits get garbage o
// and l: the merge must not read them.
void Exp2Partial(const Rows& a, KeyRange keys, float lag,
                 const PartialLayout& layout, float* block) {
  for (int64_t r = 0; r < a.rows; ++r) {
    float mx = kNegInf;
    for (int64_t j = keys.begin; j < keys.end; ++j) {
      mx = std::max(mx, a.x[r * a.n + j]);
    }
    float* o = layout.o(block, r);
    if (mx == kNegInf) {
      *layout.m(block, r) = kNegInf;
      *layout.l(block, r) = std::numeric_limits<float>::quiet_NaN();
      for (int64_t e = 0; e < a.d; ++e) {
        o[e] = std::numeric_limits<float>::quiet_NaN();
      }
      continue;
    }
    const float m = mx - lag;
    float l = 0.0f;
    std::fill(o, o + a.d, 0.0f);
    for (int64_t j = keys.begin; j < keys.end; ++j) {
      if (a.masked(r, j)) continue;
      const float p = std::exp2(a.x[r * a.n + j] - m);
      l += p;
      for (int64_t e = 0; e < a.d; ++e) o[e] += p * a.v[j * a.d + e];
    }
    *layout.m(block, r) = m;
    *layout.l(block, r) = l;
  }
}

// A split's partial as the compiled kernels leave it: normalized o and the
// natural-log LSE in the m slots (-inf and zeros for no key), then
// PartialFromLse.
void LsePartial(const Rows& a, KeyRange keys, const PartialLayout& layout,
                float* block) {
  Exp2Partial(a, keys, 0.0f, layout, block);
  for (int64_t r = 0; r < a.rows; ++r) {
    float* m = layout.m(block, r);
    float* o = layout.o(block, r);
    if (*m == kNegInf) {
      std::fill(o, o + a.d, 0.0f);
      continue;
    }
    const float l = *layout.l(block, r);
    for (int64_t e = 0; e < a.d; ++e) o[e] /= l;
    *m = (*m + std::log2(l)) * 0.6931471805599453f;
    *layout.l(block, r) = std::numeric_limits<float>::quiet_NaN();
  }
  PartialFromLse(layout, block, a.rows);
}

// Merges the partials of `ranges` and compares with Exact(a). The bound: f32
// sums of a few hundred terms of |v| ~ 1 (2e-5); and for LSE partials the
// LSE's own rounding, an absolute error of a few ulp of |x| in every
// split's weight (the compiled kernels' output format, not the merge's).
void ExpectMergeExact(const Rows& a, const std::vector<KeyRange>& ranges,
                      bool lse, float lag) {
  const PartialLayout layout{a.rows + 3, (a.d + 7) / 8 * 8};
  std::vector<float> blocks(layout.floats() * ranges.size(), -7.0f);
  for (size_t s = 0; s < ranges.size(); ++s) {
    float* block = blocks.data() + s * layout.floats();
    if (lse) {
      LsePartial(a, ranges[s], layout, block);
    } else {
      Exp2Partial(a, ranges[s], lag, layout, block);
    }
  }
  const std::vector<double> want = Exact(a);
  float max_abs_x = 0.0f;
  for (float x : a.x) {
    if (x != kNegInf) max_abs_x = std::max(max_abs_x, std::abs(x));
  }
  const double tol =
      2e-5 + (lse ? 8 * std::numeric_limits<float>::epsilon() * max_abs_x : 0);
  std::vector<float> out(static_cast<size_t>(a.d));
  for (int64_t r = 0; r < a.rows; ++r) {
    std::fill(out.begin(), out.end(), std::numeric_limits<float>::quiet_NaN());
    MergePartialRow(layout, blocks.data(), static_cast<int64_t>(ranges.size()),
                    r, a.d, out.data());
    for (int64_t e = 0; e < a.d; ++e) {
      ASSERT_FALSE(std::isnan(out[e])) << "row " << r << " e " << e;
      EXPECT_NEAR(out[e], want[r * a.d + e], tol)
          << "row " << r << " e " << e << " lse=" << lse << " lag=" << lag;
    }
  }
}

TEST(SplitKvMergeTest, MergedSubsetsEqualAttentionOverAllKeys) {
  Rng rng(11);
  for (bool lse : {false, true}) {
    for (float lag : {0.0f, 7.5f}) {
      // Logits near 0 and near 1e3 (2^x overflows f32 without the max).
      for (double offset : {0.0, 1000.0}) {
        const Rows a = RandomRows(rng, 5, 700, 24, offset);
        for (int64_t force : {1, 2, 3, 7}) {
          const KvSplitPlan plan = PlanKvSplits(1, 2, a.n, force);
          std::vector<KeyRange> ranges;
          for (int64_t s = 0; s < plan.splits; ++s) {
            ranges.push_back(plan.Range({0, a.n}, s));
          }
          ExpectMergeExact(a, ranges, lse, lag);
        }
        // Uneven, unaligned subsets, with empty ones among them.
        ExpectMergeExact(a, {{0, 1}, {1, 1}, {1, 333}, {333, 700}, {700, 700}},
                         lse, lag);
        if (HasFailure()) return;
      }
    }
  }
}

// Keys some rows cannot see (-inf logits): splits where a row saw nothing
// carry m = -inf and garbage o, l; a row with no visible key at all comes
// out zeros, never NaN.
TEST(SplitKvMergeTest, EmptySplitsAndFullyMaskedRows) {
  Rng rng(12);
  for (bool lse : {false, true}) {
    Rows a = RandomRows(rng, 4, 300, 9, 0.0);
    for (int64_t j = 0; j < a.n; ++j) {
      a.x[0 * a.n + j] = kNegInf;                // row 0: fully masked
      if (j >= 150) a.x[1 * a.n + j] = kNegInf;  // row 1: first half only
      if (j < 290) a.x[2 * a.n + j] = kNegInf;   // row 2: last 10 keys only
    }
    ExpectMergeExact(a, {{0, 64}, {64, 150}, {150, 256}, {256, 300}}, lse,
                     0.0f);
    ExpectMergeExact(a, {{0, 0}, {0, 300}, {300, 300}}, lse, 0.0f);
  }
  // No key at all (kv_len 0): every split empty.
  const PartialLayout layout{2, 4};
  std::vector<float> blocks(layout.floats() * 3,
                            std::numeric_limits<float>::quiet_NaN());
  for (int s = 0; s < 3; ++s) {
    for (int64_t r = 0; r < 2; ++r) {
      *layout.m(blocks.data() + s * layout.floats(), r) = kNegInf;
    }
  }
  float out[4] = {1, 2, 3, 4};
  MergePartialRow(layout, blocks.data(), 3, 1, 4, out);
  for (float x : out) EXPECT_EQ(x, 0.0f);
}

}  // namespace
}  // namespace attnkit
