#include "runtime/tensor.h"

#include <gtest/gtest.h>

#include <cstdint>

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

}  // namespace
}  // namespace attnkit
