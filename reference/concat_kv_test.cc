#include "reference/concat_kv.h"

#include <gtest/gtest.h>

#include <vector>

#include "runtime/random.h"

namespace attnkit::reference {
namespace {

TEST(ConcatKvTest, EveryStepCopiesTheWholeContext) {
  const int64_t batch = 2, heads = 3, dim = 4;
  ConcatKv kv(batch, heads, dim, DType::kF32);
  Tensor nk = Tensor::Contiguous(DType::kF32, {batch, heads, 1, dim});
  Tensor nv = Tensor::Contiguous(DType::kF32, {batch, heads, 1, dim});
  std::vector<std::vector<float>> history_k(batch);
  Rng rng(3);
  const std::vector<int64_t> one{1, 1};
  for (int64_t step = 0; step < 5; ++step) {
    FillNormal(nk.view, rng);
    FillNormal(nv.view, rng);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t e = 0; e < dim; ++e)
          history_k[b].push_back(nk.view.Load(b, h, 0, e));
    auto copied = kv.Append(nk.view, nv.view, one);
    ASSERT_TRUE(copied.ok());
    // K and V, every sequence: the old context (step tokens) + 1 new token.
    EXPECT_EQ(*copied, 2 * batch * heads * (step + 1) * dim * 4);
  }
  for (int64_t b = 0; b < batch; ++b) {
    EXPECT_EQ(kv.length(b), 5);
    const TensorView k = kv.K(b);
    for (int64_t t = 0; t < 5; ++t)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t e = 0; e < dim; ++e)
          EXPECT_EQ(k.Load(0, h, t, e),
                    history_k[b][(t * heads + h) * dim + e]);
  }
}

TEST(ConcatKvTest, RaggedAppendAndBadInput) {
  ConcatKv kv(2, 1, 2, DType::kBF16);
  Tensor nk = Tensor::Contiguous(DType::kBF16, {2, 1, 3, 2});
  const std::vector<int64_t> lens{3, 0};
  ASSERT_TRUE(kv.Append(nk.view, nk.view, lens).ok());
  EXPECT_EQ(kv.length(0), 3);
  EXPECT_EQ(kv.length(1), 0);
  const std::vector<int64_t> too_many{4, 0};
  EXPECT_EQ(kv.Append(nk.view, nk.view, too_many).status().code(),
            StatusCode::kInvalidArgument);
  Tensor f32 = Tensor::Contiguous(DType::kF32, {2, 1, 3, 2});
  EXPECT_EQ(kv.Append(f32.view, f32.view, lens).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace attnkit::reference
