#include "runtime/kv_cache.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/accounting.h"
#include "runtime/random.h"

// Under AddressSanitizer, let an impossible allocation fail as it does in
// production (nullptr / bad_alloc) instead of aborting the test.
extern "C" const char* __asan_default_options() {
  return "allocator_may_return_null=1";
}

namespace attnkit {
namespace {

constexpr std::byte kSentinel{0xA5};

KvCacheConfig SmallConfig(DType dtype, KvLayout layout) {
  KvCacheConfig c;
  c.layers = 2;
  c.batch = 3;
  c.kv_heads = 2;
  c.head_dim = 5;  // odd: rows are not a multiple of any vector width
  c.capacity = 13;
  c.dtype = dtype;
  c.layout = layout;
  return c;
}

// Byte offset of element (layer, is_v, b, h, t, d) written from the layout's
// definition (runtime/problem.h), independently of KvStrides.
int64_t ExpectedOffset(const KvCacheConfig& c, int64_t layer, bool is_v,
                       int64_t b, int64_t h, int64_t t, int64_t d) {
  const int64_t H = c.kv_heads, S = c.capacity, D = c.head_dim;
  int64_t e = 0;
  if (c.layout == KvLayout::kBSHD) {
    e = ((b * S + t) * H + h) * D + d;
  } else if (c.layout == KvLayout::kTransposedV && is_v) {
    e = ((b * H + h) * D + d) * S + t;
  } else {
    e = ((b * H + h) * S + t) * D + d;
  }
  const int64_t tensor_bytes = c.batch * H * S * D * c.ElementSize();
  const int64_t stride = (tensor_bytes + 63) / 64 * 64;
  return (2 * layer + (is_v ? 1 : 0)) * stride + e * c.ElementSize();
}

class KvCacheLayoutTest
    : public ::testing::TestWithParam<std::tuple<DType, KvLayout>> {};

// After K random ragged steps (0..3 new tokens per sequence and layer, new
// tokens in a token-major view to exercise strided sources), the storage is
// byte-for-byte the sentinel image with exactly the appended tokens at their
// positions: bit-exact appends, nothing written past any length, nothing
// written anywhere else.
TEST_P(KvCacheLayoutTest, RaggedAppendsAreBitExactAndLeaveSentinels) {
  const auto [dtype, layout] = GetParam();
  const KvCacheConfig c = SmallConfig(dtype, layout);
  auto cache_or = KvCache::Create(c);
  ASSERT_TRUE(cache_or.ok()) << cache_or.status().ToString();
  KvCache& cache = *cache_or;
  cache.Clear(kSentinel);
  std::vector<std::byte> expected(cache.bytes().size(), kSentinel);
  std::vector<int64_t> len(static_cast<size_t>(c.layers * c.batch), 0);
  const int64_t es = c.ElementSize();

  Rng rng(42);
  for (int step = 0; step < 8; ++step) {
    for (int64_t l = 0; l < c.layers; ++l) {
      std::vector<int64_t> n(static_cast<size_t>(c.batch));
      int64_t max_n = 0;
      for (int64_t b = 0; b < c.batch; ++b) {
        const int64_t room = c.capacity - len[l * c.batch + b];
        n[b] = std::min<int64_t>(rng.Range(0, 3), room);
        max_n = std::max(max_n, n[b]);
      }
      const std::array<int64_t, 4> shape{
          c.batch, c.kv_heads, std::max<int64_t>(max_n, 1), c.head_dim};
      Tensor nk =
          Tensor::Allocate(dtype, shape, PermutedStrides(shape, {0, 2, 1, 3}));
      Tensor nv =
          Tensor::Allocate(dtype, shape, PermutedStrides(shape, {0, 2, 1, 3}));
      FillNormal(nk.view, rng);
      FillNormal(nv.view, rng);
      ASSERT_TRUE(cache.Append(l, nk.view, nv.view, n).ok());
      for (int64_t b = 0; b < c.batch; ++b) {
        for (int64_t t = 0; t < n[b]; ++t) {
          for (int64_t h = 0; h < c.kv_heads; ++h) {
            for (int64_t d = 0; d < c.head_dim; ++d) {
              const int64_t pos = len[l * c.batch + b] + t;
              for (const Tensor* src : {&nk, &nv}) {
                const bool is_v = src == &nv;
                std::memcpy(
                    expected.data() + ExpectedOffset(c, l, is_v, b, h, pos, d),
                    static_cast<const std::byte*>(src->view.data) +
                        src->view.Offset(b, h, t, d) * es,
                    static_cast<size_t>(es));
              }
            }
          }
        }
        len[l * c.batch + b] += n[b];
      }
    }
  }
  for (int64_t l = 0; l < c.layers; ++l) {
    for (int64_t b = 0; b < c.batch; ++b) {
      EXPECT_EQ(cache.lengths(l)[b], len[l * c.batch + b]);
    }
  }
  const auto bytes = cache.bytes();
  ASSERT_EQ(bytes.size(), expected.size());
  for (size_t i = 0; i < bytes.size(); ++i) {
    ASSERT_EQ(bytes[i], expected[i]) << "first differing byte at " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllLayouts, KvCacheLayoutTest,
    ::testing::Combine(::testing::Values(DType::kF32, DType::kBF16),
                       ::testing::Values(KvLayout::kBHSD, KvLayout::kBSHD,
                                         KvLayout::kTransposedV)),
    [](const auto& info) {
      return std::string(DTypeName(std::get<0>(info.param))) + "_" +
             std::string(KvLayoutName(std::get<1>(info.param)));
    });

TEST(KvCacheTest, OverflowNamesTheSequenceAndChangesNothing) {
  KvCacheConfig c = SmallConfig(DType::kBF16, KvLayout::kBSHD);
  c.capacity = 4;
  auto cache = KvCache::Create(c);
  ASSERT_TRUE(cache.ok());
  cache->Clear(kSentinel);
  Tensor t = Tensor::Contiguous(c.dtype, {c.batch, c.kv_heads, 3, c.head_dim});
  Rng rng(1);
  FillNormal(t.view, rng);
  const std::vector<int64_t> first{1, 3, 0};
  ASSERT_TRUE(cache->Append(0, t.view, t.view, first).ok());
  const std::vector<std::byte> before(cache->bytes().begin(),
                                      cache->bytes().end());
  // Sequences 0 and 2 fit; sequence 1 (length 3) cannot take 2 more.
  const std::vector<int64_t> second{2, 2, 2};
  const Status s = cache->Append(0, t.view, t.view, second);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find("sequence 1"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("length 3"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("capacity=4"), std::string::npos) << s.message();
  EXPECT_TRUE(std::equal(before.begin(), before.end(), cache->bytes().begin()));
  EXPECT_EQ(cache->lengths(0)[0], 1);
  EXPECT_EQ(cache->lengths(0)[1], 3);
  EXPECT_EQ(cache->lengths(0)[2], 0);
}

// Truncate forgets tokens without writing; the next append lands where the
// kept context ends. Bad lengths are named and change nothing.
TEST(KvCacheTest, TruncateRollsBackAndTheNextAppendOverwrites) {
  KvCacheConfig c = SmallConfig(DType::kF32, KvLayout::kBHSD);
  auto cache = KvCache::Create(c);
  ASSERT_TRUE(cache.ok());
  cache->Clear(kSentinel);
  Tensor a = Tensor::Contiguous(c.dtype, {c.batch, c.kv_heads, 4, c.head_dim});
  Tensor b = Tensor::Contiguous(c.dtype, {c.batch, c.kv_heads, 4, c.head_dim});
  Rng rng(2);
  FillNormal(a.view, rng);
  FillNormal(b.view, rng);
  const std::vector<int64_t> four{4, 4, 4}, one{1, 1, 1};
  for (int64_t l = 0; l < c.layers; ++l) {
    ASSERT_TRUE(cache->Append(l, a.view, a.view, four).ok());
  }
  const std::vector<std::byte> before(cache->bytes().begin(),
                                      cache->bytes().end());

  const std::vector<int64_t> too_long{2, 5, 0}, negative{2, -1, 0},
      short_list{2, 2};
  Status s = cache->Truncate(too_long);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("lens[1]=5 outside [0, 4]"), std::string::npos)
      << s.message();
  EXPECT_EQ(cache->Truncate(negative).code(), StatusCode::kInvalidArgument);
  s = cache->Truncate(short_list);
  EXPECT_NE(s.message().find("2 entries, expected batch=3"), std::string::npos)
      << s.message();
  EXPECT_EQ(cache->lengths(1)[1], 4);

  const std::vector<int64_t> keep{2, 4, 0};
  ASSERT_TRUE(cache->Truncate(keep).ok());
  EXPECT_TRUE(std::equal(before.begin(), before.end(), cache->bytes().begin()))
      << "Truncate wrote to the storage";
  for (int64_t l = 0; l < c.layers; ++l) {
    EXPECT_EQ(cache->lengths(l)[0], 2);
    EXPECT_EQ(cache->lengths(l)[1], 4);
    EXPECT_EQ(cache->lengths(l)[2], 0);
  }
  ASSERT_TRUE(cache->Append(0, b.view, b.view, one).ok());
  const KvCache::View k = cache->Prefix(0);
  for (int64_t h = 0; h < c.kv_heads; ++h)
    for (int64_t d = 0; d < c.head_dim; ++d) {
      EXPECT_EQ(k.k.Load(0, h, 2, d), b.view.Load(0, h, 0, d));
      EXPECT_EQ(k.k.Load(1, h, 4, d), b.view.Load(1, h, 0, d));
      EXPECT_EQ(k.k.Load(2, h, 0, d), b.view.Load(2, h, 0, d));
      EXPECT_EQ(k.k.Load(0, h, 1, d), a.view.Load(0, h, 1, d));
    }
}

TEST(KvCacheTest, BadInputIsNamed) {
  KvCacheConfig c = SmallConfig(DType::kF32, KvLayout::kBHSD);
  c.capacity = 0;
  Status s = KvCache::Create(c).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("capacity=0"), std::string::npos);
  c = SmallConfig(DType::kF32, KvLayout::kBHSD);
  c.head_dim = 0;
  s = KvCache::Create(c).status();
  EXPECT_NE(s.message().find("head_dim=0"), std::string::npos);
  c = SmallConfig(DType::kF32, KvLayout::kBHSD);
  c.capacity = int64_t{1} << 40;
  c.head_dim = 1024;  // 2^57 bytes: no machine has them
  s = KvCache::Create(c).status();
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("cannot allocate"), std::string::npos);
  c.capacity = int64_t{1} << 60;  // the byte count itself overflows
  s = KvCache::Create(c).status();
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("overflows"), std::string::npos);

