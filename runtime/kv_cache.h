// The decode KV cache: every layer's K and V for a batch of sequences, sized
// once for a fixed capacity and updated in place. It replaces the decode
// pattern of the Llama-2 reference code, which concatenates the past K/V and
// the new token into a transient len+1 buffer every step (an allocation and a
// full-context copy per step): here a step writes only its new tokens and
// attention reads the prefix [0, len) where it already lies.
//
// Storage: ONE 64-byte-aligned allocation at Create (the per-sequence lengths
// live at its end), nothing after. Per layer
// a K and a V tensor of logical shape [batch, kv_heads, capacity, head_dim]
// in the layout's strides (KvStrides): BHSD, BSHD (token-major, as the
// projections emit it) or transposed V (V stored [b][h][d][s] so the P.V
// product reads it contiguously along s; the append is the producer that
// writes it in that layout). Each tensor starts on a 64-byte boundary.
//
// An i8 cache (dtype kI8: a quantized cache) also holds, per layer, a K and
// a V scale tensor [batch, kv_heads, capacity, 1] f32 (KvScaleStrides), in
// the same allocation after the K/V tensors: Append quantizes each new row
// straight into its slot (QuantizeRowI8) and writes its scale.
//
// Lengths are tracked per layer and per sequence (ragged). Append(layer, ...)
// writes at that layer's current lengths and advances them, so a decode step
// is simply "for each layer: Append, then attend over Prefix(layer)", and
// after a full step every layer has the same lengths. No separate commit.
#ifndef ATTNKIT_RUNTIME_KV_CACHE_H_
#define ATTNKIT_RUNTIME_KV_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "runtime/backend.h"
#include "runtime/dtype.h"
#include "runtime/problem.h"
#include "runtime/status.h"
#include "runtime/tensor.h"

namespace attnkit {

struct KvCacheConfig {
  int64_t layers = 1;
  int64_t batch = 1;
  int64_t kv_heads = 1;
  int64_t head_dim = 64;
  int64_t capacity = 0;  // tokens per sequence, >= 1
  DType dtype = DType::kF32;
  KvLayout layout = KvLayout::kBHSD;

  // INVALID_ARGUMENT naming the field and value; RESOURCE_EXHAUSTED when the
  // total size overflows int64.
  Status Validate() const;
  int64_t ElementSize() const { return DTypeSize(dtype); }
  // Bytes of one token of one layer, K and V (and their scales when i8),
  // all sequences and heads.
  int64_t TokenBytesPerLayer() const {
    const int64_t scale = dtype == DType::kI8 ? 4 : 0;
    return 2 * batch * kv_heads * (head_dim * ElementSize() + scale);
  }
};

class KvCache {
 public:
  static StatusOr<KvCache> Create(const KvCacheConfig& config);

  KvCache(KvCache&&) noexcept = default;
  KvCache& operator=(KvCache&&) noexcept = default;

  const KvCacheConfig& config() const { return config_; }

  // Appends sequence b's first new_lens[b] tokens of new_k/new_v
  // ([batch, kv_heads, >= max(new_lens), head_dim], the cache's dtype -- f32
  // or bf16 for an i8 cache, which quantizes them -- any strides) at
  // positions lengths(layer)[b].., then advances that layer's
  // lengths. The copy goes through `backend`'s AppendKv (its own in-place
  // kernel) or, when null, the portable AppendKvStrided; either records the
  // bytes it wrote with accounting::RecordCopy.
  // Errors leave the cache unchanged (nothing is written): INVALID_ARGUMENT
  // for a bad layer/shape/dtype, OUT_OF_RANGE naming the sequence, its length
  // and the capacity when a sequence would overflow.
  Status Append(int64_t layer, const TensorView& new_k, const TensorView& new_v,
                std::span<const int64_t> new_lens, Backend* backend = nullptr);
  // Every sequence takes new_k.shape[2] tokens.
  Status Append(int64_t layer, const TensorView& new_k, const TensorView& new_v,
                Backend* backend = nullptr);

  // The tokens of one layer, ready for AttentionArgs.k/.v: extent
  // max(lengths(layer)) along seq, the cache's capacity strides, no copy.
  // Pair with problem.kv_lens = lengths(layer) (shorter sequences' extra
  // positions are past their length and never read).
  // k_scale/v_scale: an i8 cache's scales (null views otherwise), for
  // AttentionArgs.k_scale/.v_scale.
  struct View {
    TensorView k, v, k_scale, v_scale;
  };
  View Prefix(int64_t layer) const;
  // The whole [batch, kv_heads, capacity, head_dim] tensors of a layer.
  View Full(int64_t layer) const;

  std::span<const int64_t> lengths(int64_t layer) const {
    return {lengths_ptr() + layer * config_.batch,
            static_cast<size_t>(config_.batch)};
  }
  int64_t max_length(int64_t layer) const;

  // Keeps the first lens[b] tokens of sequence b in every layer and forgets
  // the rest (rolls back rejected speculative tokens; restarts a measurement
  // from the same context). Nothing is written: the next Append overwrites
  // the forgotten positions. INVALID_ARGUMENT, changing nothing, when lens
  // does not have one entry per sequence or asks a layer's sequence for
  // more tokens than it holds.
  Status Truncate(std::span<const int64_t> lens);

  // Forgets every token and fills the whole storage with `fill`. A pattern
  // such as 0xFF (NaN in f32 and bf16) makes a kernel that reads past a
  // sequence's length produce NaN, which the differential checks catch.
  void Clear(std::byte fill = std::byte{0});

  // The K/V storage (and scales), every layer (tests compare it byte for
  // byte).
  std::span<const std::byte> bytes() const {
    return {static_cast<const std::byte*>(storage_.data()),
            static_cast<size_t>(data_bytes())};
  }

 private:
  KvCache() = default;
  TensorView Tensor(int64_t layer, bool is_v) const;
  TensorView Scales(int64_t layer, bool is_v) const;
  int64_t data_bytes() const {
    return 2 * config_.layers * (tensor_stride_bytes_ + scale_stride_bytes_);
  }
  // [layers][batch] lengths, then [batch] scratch for the uniform Append,
  // after the tensors (and scales) in storage_.
  int64_t* lengths_ptr() const {
    return reinterpret_cast<int64_t*>(static_cast<std::byte*>(storage_.data()) +
                                      data_bytes());
  }
  int64_t* uniform_lens_ptr() const {
    return lengths_ptr() + config_.layers * config_.batch;
  }

  KvCacheConfig config_;
  AlignedBuffer storage_;
  int64_t tensor_stride_bytes_ = 0;  // between consecutive K/V tensors
  int64_t scale_stride_bytes_ = 0;   // between scale tensors (0 unless i8)
};

}  // namespace attnkit

#endif  // ATTNKIT_RUNTIME_KV_CACHE_H_
