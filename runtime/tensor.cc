#include "runtime/tensor.h"

#include <sys/mman.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <optional>
#include <sstream>
#include <type_traits>
#include <utility>

#include "runtime/limits.h"
#include "runtime/shared_memory.h"

namespace attnkit {

float TensorView::Load(int64_t i0, int64_t i1, int64_t i2, int64_t i3) const {
  const int64_t off = Offset(i0, i1, i2, i3);
  switch (dtype) {
    case DType::kBF16:
      return static_cast<const bf16*>(data)[off].ToFloat();
    case DType::kI8:
      return static_cast<const int8_t*>(data)[off];
    case DType::kF32:
      break;
  }
  return static_cast<const float*>(data)[off];
}

void TensorView::Store(int64_t i0, int64_t i1, int64_t i2, int64_t i3,
                       float v) const {
  const int64_t off = Offset(i0, i1, i2, i3);
  switch (dtype) {
    case DType::kBF16:
      static_cast<bf16*>(data)[off] = bf16::FromFloat(v);
      return;
    case DType::kI8:
      static_cast<int8_t*>(data)[off] = QuantizeI8(v, 1.0f);
      return;
    case DType::kF32:
      break;
  }
  static_cast<float*>(data)[off] = v;
}

namespace {

// QuantizeRowI8 on n values at unit stride: the same operations in the same
// order (so the same bytes), in loops the compiler vectorizes. A decode
// step's append quantizes kv_heads rows per layer; the element-wise Load /
// Offset path cost ~80 us per layer of Llama-2-7B (32 x 128 values, K and
// V; 2-core AMD EPYC Zen 5, GCC 12.2, 2026-11-25).
template <typename T>
float QuantizeContiguous(const T* x, int64_t n, int8_t* out) {
  auto value = [](T v) {
    if constexpr (std::is_same_v<T, bf16>) {
      return v.ToFloat();
    } else {
      return v;
    }
  };
  float absmax = 0.0f;
  for (int64_t e = 0; e < n; ++e) absmax = I8AbsMax(absmax, value(x[e]));
  const float scale = I8ScaleOf(absmax);
  for (int64_t e = 0; e < n; ++e) out[e] = QuantizeI8(value(x[e]), scale);
  return scale;
}

}  // namespace

float QuantizeRowI8(const TensorView& src, std::array<int64_t, 3> from,
                    const TensorView& dst, std::array<int64_t, 3> to) {
  assert(dst.dtype == DType::kI8 && src.shape[3] == dst.shape[3]);
  const auto& [a, b, c] = from;
  const int64_t n = src.shape[3];
  if (n > 0 && src.strides[3] == 1 && dst.strides[3] == 1) {
    int8_t* out =
        static_cast<int8_t*>(dst.data) + dst.Offset(to[0], to[1], to[2], 0);
    const int64_t at = src.Offset(a, b, c, 0);
    if (src.dtype == DType::kF32) {
      return QuantizeContiguous(static_cast<const float*>(src.data) + at, n,
                                out);
    }
    if (src.dtype == DType::kBF16) {
      return QuantizeContiguous(static_cast<const bf16*>(src.data) + at, n,
                                out);
    }
  }
  float absmax = 0.0f;
  for (int64_t e = 0; e < src.shape[3]; ++e) {
    absmax = I8AbsMax(absmax, src.Load(a, b, c, e));
  }
  const float scale = I8ScaleOf(absmax);
  int8_t* out = static_cast<int8_t*>(dst.data);
  for (int64_t e = 0; e < src.shape[3]; ++e) {
    out[dst.Offset(to[0], to[1], to[2], e)] =
        QuantizeI8(src.Load(a, b, c, e), scale);
  }
  return scale;
}

void QuantizeRows(const TensorView& values, const TensorView& stored,
                  const TensorView& scales) {
  auto* out = static_cast<float*>(scales.data);
  for (int64_t a = 0; a < stored.shape[0]; ++a)
    for (int64_t b = 0; b < stored.shape[1]; ++b)
      for (int64_t c = 0; c < stored.shape[2]; ++c) {
        out[scales.Offset(a, b, c, 0)] =
            QuantizeRowI8(values, {a, b, c}, stored, {a, b, c});
      }
}

TensorView TensorView::Slice(std::array<int64_t, 4> begin,
                             std::array<int64_t, 4> extent) const {
  TensorView v = *this;
  int64_t off = 0;
  for (int i = 0; i < 4; ++i) {
    assert(begin[i] >= 0 && extent[i] >= 0 && begin[i] + extent[i] <= shape[i]);
    off += begin[i] * strides[i];
    v.shape[i] = extent[i];
  }
  if (data != nullptr) {
    v.data = static_cast<char*>(data) + off * DTypeSize(dtype);
  }
  return v;
}

std::string TensorView::DebugString() const {
  std::ostringstream os;
  os << DTypeName(dtype) << "[" << shape[0] << "," << shape[1] << ","
     << shape[2] << "," << shape[3] << "] strides[" << strides[0] << ","
     << strides[1] << "," << strides[2] << "," << strides[3] << "]";
  return os.str();
}

uint64_t SpanBytes(const std::array<int64_t, 4>& shape,
                   const std::array<int64_t, 4>& strides, DType dtype) {
  constexpr uint64_t kTooMany = std::numeric_limits<uint64_t>::max();
  std::optional<int64_t> last = 0;  // element offset of the furthest element
  for (int i = 0; i < 4; ++i) {
    if (shape[i] <= 0) return 0;
    if (strides[i] < 0) return kTooMany;
    const std::optional<int64_t> step = CheckedMul(shape[i] - 1, strides[i]);
    if (!step) return kTooMany;
    last = CheckedAdd(*last, *step);
    if (!last) return kTooMany;
  }
  const std::optional<int64_t> bytes =
      CheckedMul(*last + 1, static_cast<int64_t>(DTypeSize(dtype)));
  return bytes ? static_cast<uint64_t>(*bytes) : kTooMany;
}

std::array<int64_t, 4> PermutedStrides(const std::array<int64_t, 4>& shape,
                                       const std::array<int, 4>& order) {
  std::array<int64_t, 4> strides{};
  int64_t s = 1;
  for (int i = 3; i >= 0; --i) {
    strides[order[i]] = s;
    s *= shape[order[i]];
  }
  return strides;
}

std::array<int64_t, 4> ContiguousStrides(const std::array<int64_t, 4>& shape) {
  return PermutedStrides(shape, {0, 1, 2, 3});
}

namespace {

// ATTNKIT_HUGE_PAGES=0 turns the huge-page advice off (A/B measurements, or
// hosts where khugepaged compaction stalls hurt more than TLB misses).
bool HugePagesWanted() {
  static const bool wanted = [] {
    const char* env = std::getenv("ATTNKIT_HUGE_PAGES");
    return env == nullptr || std::strcmp(env, "0") != 0;
  }();
  return wanted;
}

}  // namespace

AlignedBuffer::AlignedBuffer(size_t bytes) : size_(bytes) {
  if (bytes == 0) return;
  // Buffers of a huge page or more (KV caches, benchmark inputs) start on a
  // 2 MiB boundary and ask for transparent huge pages before the first touch:
  // a decode step streams the whole cache, and with 4 KiB pages every page
  // is a TLB miss and a point where the hardware prefetcher stops (it does
  // not cross page boundaries). The advice is best effort: with THP off it
  // does nothing and the buffer still works.
  const bool huge = bytes >= kHugePage && HugePagesWanted();
  // For a backend in a worker process, the buffer is a shared segment it
  // maps (runtime/shared_memory.h); it starts zero-filled.
  if (shared_memory::Enabled()) {
    if (auto seg = shared_memory::Allocate(bytes, huge)) {
      data_ = seg->base;
      shared_ = true;
      return;
    }
  }
  const size_t align = huge ? kHugePage : kAlignment;
  const size_t rounded = (bytes + align - 1) / align * align;
  data_ = std::aligned_alloc(align, rounded);
  if (data_ == nullptr) throw std::bad_alloc();
  if (huge) madvise(data_, rounded, MADV_HUGEPAGE);
  std::memset(data_, 0, rounded);
}

void AlignedBuffer::Release() {
  if (shared_) {
    shared_memory::Free(data_);
  } else {
    std::free(data_);
  }
  data_ = nullptr;
  shared_ = false;
}

AlignedBuffer::~AlignedBuffer() { Release(); }

AlignedBuffer::AlignedBuffer(AlignedBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      shared_(std::exchange(o.shared_, false)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& o) noexcept {
  if (this != &o) {
    Release();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    shared_ = std::exchange(o.shared_, false);
  }
  return *this;
}

Tensor Tensor::Allocate(DType dtype, std::array<int64_t, 4> shape,
                        std::array<int64_t, 4> strides, int64_t lead,
                        int64_t tail) {
  const uint64_t span = SpanBytes(shape, strides, dtype);
  const uint64_t esize = static_cast<uint64_t>(DTypeSize(dtype));
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  if (span == kMax || lead < 0 || tail < 0 ||
      static_cast<uint64_t>(lead) > (kMax >> 8) / esize ||
      static_cast<uint64_t>(tail) > (kMax >> 8) / esize || span > (kMax >> 4)) {
    throw std::bad_alloc();
  }
  const uint64_t lead_bytes = static_cast<uint64_t>(lead) * esize;
  // An empty view has no span; its slack is still allocated.
  const uint64_t bytes =
      lead_bytes + span + static_cast<uint64_t>(tail) * esize;
  Tensor t;
  t.buffer = AlignedBuffer(static_cast<size_t>(bytes));
  t.view.data = static_cast<std::byte*>(t.buffer.data()) + lead_bytes;
  t.view.dtype = dtype;
  t.view.shape = shape;
  t.view.strides = strides;
  return t;
}

}  // namespace attnkit
