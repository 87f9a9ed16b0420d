#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>

#include "runtime/accounting.h"
#include "runtime/backend.h"

namespace attnkit {

namespace {

// Whether row (b, h, i) of t (f32 or bf16, along dim 3) holds only finite
// values: an f32 is finite when its exponent bits are not all ones (bf16:
// the same bits in its top half).
bool RowIsFinite(const TensorView& t, int64_t b, int64_t h, int64_t i) {
  const int64_t n = t.shape[3];
  if (n == 0) return true;
  if (t.strides[3] != 1) {
    for (int64_t e = 0; e < n; ++e) {
      if (!std::isfinite(t.Load(b, h, i, e))) return false;
    }
    return true;
  }
  const int64_t at = t.Offset(b, h, i, 0);
  bool bad = false;
  if (t.dtype == DType::kBF16) {
    const uint16_t* p = static_cast<const uint16_t*>(t.data) + at;
    for (int64_t e = 0; e < n; ++e) bad |= (p[e] & 0x7F80u) == 0x7F80u;
  } else {
    const uint32_t* p = static_cast<const uint32_t*>(t.data) + at;
    for (int64_t e = 0; e < n; ++e) bad |= (p[e] & 0x7F800000u) == 0x7F800000u;
  }
  return !bad;
}

// The i8 cache's part of ValidateAppend: the scales' views, then every new
// value finite (before anything is written, so an error changes nothing).
Status CheckQuantizedAppend(const KvAppendArgs& a, bool has_memory) {
  const auto& kc = a.k_cache;
  for (const auto& [name, t] :
       {std::pair{"k_scale", &a.k_scale}, std::pair{"v_scale", &a.v_scale}}) {
    const std::array<int64_t, 4> want{kc.shape[0], kc.shape[1], kc.shape[2], 1};
    if (t->dtype != DType::kF32 || t->shape != want ||
        (has_memory && t->data == nullptr)) {
      return Status::InvalidArgument(
          std::string("append: ") + name + " " + t->DebugString() +
          " is not the i8 cache's f32 [batch, kv_heads, capacity, 1] "
          "scales of " +
          kc.DebugString());
    }
  }
  for (const auto& [name, t] :
       {std::pair{"new_k", &a.new_k}, std::pair{"new_v", &a.new_v}}) {
    for (int64_t b = 0; b < kc.shape[0]; ++b)
      for (int64_t h = 0; h < kc.shape[1]; ++h)
        for (int64_t i = 0; i < a.new_lens[b]; ++i) {
          // Every append of a decode step runs this (twice: the cache and
          // the backend validate): a row at unit stride is scanned in one
          // vectorizable pass, the element loop below only names the culprit.
          if (RowIsFinite(*t, b, h, i)) continue;
          for (int64_t e = 0; e < kc.shape[3]; ++e) {
            const float x = t->Load(b, h, i, e);
            if (!std::isfinite(x)) {
              return Status::InvalidArgument(
                  std::string("append: ") + name + "[" + std::to_string(b) +
                  "," + std::to_string(h) + "," + std::to_string(i) + "," +
                  std::to_string(e) + "]=" + std::to_string(x) +
                  " is not finite: an i8 cache cannot store it");
            }
          }
        }
  }
  return Status::Ok();
}

}  // namespace

Status ValidateAppend(const KvAppendArgs& a) {
  auto bad = [](std::string m) {
    return Status::InvalidArgument(std::move(m));
  };
  const auto& kc = a.k_cache;
  const int64_t batch = kc.shape[0];
  const bool quantized = kc.dtype == DType::kI8;
  if (a.v_cache.dtype != kc.dtype) {
    return bad("append: v_cache dtype " +
               std::string(DTypeName(a.v_cache.dtype)) +
               " differs from k_cache's " + std::string(DTypeName(kc.dtype)));
  }
  for (const auto* t : {&a.new_k, &a.new_v}) {
    if (quantized ? t->dtype == DType::kI8 || t->dtype != a.new_k.dtype
                  : t->dtype != kc.dtype) {
      return bad("append: new token dtype " + std::string(DTypeName(t->dtype)) +
                 (quantized ? " cannot be quantized into the i8 cache (new_k "
                              "and new_v: f32 or bf16, the same)"
                            : " differs from the cache's " +
                                  std::string(DTypeName(kc.dtype))));
    }
  }
  if (a.v_cache.shape != kc.shape) {
    return bad("append: v_cache " + a.v_cache.DebugString() +
               " differs in shape from k_cache " + kc.DebugString());
  }
  for (const auto* t : {&a.new_k, &a.new_v}) {
    if (t->shape[0] != batch || t->shape[1] != kc.shape[1] ||
        t->shape[3] != kc.shape[3]) {
      return bad("append: new tokens " + t->DebugString() +
                 " do not match the cache's batch/kv_heads/head_dim " +
                 kc.DebugString());
    }
  }
  if (static_cast<int64_t>(a.positions.size()) != batch ||
      static_cast<int64_t>(a.new_lens.size()) != batch) {
    return bad("append: positions has " + std::to_string(a.positions.size()) +
               " and new_lens " + std::to_string(a.new_lens.size()) +
               " entries, expected batch=" + std::to_string(batch));
  }
  const int64_t capacity = kc.shape[2];
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t pos = a.positions[b], n = a.new_lens[b];
    if (pos < 0 || n < 0) {
      return bad("append: sequence " + std::to_string(b) + " has position " +
                 std::to_string(pos) + " and new_len " + std::to_string(n));
    }
    for (const auto& [name, t] :
         {std::pair{"new_k", &a.new_k}, std::pair{"new_v", &a.new_v}}) {
      if (n > t->shape[2]) {
        return bad("append: new_lens[" + std::to_string(b) +
                   "]=" + std::to_string(n) + " exceeds " + name +
                   "'s extent " + std::to_string(t->shape[2]));
      }
    }
    if (pos > capacity - n) {
      return Status::OutOfRange(
          "append: sequence " + std::to_string(b) + " has length " +
          std::to_string(pos) + " and cannot take " + std::to_string(n) +
          " more token(s): capacity=" + std::to_string(capacity));
    }
  }
  // A zero-capacity cache owns no memory (its data is null) and, per the
  // capacity check above, can only take zero tokens.
  const bool has_memory =
      batch > 0 && kc.shape[1] > 0 && capacity > 0 && kc.shape[3] > 0;
  if (has_memory && (kc.data == nullptr || a.v_cache.data == nullptr)) {
    return bad("append: cache data is null");
  }
  if (quantized) {
    ATTNKIT_RETURN_IF_ERROR(CheckQuantizedAppend(a, has_memory));
  } else if (!a.k_scale.is_null() || !a.v_scale.is_null()) {
    return bad("append: scales given for a " +
               std::string(DTypeName(kc.dtype)) +
               " cache (scales are for an i8 cache)");
  }
  return Status::Ok();
}

