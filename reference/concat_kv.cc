#include "reference/concat_kv.h"

#include <cmath>
#include <cstring>
#include <string>
#include <tuple>

#include "runtime/accounting.h"
#include "runtime/problem.h"

namespace attnkit::reference {

ConcatKv::ConcatKv(int64_t batch, int64_t kv_heads, int64_t head_dim,
                   DType dtype)
    : batch_(batch),
      kv_heads_(kv_heads),
      head_dim_(head_dim),
      dtype_(dtype),
      seqs_(static_cast<size_t>(batch)) {}

TensorView ConcatKv::View(int64_t b, std::byte* data) const {
  TensorView t;
  t.data = data;
  t.dtype = dtype_;
  t.shape = {1, kv_heads_, seqs_[b].len, head_dim_};
  t.strides = ContiguousStrides(t.shape);
  return t;
}

TensorView ConcatKv::ScaleView(int64_t b, std::byte* data) const {
  if (dtype_ != DType::kI8) return {};
  TensorView t;
  t.data = data;
  t.dtype = DType::kF32;
  t.shape = {1, kv_heads_, seqs_[b].len, 1};
  t.strides = KvScaleStrides(t.shape);
  return t;
}

StatusOr<int64_t> ConcatKv::Append(const TensorView& new_k,
                                   const TensorView& new_v,
                                   std::span<const int64_t> new_lens) {
  const bool quantized = dtype_ == DType::kI8;
  for (const TensorView* t : {&new_k, &new_v}) {
    if ((quantized ? t->dtype == DType::kI8 : t->dtype != dtype_) ||
        t->shape[0] != batch_ || t->shape[1] != kv_heads_ ||
        t->shape[3] != head_dim_) {
      return Status::InvalidArgument(
          "concat append: new tokens " + t->DebugString() +
          " do not match batch=" + std::to_string(batch_) +
          ", kv_heads=" + std::to_string(kv_heads_) +
          ", head_dim=" + std::to_string(head_dim_) +
          ", dtype=" + std::string(DTypeName(dtype_)));
    }
  }
  if (static_cast<int64_t>(new_lens.size()) != batch_) {
    return Status::InvalidArgument(
        "concat append: new_lens has " + std::to_string(new_lens.size()) +
        " entries, expected batch=" + std::to_string(batch_));
  }
  for (int64_t b = 0; b < batch_; ++b) {
    if (new_lens[b] < 0 || new_lens[b] > new_k.shape[2]) {
      return Status::InvalidArgument(
          "concat append: new_lens[" + std::to_string(b) +
          "]=" + std::to_string(new_lens[b]) + " outside [0, " +
          std::to_string(new_k.shape[2]) + "]");
    }
  }
  if (quantized) {
    for (const TensorView* t : {&new_k, &new_v})
      for (int64_t b = 0; b < batch_; ++b)
        for (int64_t h = 0; h < kv_heads_; ++h)
          for (int64_t i = 0; i < new_lens[b]; ++i)
            for (int64_t e = 0; e < head_dim_; ++e) {
              if (!std::isfinite(t->Load(b, h, i, e))) {
                return Status::InvalidArgument(
                    "concat append: a new token of sequence " +
                    std::to_string(b) + ", head " + std::to_string(h) +
                    " is not finite: an i8 cache cannot store it");
              }
            }
  }
  const int64_t esize = DTypeSize(dtype_);
  const int64_t ssize = quantized ? int64_t{sizeof(float)} : 0;
  int64_t copied = 0;
  for (int64_t b = 0; b < batch_; ++b) {
    Seq& s = seqs_[b];
    const int64_t n = new_lens[b], len = s.len + n;
    for (auto [old, old_scales, src] :
         {std::tuple{&s.k, &s.ks, &new_k}, std::tuple{&s.v, &s.vs, &new_v}}) {
      auto grown = std::make_unique<std::byte[]>(
          static_cast<size_t>(kv_heads_ * len * head_dim_ * esize));
      std::unique_ptr<std::byte[]> grown_scales;
      if (quantized) {
        grown_scales = std::make_unique<std::byte[]>(
            static_cast<size_t>(kv_heads_ * len * ssize));
      }
      TensorView dst_view;  // the grown buffer, for QuantizeRowI8
      dst_view.data = grown.get();
      dst_view.dtype = dtype_;
      dst_view.shape = {1, kv_heads_, len, head_dim_};
      dst_view.strides = ContiguousStrides(dst_view.shape);
      for (int64_t h = 0; h < kv_heads_; ++h) {
        std::byte* dst = grown.get() + h * len * head_dim_ * esize;
        const int64_t ctx = s.len * head_dim_ * esize;
        if (ctx > 0) {
          std::memcpy(dst, old->get() + h * ctx, static_cast<size_t>(ctx));
        }
        float* scales =
            quantized ? reinterpret_cast<float*>(grown_scales.get()) + h * len
                      : nullptr;
        if (quantized && s.len > 0) {
          std::memcpy(
              scales,
              reinterpret_cast<const float*>(old_scales->get()) + h * s.len,
              static_cast<size_t>(s.len * ssize));
        }
        for (int64_t t = 0; t < n; ++t) {
          if (quantized) {
            scales[s.len + t] =
                QuantizeRowI8(*src, {b, h, t}, dst_view, {0, h, s.len + t});
            continue;
          }
          for (int64_t e = 0; e < head_dim_; ++e) {
            std::memcpy(dst + ((s.len + t) * head_dim_ + e) * esize,
                        static_cast<const std::byte*>(src->data) +
                            src->Offset(b, h, t, e) * esize,
                        static_cast<size_t>(esize));
          }
        }
        copied += ctx + n * head_dim_ * esize + len * ssize;
      }
      *old = std::move(grown);
      *old_scales = std::move(grown_scales);
    }
    s.len = len;
  }
  accounting::RecordCopy(copied);
  return copied;
}

}  // namespace attnkit::reference
