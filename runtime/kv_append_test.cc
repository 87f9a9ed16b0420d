#include <gtest/gtest.h>

#include <string>
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
      ValidateAppend({kc.view, vc.view, nk.view, nv.view, pos, none, {}, {}}).ok());
  EXPECT_EQ(AppendKvStrided({kc.view, vc.view, nk.view, nv.view, pos, none, {}, {}}),
            0);
  EXPECT_EQ(
      ValidateAppend({kc.view, vc.view, nk.view, nv.view, pos, one, {}, {}}).code(),
      StatusCode::kInvalidArgument);  // one token: more than new_k holds
}

}  // namespace
}  // namespace attnkit
