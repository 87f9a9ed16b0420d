#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/backend.h"
#include "runtime/random.h"

namespace attnkit {
namespace {

struct Fixture {
  Tensor kc, vc, nk, nv;
  std::vector<int64_t> pos, lens;
  KvAppendArgs Args() const {
    return {kc.view, vc.view, nk.view, nv.view, pos, lens, {}, {}};
  }
};

Fixture Make(KvLayout layout, DType dtype) {
  Fixture f;
  const std::array<int64_t, 4> cache{2, 3, 8, 5}, fresh{2, 3, 2, 5};
  f.kc = Tensor::Allocate(dtype, cache, KvStrides(layout, false, cache));
  f.vc = Tensor::Allocate(dtype, cache, KvStrides(layout, true, cache));
  f.nk = Tensor::Contiguous(dtype, fresh);
  f.nv = Tensor::Contiguous(dtype, fresh);
  Rng rng(11);
  FillNormal(f.nk.view, rng);
  FillNormal(f.nv.view, rng);
  f.pos = {3, 6};
  f.lens = {2, 1};
  return f;
}

TEST(KvAppendTest, WritesOnlyNewPositionsInEveryLayout) {
  for (KvLayout layout :
       {KvLayout::kBHSD, KvLayout::kBSHD, KvLayout::kTransposedV}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      Fixture f = Make(layout, dtype);
      ASSERT_TRUE(ValidateAppend(f.Args()).ok());
      EXPECT_EQ(AppendKvStrided(f.Args()),
                2 * 3 * (2 + 1) * 5 * DTypeSize(dtype));
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t h = 0; h < 3; ++h)
          for (int64_t s = 0; s < 8; ++s)
            for (int64_t e = 0; e < 5; ++e) {
              const int64_t t = s - f.pos[b];
              const bool is_new = t >= 0 && t < f.lens[b];
              EXPECT_EQ(f.kc.view.Load(b, h, s, e),
                        is_new ? f.nk.view.Load(b, h, t, e) : 0.0f);
              EXPECT_EQ(f.vc.view.Load(b, h, s, e),
                        is_new ? f.nv.view.Load(b, h, t, e) : 0.0f);
            }
    }
  }
}

TEST(KvAppendTest, OverflowNamesSequenceLengthAndCapacity) {
  Fixture f = Make(KvLayout::kBHSD, DType::kF32);
  f.pos = {3, 7};
  f.lens = {1, 2};
  const Status s = ValidateAppend(f.Args());
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_EQ(s.message(),
            "append: sequence 1 has length 7 and cannot take 2 more token(s): "
            "capacity=8");
}

TEST(KvAppendTest, RejectsMismatchedInputs) {
  Fixture f = Make(KvLayout::kBHSD, DType::kF32);
  KvAppendArgs a = f.Args();
  a.new_v.dtype = DType::kBF16;
  EXPECT_EQ(ValidateAppend(a).code(), StatusCode::kInvalidArgument);
  a = f.Args();
  std::vector<int64_t> short_pos{0};
  a.positions = short_pos;
  EXPECT_NE(ValidateAppend(a).message().find("expected batch=2"),
            std::string::npos);
}

// Found by the differential tester (a decode loop whose sequences are all
// empty): a zero-capacity cache has no memory, and appending zero tokens to
// it is valid.
TEST(KvAppendTest, AZeroCapacityCacheTakesZeroTokens) {
  const std::array<int64_t, 4> cache{1, 2, 0, 4}, fresh{1, 2, 0, 4};
  Tensor kc = Tensor::Allocate(DType::kF32, cache,
                               KvStrides(KvLayout::kBHSD, false, cache));
  Tensor vc = Tensor::Allocate(DType::kF32, cache,
                               KvStrides(KvLayout::kBHSD, true, cache));
  Tensor nk = Tensor::Contiguous(DType::kF32, fresh);
  Tensor nv = Tensor::Contiguous(DType::kF32, fresh);
  ASSERT_EQ(kc.view.data, nullptr);
  const std::vector<int64_t> pos{0}, none{0}, one{1};
  EXPECT_TRUE(
      ValidateAppend({kc.view, vc.view, nk.view, nv.view, pos, none, {}, {}})
          .ok());
  EXPECT_EQ(
      AppendKvStrided({kc.view, vc.view, nk.view, nv.view, pos, none, {}, {}}),
      0);
  EXPECT_EQ(
      ValidateAppend({kc.view, vc.view, nk.view, nv.view, pos, one, {}, {}})
          .code(),
      StatusCode::kInvalidArgument);  // one token: more than new_k holds
}

// An i8 cache's append: each new row quantized straight into its slot by the
// one rule and its scale into the scale tensor, in every layout; nothing
// else changes; the bytes written are the int8 rows plus their scales.
struct I8Fixture {
  Tensor kc, vc, ks, vs, nk, nv;
  std::vector<int64_t> pos{3, 6}, lens{2, 1};
  KvAppendArgs Args() const {
    return {kc.view, vc.view, nk.view, nv.view, pos, lens, ks.view, vs.view};
  }
};

