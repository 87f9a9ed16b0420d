#include "runtime/tensor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "runtime/random.h"

namespace attnkit {
namespace {

TEST(TensorTest, PermutedStridesDescribeLayouts) {
  // [b, h, s, d] stored as [b][s][h][d].
  EXPECT_EQ(PermutedStrides({2, 3, 5, 7}, {0, 2, 1, 3}),
            (std::array<int64_t, 4>{105, 7, 21, 1}));
  EXPECT_EQ(ContiguousStrides({2, 3, 5, 7}),
            (std::array<int64_t, 4>{105, 35, 7, 1}));
}

TEST(TensorTest, AllocationIsAlignedZeroedAndSized) {
  Tensor t = Tensor::Contiguous(DType::kBF16, {1, 2, 3, 5});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.view.data) % 64, 0u);
  EXPECT_EQ(t.buffer.size(), 30u * 2);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 5; ++k) EXPECT_EQ(t.view.Load(0, i, j, k), 0.0f);
  t.view.Store(0, 1, 2, 4, 1.5f);
  EXPECT_EQ(t.view.Load(0, 1, 2, 4), 1.5f);
  EXPECT_EQ(t.view.As<bf16>()[29].ToFloat(), 1.5f);
}

// Buffers of a huge page or more start on a 2 MiB boundary (so the kernel
// can back them with transparent huge pages), are zeroed over their whole
// size, and keep the size asked for; smaller ones keep 64-byte alignment.
TEST(TensorTest, LargeBuffersAreHugePageAligned) {
  const size_t big = AlignedBuffer::kHugePage + 3 * 64 + 5;
  AlignedBuffer b(big);
  EXPECT_EQ(b.size(), big);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % AlignedBuffer::kHugePage,
            0u);
  const auto* bytes = static_cast<const unsigned char*>(b.data());
  size_t nonzero = 0;
  for (size_t i = 0; i < big; ++i) nonzero += bytes[i] != 0;
  EXPECT_EQ(nonzero, 0u);
  AlignedBuffer small(AlignedBuffer::kHugePage - 1);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.data()) % 64, 0u);
  AlignedBuffer moved = std::move(b);
  EXPECT_EQ(moved.size(), big);
  EXPECT_EQ(b.data(), nullptr);
}

TEST(TensorTest, SliceSharesMemory) {
  Tensor t = Tensor::Contiguous(DType::kF32, {2, 2, 8, 4});
  TensorView s = t.view.Slice({1, 0, 3, 0}, {1, 2, 2, 4});
  EXPECT_EQ(s.shape, (std::array<int64_t, 4>{1, 2, 2, 4}));
  s.Store(0, 1, 1, 2, 7.0f);
  EXPECT_EQ(t.view.Load(1, 1, 4, 2), 7.0f);
}

TEST(TensorTest, EmptyTensorAllocatesNothing) {
  Tensor t = Tensor::Contiguous(DType::kF32, {1, 4, 0, 8});
  EXPECT_EQ(t.buffer.size(), 0u);
  EXPECT_EQ(t.view.NumElements(), 0);
}

// QuantizeRowI8 on a row with known values, in its contiguous fast path and
// through strides (the element-wise path): the same bytes and scale.
TEST(QuantizeRowI8Test, KnownRowAndEveryPathAgreeBitForBit) {
  Tensor x = Tensor::Contiguous(DType::kF32, {1, 1, 1, 5});
  const float vals[5] = {0.0f, 12.7f, -25.4f, 6.35f, 19.05f};
  for (int e = 0; e < 5; ++e) x.view.Store(0, 0, 0, e, vals[e]);
  Tensor q = Tensor::Contiguous(DType::kI8, {1, 1, 1, 5});
  const float scale = QuantizeRowI8(x.view, {0, 0, 0}, q.view, {0, 0, 0});
  EXPECT_EQ(scale, 25.4f / 127.0f);
  const int8_t* got = q.view.As<int8_t>();
  EXPECT_EQ(got[0], 0);
  EXPECT_EQ(got[2], -127);  // the absmax element
  for (int e = 0; e < 5; ++e) {
    EXPECT_EQ(got[e], QuantizeI8(vals[e], scale)) << e;
  }

  Rng rng(7);
  for (DType src_type : {DType::kF32, DType::kBF16}) {
    for (int64_t d : {1, 7, 16, 130}) {
      Tensor dense = Tensor::Contiguous(src_type, {1, 2, 3, d});
      FillNormal(dense.view, rng, 3.0f);
      // The same values with a stride of 2 along d.
      Tensor wide = Tensor::Contiguous(src_type, {1, 2, 3, 2 * d});
      TensorView strided = wide.view;
      strided.shape = {1, 2, 3, d};
      strided.strides = {12 * d, 6 * d, 2 * d, 2};
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t s = 0; s < 3; ++s)
          for (int64_t e = 0; e < d; ++e)
            strided.Store(0, h, s, e, dense.view.Load(0, h, s, e));
      Tensor fast = Tensor::Contiguous(DType::kI8, {1, 2, 3, d});
      Tensor slow = Tensor::Contiguous(DType::kI8, {1, 2, 3, d});
      Tensor fast_s = Tensor::Contiguous(DType::kF32, {1, 2, 3, 1});
      Tensor slow_s = Tensor::Contiguous(DType::kF32, {1, 2, 3, 1});
      QuantizeRows(dense.view, fast.view, fast_s.view);
      QuantizeRows(strided, slow.view, slow_s.view);
      EXPECT_EQ(std::memcmp(fast.buffer.data(), slow.buffer.data(),
                            fast.buffer.size()),
                0)
          << DTypeName(src_type) << " d=" << d;
      EXPECT_EQ(std::memcmp(fast_s.buffer.data(), slow_s.buffer.data(),
                            fast_s.buffer.size()),
                0)
          << DTypeName(src_type) << " d=" << d;
      // Every row's absmax element is +-127; dequantized, each value is
      // within half a step of the original.
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t s = 0; s < 3; ++s) {
          const float sc = fast_s.view.Load(0, h, s, 0);
          int most = 0;
          for (int64_t e = 0; e < d; ++e) {
            const float deq = fast.view.Load(0, h, s, e) * sc;
            EXPECT_LE(std::fabs(deq - dense.view.Load(0, h, s, e)),
                      0.5f * sc * (1 + 1e-6f));
            most = std::max(
                most, std::abs(static_cast<int>(fast.view.Load(0, h, s, e))));
          }
          EXPECT_EQ(most, 127);
        }
    }
  }
}

}  // namespace
}  // namespace attnkit