  auto cache = KvCache::Create(SmallConfig(DType::kF32, KvLayout::kBHSD));
  ASSERT_TRUE(cache.ok());
  Tensor t = Tensor::Contiguous(DType::kF32, {3, 2, 1, 5});
  s = cache->Append(2, t.view, t.view);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("layer=2"), std::string::npos);
  Tensor wrong = Tensor::Contiguous(DType::kBF16, {3, 2, 1, 5});
  s = cache->Append(0, wrong.view, wrong.view);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("bf16"), std::string::npos) << s.message();
  Tensor short_v = Tensor::Contiguous(DType::kF32, {3, 2, 1, 5});
  Tensor long_k = Tensor::Contiguous(DType::kF32, {3, 2, 2, 5});
  s = cache->Append(0, long_k.view, short_v.view);
  EXPECT_NE(s.message().find("new_v"), std::string::npos) << s.message();
  EXPECT_EQ(cache->max_length(0), 0);
}

TEST(KvCacheTest, PrefixIsAViewWithCapacityStrides) {
  const KvCacheConfig c = SmallConfig(DType::kF32, KvLayout::kTransposedV);
  auto cache = KvCache::Create(c);
  ASSERT_TRUE(cache.ok());
  Tensor t = Tensor::Contiguous(c.dtype, {c.batch, c.kv_heads, 4, c.head_dim});
  const std::vector<int64_t> n{4, 1, 2};
  ASSERT_TRUE(cache->Append(1, t.view, t.view, n).ok());
  const KvCache::View full = cache->Full(1), prefix = cache->Prefix(1);
  EXPECT_EQ(prefix.k.data, full.k.data);
  EXPECT_EQ(prefix.v.data, full.v.data);
  EXPECT_EQ(prefix.k.shape, (std::array<int64_t, 4>{3, 2, 4, 5}));
  EXPECT_EQ(prefix.k.strides, full.k.strides);
  EXPECT_EQ(prefix.v.strides, full.v.strides);
  EXPECT_EQ(prefix.v.strides[2], 1);          // transposed V: seq is contiguous
  EXPECT_EQ(cache->Prefix(0).k.shape[2], 0);  // layers are independent
  EXPECT_EQ(reinterpret_cast<uintptr_t>(full.k.data) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(full.v.data) % 64, 0u);
}

