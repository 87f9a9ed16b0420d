// Non-owning strided tensor views and the one aligned buffer type that owns
// memory. Extents and strides are 64-bit; strides are in elements.
#ifndef ATTNKIT_RUNTIME_TENSOR_H_
#define ATTNKIT_RUNTIME_TENSOR_H_

#include <array>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/dtype.h"

namespace attnkit {

// A rank-4 view. Attention always uses the canonical logical order
// [batch, heads, seq, dim]; a memory layout (BHSD, BSHD, transposed V) is only
// a choice of strides. Unused dims have extent 1.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  std::array<int64_t, 4> shape{0, 0, 0, 0};
  std::array<int64_t, 4> strides{0, 0, 0, 0};

  bool is_null() const { return data == nullptr; }
  int64_t NumElements() const {
    return shape[0] * shape[1] * shape[2] * shape[3];
  }
  int64_t Offset(int64_t i0, int64_t i1, int64_t i2, int64_t i3) const {
    assert(i0 >= 0 && i0 < shape[0] && i1 >= 0 && i1 < shape[1]);
    assert(i2 >= 0 && i2 < shape[2] && i3 >= 0 && i3 < shape[3]);
    return i0 * strides[0] + i1 * strides[1] + i2 * strides[2] +
           i3 * strides[3];
  }
  template <typename T>
  T* As() const {
    assert(static_cast<int64_t>(sizeof(T)) == DTypeSize(dtype));
    return static_cast<T*>(data);
  }
  // Element access converted to f32 (slow paths: reference, tests). An i8
  // element loads as its integer value (the caller applies its scale) and
  // stores rounded to nearest even and saturated to [-127, 127].
  float Load(int64_t i0, int64_t i1, int64_t i2, int64_t i3) const;
  void Store(int64_t i0, int64_t i1, int64_t i2, int64_t i3, float v) const;

  // The same memory seen with two dims' roles unchanged but a sub-range:
  // [i0, i0 + n0) x ... Used to view one sequence or one cache prefix.
  TensorView Slice(std::array<int64_t, 4> begin,
                   std::array<int64_t, 4> extent) const;
  std::string DebugString() const;
};

// Quantizes the row at `from` of `src` (its values along dim 3, f32 or
// bf16) into the row at `to` of the i8 view `dst` by the rule of dtype.h,
// and returns the row's scale. The values must be finite.
float QuantizeRowI8(const TensorView& src, std::array<int64_t, 3> from,
                    const TensorView& dst, std::array<int64_t, 3> to);

// Every row of `values` (f32 or bf16) quantized into the same row of the i8
// view `stored`, its scale into `scales` ([a, b, c, 1] f32): QuantizeRowI8
// row by row.
void QuantizeRows(const TensorView& values, const TensorView& stored,
                  const TensorView& scales);

// Bytes from a view's first element to one past its furthest (0 when it
// has no element): what a buffer holding it needs. Saturates at UINT64_MAX
// on a negative stride or an overflow.
uint64_t SpanBytes(const std::array<int64_t, 4>& shape,
                   const std::array<int64_t, 4>& strides, DType dtype);

// Row-major strides for `shape` permuted by `order` (order[0] outermost).
std::array<int64_t, 4> PermutedStrides(const std::array<int64_t, 4>& shape,
                                       const std::array<int, 4>& order);
std::array<int64_t, 4> ContiguousStrides(const std::array<int64_t, 4>& shape);

// 64-byte aligned, zero-initialised heap memory (one cache line, and one
// AVX-512 vector, per alignment unit); large buffers are backed by huge
// pages where the kernel allows. Inside a shared_memory::Scope(true) a
// buffer is a shared segment instead (runtime/shared_memory.h), so a backend
// in a worker process reads it in place. Move-only.
class AlignedBuffer {
 public:
  static constexpr size_t kAlignment = 64;
  // Buffers at least this large are 2 MiB aligned and advised
  // MADV_HUGEPAGE (see tensor.cc; ATTNKIT_HUGE_PAGES=0 opts out).
  static constexpr size_t kHugePage = size_t{2} << 20;
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t bytes);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& o) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void Release();

  void* data_ = nullptr;
  size_t size_ = 0;
  bool shared_ = false;
};

// A buffer plus the view of it.
struct Tensor {
  AlignedBuffer buffer;
  TensorView view;

  // Allocates shape with the given strides (which must fit in the buffer),
  // with `lead` elements of slack before the view's first element and
  // `tail` after its last (a view inside a larger buffer).
  static Tensor Allocate(DType dtype, std::array<int64_t, 4> shape,
                         std::array<int64_t, 4> strides, int64_t lead = 0,
                         int64_t tail = 0);
  static Tensor Contiguous(DType dtype, std::array<int64_t, 4> shape) {
    return Allocate(dtype, shape, ContiguousStrides(shape));
  }
};

}  // namespace attnkit

#endif  // ATTNKIT_RUNTIME_TENSOR_H_