namespace {

// Copies one sequence's new tokens of one head, dst[pos + t][d] = src[t][d].
int64_t CopyHead(const TensorView& dst, const TensorView& src, int64_t b,
                 int64_t h, int64_t pos, int64_t n) {
  const int64_t esize = DTypeSize(dst.dtype), dim = dst.shape[3];
  char* dbase = static_cast<char*>(dst.data);
  const char* sbase = static_cast<const char*>(src.data);
  for (int64_t t = 0; t < n; ++t) {
    char* d = dbase + dst.Offset(b, h, pos + t, 0) * esize;
    const char* s = sbase + src.Offset(b, h, t, 0) * esize;
    if (dst.strides[3] == 1 && src.strides[3] == 1) {
      std::memcpy(d, s, static_cast<size_t>(dim * esize));
    } else {
      for (int64_t e = 0; e < dim; ++e) {
        std::memcpy(d + e * dst.strides[3] * esize,
                    s + e * src.strides[3] * esize, static_cast<size_t>(esize));
      }
    }
  }
  return n * dim * esize;
}

}  // namespace

int64_t AppendedBytes(const KvAppendArgs& a) {
  int64_t tokens = 0;
  for (int64_t n : a.new_lens) tokens += n;
  const int64_t scale_bytes =
      a.k_cache.dtype == DType::kI8 ? static_cast<int64_t>(sizeof(float)) : 0;
  return 2 * tokens * a.k_cache.shape[1] *
         (a.k_cache.shape[3] * DTypeSize(a.k_cache.dtype) + scale_bytes);
}

namespace {

// Quantizes sequence b's new tokens of every head into the i8 cache's slots
// and their scales into the scale tensors.
void QuantizeSequence(const KvAppendArgs& a, int64_t b) {
  const int64_t pos = a.positions[b];
  for (int64_t h = 0; h < a.k_cache.shape[1]; ++h) {
    for (int64_t t = 0; t < a.new_lens[b]; ++t) {
      for (const auto& [src, dst, scales] :
           {std::tuple{&a.new_k, &a.k_cache, &a.k_scale},
            std::tuple{&a.new_v, &a.v_cache, &a.v_scale}}) {
        static_cast<float*>(scales->data)[scales->Offset(b, h, pos + t, 0)] =
            QuantizeRowI8(*src, {b, h, t}, *dst, {b, h, pos + t});
      }
    }
  }
}

}  // namespace

int64_t AppendKvStrided(const KvAppendArgs& a) {
  if (a.k_cache.dtype == DType::kI8) {
    for (int64_t b = 0; b < a.k_cache.shape[0]; ++b) QuantizeSequence(a, b);
    const int64_t bytes = AppendedBytes(a);
    accounting::RecordCopy(bytes);
    return bytes;
  }
  int64_t bytes = 0;
  for (int64_t b = 0; b < a.k_cache.shape[0]; ++b) {
    for (int64_t h = 0; h < a.k_cache.shape[1]; ++h) {
      bytes +=
          CopyHead(a.k_cache, a.new_k, b, h, a.positions[b], a.new_lens[b]);
      bytes +=
          CopyHead(a.v_cache, a.new_v, b, h, a.positions[b], a.new_lens[b]);
    }
  }
  accounting::RecordCopy(bytes);
  return bytes;
}

}  // namespace attnkit