// Runs the portable append and remembers that it did.
class CountingBackend final : public Backend {
 public:
  std::string_view name() const override { return "counting"; }
  Status Attention(const AttentionProblem&, const AttentionArgs&) override {
    return Status::Unimplemented("counting backend has no attention");
  }
  Status AppendKv(const KvAppendArgs& a) override {
    ++appends;
    return Backend::AppendKv(a);
  }
  int appends = 0;
};

TEST(KvCacheTest, OneAllocationAtCreateNoneOnAppendAndCopiesOnlyNewTokens) {
  const KvCacheConfig c = SmallConfig(DType::kBF16, KvLayout::kBHSD);
  accounting::Counts create, append;
  Tensor t = Tensor::Contiguous(c.dtype, {c.batch, c.kv_heads, 2, c.head_dim});
  CountingBackend backend;
  {
    accounting::Meter m;
    auto cache = KvCache::Create(c);
    create = m.Read();
    ASSERT_TRUE(cache.ok());
    accounting::Meter m2;
    ASSERT_TRUE(cache->Append(0, t.view, t.view, &backend).ok());
    ASSERT_TRUE(cache->Append(1, t.view, t.view).ok());
    append = m2.Read();
  }
  EXPECT_EQ(create.allocs, 1);
  EXPECT_GE(create.bytes_allocated,
            2 * c.layers * c.batch * c.kv_heads * c.capacity * c.head_dim * 2);
  EXPECT_EQ(append.allocs, 0);
  EXPECT_EQ(backend.appends, 1);
  // Two layers, 2 tokens each, K and V.
  EXPECT_EQ(append.bytes_copied, 2 * 2 * c.TokenBytesPerLayer());
}

