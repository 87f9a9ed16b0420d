#include <cstring>
#include <string>

#include "runtime/accounting.h"
#include "runtime/backend.h"

namespace attnkit {

Status ValidateAppend(const KvAppendArgs& a) {
  auto bad = [](std::string m) {
    return Status::InvalidArgument(std::move(m));
  };
  const auto& kc = a.k_cache;
  const int64_t batch = kc.shape[0];
  for (const auto* t : {&a.v_cache, &a.new_k, &a.new_v}) {
    if (t->dtype != kc.dtype) {
      return bad("append: dtype " + std::string(DTypeName(t->dtype)) +
                 " differs from the cache's " +
                 std::string(DTypeName(kc.dtype)));
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
    if (n > a.new_k.shape[2]) {
      return bad("append: new_lens[" + std::to_string(b) +
                 "]=" + std::to_string(n) + " exceeds the new-token extent " +
                 std::to_string(a.new_k.shape[2]));
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
  if (batch > 0 && kc.shape[1] > 0 && capacity > 0 && kc.shape[3] > 0 &&
      (kc.data == nullptr || a.v_cache.data == nullptr)) {
    return bad("append: cache data is null");
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
  return 2 * tokens * a.k_cache.shape[1] * a.k_cache.shape[3] *
         DTypeSize(a.k_cache.dtype);
}

int64_t AppendKvStrided(const KvAppendArgs& a) {
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