I8Fixture MakeI8(KvLayout layout, DType token_dtype) {
  I8Fixture f;
  const std::array<int64_t, 4> cache{2, 3, 8, 5}, fresh{2, 3, 2, 5},
      scales{2, 3, 8, 1};
  f.kc = Tensor::Allocate(DType::kI8, cache, KvStrides(layout, false, cache));
  f.vc = Tensor::Allocate(DType::kI8, cache, KvStrides(layout, true, cache));
  f.ks = Tensor::Allocate(DType::kF32, scales, KvScaleStrides(scales));
  f.vs = Tensor::Allocate(DType::kF32, scales, KvScaleStrides(scales));
  for (Tensor* t : {&f.kc, &f.vc, &f.ks, &f.vs}) {
    std::memset(t->buffer.data(), 0x5A, t->buffer.size());
  }
  f.nk = Tensor::Contiguous(token_dtype, fresh);
  f.nv = Tensor::Contiguous(token_dtype, fresh);
  Rng rng(12);
  FillNormal(f.nk.view, rng, 4.0f);
  FillNormal(f.nv.view, rng, 0.25f);
  return f;
}

TEST(KvAppendTest, I8AppendQuantizesInPlaceBitExact) {
  for (KvLayout layout :
       {KvLayout::kBHSD, KvLayout::kBSHD, KvLayout::kTransposedV}) {
    for (DType token : {DType::kF32, DType::kBF16}) {
      I8Fixture f = MakeI8(layout, token);
      const KvAppendArgs a = f.Args();
      ASSERT_TRUE(ValidateAppend(a).ok()) << ValidateAppend(a).ToString();
      // 3 tokens x 3 kv heads x (5 int8 + one f32 scale), K and V.
      EXPECT_EQ(AppendedBytes(a), 2 * 3 * 3 * (5 + 4));
      EXPECT_EQ(AppendKvStrided(a), AppendedBytes(a));
      Tensor row = Tensor::Contiguous(DType::kI8, {1, 1, 1, 5});
      for (const auto& [cache, scales, src] :
           {std::tuple{&f.kc, &f.ks, &f.nk}, std::tuple{&f.vc, &f.vs, &f.nv}}) {
        for (int64_t b = 0; b < 2; ++b)
          for (int64_t h = 0; h < 3; ++h)
            for (int64_t j = 0; j < 8; ++j) {
              const int64_t t = j - f.pos[b];
              const bool fresh = t >= 0 && t < f.lens[b];
              const float sc = scales->view.Load(b, h, j, 0);
              if (!fresh) {
                EXPECT_EQ(std::bit_cast<uint32_t>(sc), 0x5A5A5A5Au);
                for (int64_t e = 0; e < 5; ++e) {
                  EXPECT_EQ(cache->view.Load(b, h, j, e), 0x5A);
                }
                continue;
              }
              const float want =
                  QuantizeRowI8(src->view, {b, h, t}, row.view, {0, 0, 0});
              EXPECT_EQ(std::bit_cast<uint32_t>(sc),
                        std::bit_cast<uint32_t>(want));
              for (int64_t e = 0; e < 5; ++e) {
                EXPECT_EQ(cache->view.Load(b, h, j, e),
                          row.view.Load(0, 0, 0, e))
                    << KvLayoutName(layout) << " b" << b << " h" << h << " j"
                    << j << " e" << e;
              }
            }
      }
    }
  }
}

TEST(KvAppendTest, I8AppendErrorsNameTheFieldAndChangeNothing) {
  I8Fixture f = MakeI8(KvLayout::kBHSD, DType::kF32);
  // An int8 cannot hold a NaN or an infinity: refused before any write.
  f.nv.view.Store(1, 2, 0, 4, std::numeric_limits<float>::infinity());
  Status s = ValidateAppend(f.Args());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("new_v[1,2,0,4]=inf is not finite"),
            std::string::npos)
      << s.message();
  f = MakeI8(KvLayout::kBHSD, DType::kF32);
  KvAppendArgs a = f.Args();
  a.k_scale = {};
  s = ValidateAppend(a);
  EXPECT_NE(s.message().find("k_scale"), std::string::npos) << s.message();
  // i8 tokens cannot be appended (they would need their own scales).
  a = f.Args();
  a.new_k.dtype = DType::kI8;
  s = ValidateAppend(a);
  EXPECT_NE(s.message().find("new token dtype i8"), std::string::npos)
      << s.message();
  // Scales given to an f32 cache.
  Fixture g = Make(KvLayout::kBHSD, DType::kF32);
  a = g.Args();
  a.k_scale = f.ks.view;
  a.v_scale = f.vs.view;
  s = ValidateAppend(a);
  EXPECT_NE(s.message().find("scales given for a f32 cache"), std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace attnkit