// An i8 cache: its scales live in the same one allocation, Prefix/Full hand
// them out with the K/V views, an append writes int8 rows and scales only
// (counted as copied), and Clear fills the scales too.
TEST(KvCacheTest, I8CacheKeepsItsScalesInItsOneAllocation) {
  const KvCacheConfig c = SmallConfig(DType::kI8, KvLayout::kTransposedV);
  EXPECT_EQ(c.TokenBytesPerLayer(),
            2 * c.batch * c.kv_heads * (c.head_dim + 4));
  accounting::Counts create, append;
  Tensor t =
      Tensor::Contiguous(DType::kF32, {c.batch, c.kv_heads, 2, c.head_dim});
  Rng rng(5);
  FillNormal(t.view, rng);
  {
    accounting::Meter m;
    auto cache = KvCache::Create(c);
    create = m.Read();
    ASSERT_TRUE(cache.ok()) << cache.status().ToString();
    cache->Clear(kSentinel);
    accounting::Meter m2;
    ASSERT_TRUE(cache->Append(0, t.view, t.view).ok());
    append = m2.Read();
    const KvCache::View p = cache->Prefix(0);
    EXPECT_EQ(p.k.dtype, DType::kI8);
    ASSERT_FALSE(p.k_scale.is_null());
    EXPECT_EQ(p.k_scale.shape,
              (std::array<int64_t, 4>{c.batch, c.kv_heads, 2, 1}));
    EXPECT_EQ(p.v_scale.strides[2], 1);
    // The appended rows' scales, bit-exact; the next slot still the fill.
    Tensor row = Tensor::Contiguous(DType::kI8, {1, 1, 1, c.head_dim});
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t h = 0; h < c.kv_heads; ++h) {
        for (int64_t j = 0; j < 2; ++j) {
          EXPECT_EQ(p.k_scale.Load(b, h, j, 0),
                    QuantizeRowI8(t.view, {b, h, j}, row.view, {0, 0, 0}));
          for (int64_t e = 0; e < c.head_dim; ++e) {
            EXPECT_EQ(p.v.Load(b, h, j, e), row.view.Load(0, 0, 0, e));
          }
        }
        const KvCache::View full = cache->Full(0);
        EXPECT_EQ(std::bit_cast<uint32_t>(full.k_scale.Load(b, h, 2, 0)),
                  0xA5A5A5A5u);  // Clear's fill
      }
    // A f32 cache has no scales.
    auto plain = KvCache::Create(SmallConfig(DType::kF32, KvLayout::kBHSD));
    ASSERT_TRUE(plain.ok());
    EXPECT_TRUE(plain->Prefix(0).k_scale.is_null());
  }
  EXPECT_EQ(create.allocs, 1);
  EXPECT_EQ(append.allocs, 0);
  EXPECT_EQ(append.bytes_copied, 2 * c.TokenBytesPerLayer());
}

}  // namespace
}  // namespace attnkit
