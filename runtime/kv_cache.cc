#include "runtime/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>
#include <string>

#include "runtime/limits.h"

namespace attnkit {
namespace {

std::string Field(std::string_view name, int64_t v) {
  return std::string(name) + "=" + std::to_string(v);
}

}  // namespace

Status KvCacheConfig::Validate() const {
  auto bad = [](std::string m) {
    return Status::InvalidArgument("kv cache: " + std::move(m));
  };
  if (layers < 1) return bad(Field("layers", layers) + " must be >= 1");
  if (batch < 1) return bad(Field("batch", batch) + " must be >= 1");
  if (kv_heads < 1) return bad(Field("kv_heads", kv_heads) + " must be >= 1");
  if (head_dim < 1 || head_dim > kMaxHeadDim) {
    return bad(Field("head_dim", head_dim) + " outside [1, " +
               std::to_string(kMaxHeadDim) + "]");
  }
  if (capacity < 1) return bad(Field("capacity", capacity) + " must be >= 1");
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kI8) {
    return bad("dtype=" + std::to_string(static_cast<int>(dtype)) +
               " is not f32, bf16 or i8");
  }
  if (layout != KvLayout::kBHSD && layout != KvLayout::kBSHD &&
      layout != KvLayout::kTransposedV) {
    return bad("layout=" + std::to_string(static_cast<int>(layout)) +
               " is not bhsd, bshd or tv");
  }
  // 2 * layers tensors, each rounded up to 64 bytes, then the lengths:
  // refuse sizes whose arithmetic would overflow rather than allocate a
  // wrapped-around size.
  // (An i8 cache's scales, 4 bytes a row, are at most its tensors' size.)
  const auto tensor = CheckedProduct(
      {batch, kv_heads, capacity, head_dim, ElementSize(), int64_t{2},
       dtype == DType::kI8 ? int64_t{5} : int64_t{1}});
  const auto all = tensor ? CheckedProduct({*tensor, layers}) : std::nullopt;
  const auto layers1 = CheckedAdd(layers, 1);
  const auto meta =
      layers1 ? CheckedProduct({*layers1, batch, 8}) : std::nullopt;
  const auto padding = CheckedProduct({layers, 2 * 64});
  const auto sum = all && meta ? CheckedAdd(*all, *meta) : std::nullopt;
  if (!sum || !padding || !CheckedAdd(*sum, *padding)) {
    return Status::ResourceExhausted(
        "kv cache: layers=" + std::to_string(layers) + " x batch=" +
        std::to_string(batch) + " x kv_heads=" + std::to_string(kv_heads) +
        " x capacity=" + std::to_string(capacity) +
        " x head_dim=" + std::to_string(head_dim) + " overflows int64 bytes");
  }
  return Status::Ok();
}

StatusOr<KvCache> KvCache::Create(const KvCacheConfig& config) {
  ATTNKIT_RETURN_IF_ERROR(config.Validate());
  KvCache c;
  c.config_ = config;
  const int64_t tensor_bytes = config.batch * config.kv_heads *
                               config.capacity * config.head_dim *
                               config.ElementSize();
  constexpr int64_t kAlign = static_cast<int64_t>(AlignedBuffer::kAlignment);
  c.tensor_stride_bytes_ = (tensor_bytes + kAlign - 1) / kAlign * kAlign;
  if (config.dtype == DType::kI8) {
    const int64_t scale_bytes =
        config.batch * config.kv_heads * config.capacity * 4;
    c.scale_stride_bytes_ = (scale_bytes + kAlign - 1) / kAlign * kAlign;
  }
  const int64_t meta_bytes = (config.layers + 1) * config.batch *
                             static_cast<int64_t>(sizeof(int64_t));
  const int64_t total = c.data_bytes() + meta_bytes;
  try {
    // Zero-initialised by AlignedBuffer: every length starts at 0.
    c.storage_ = AlignedBuffer(static_cast<size_t>(total));
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted("kv cache: cannot allocate " +
                                     std::to_string(total) + " bytes");
  }
  return c;
}

TensorView KvCache::Tensor(int64_t layer, bool is_v) const {
  TensorView t;
  t.data = static_cast<std::byte*>(storage_.data()) +
           (2 * layer + (is_v ? 1 : 0)) * tensor_stride_bytes_;
  t.dtype = config_.dtype;
  t.shape = {config_.batch, config_.kv_heads, config_.capacity,
             config_.head_dim};
  t.strides = KvStrides(config_.layout, is_v, t.shape);
  return t;
}

TensorView KvCache::Scales(int64_t layer, bool is_v) const {
  if (config_.dtype != DType::kI8) return {};
  TensorView t;
  t.data = static_cast<std::byte*>(storage_.data()) +
           2 * config_.layers * tensor_stride_bytes_ +
           (2 * layer + (is_v ? 1 : 0)) * scale_stride_bytes_;
  t.dtype = DType::kF32;
  t.shape = {config_.batch, config_.kv_heads, config_.capacity, 1};
  t.strides = KvScaleStrides(t.shape);
  return t;
}

KvCache::View KvCache::Full(int64_t layer) const {
  assert(layer >= 0 && layer < config_.layers);
  return {Tensor(layer, false), Tensor(layer, true), Scales(layer, false),
          Scales(layer, true)};
}

int64_t KvCache::max_length(int64_t layer) const {
  const auto l = lengths(layer);
  return l.empty() ? 0 : *std::max_element(l.begin(), l.end());
}

KvCache::View KvCache::Prefix(int64_t layer) const {
  View full = Full(layer);
  const int64_t n = max_length(layer);
  full.k.shape[2] = n;
  full.v.shape[2] = n;
  if (!full.k_scale.is_null()) {
    full.k_scale.shape[2] = n;
    full.v_scale.shape[2] = n;
  }
  return full;
}

Status KvCache::Append(int64_t layer, const TensorView& new_k,
                       const TensorView& new_v,
                       std::span<const int64_t> new_lens, Backend* backend) {
  if (layer < 0 || layer >= config_.layers) {
    return Status::InvalidArgument(
        "kv cache append: layer=" + std::to_string(layer) + " outside [0, " +
        std::to_string(config_.layers) + ")");
  }
  const View full = Full(layer);
  KvAppendArgs a;
  a.k_cache = full.k;
  a.v_cache = full.v;
  a.new_k = new_k;
  a.new_v = new_v;
  a.positions = lengths(layer);
  a.new_lens = new_lens;
  a.k_scale = full.k_scale;
  a.v_scale = full.v_scale;
  // Validated here, before any backend sees it, so that "an error leaves the
  // cache unchanged" holds whatever the backend's kernel does.
  if (Status s = ValidateAppend(a); !s.ok()) {
    return Status(s.code(), "kv cache layer " + std::to_string(layer) + ": " +
                                s.message());
  }
  if (backend != nullptr) {
    ATTNKIT_RETURN_IF_ERROR(backend->AppendKv(a));
  } else {
    AppendKvStrided(a);
  }
  int64_t* len = lengths_ptr() + layer * config_.batch;
  for (int64_t b = 0; b < config_.batch; ++b) len[b] += new_lens[b];
  return Status::Ok();
}

Status KvCache::Append(int64_t layer, const TensorView& new_k,
                       const TensorView& new_v, Backend* backend) {
  // Scratch inside the cache's allocation: the decode loop must not allocate.
  int64_t* lens = uniform_lens_ptr();
  std::fill_n(lens, config_.batch, new_k.shape[2]);
  return Append(
      layer, new_k, new_v,
      std::span<const int64_t>(lens, static_cast<size_t>(config_.batch)),
      backend);
}

Status KvCache::Truncate(std::span<const int64_t> lens) {
  if (static_cast<int64_t>(lens.size()) != config_.batch) {
    return Status::InvalidArgument(
        "KvCache::Truncate: lens has " + std::to_string(lens.size()) +
        " entries, expected batch=" + std::to_string(config_.batch));
  }
  for (int64_t l = 0; l < config_.layers; ++l) {
    for (int64_t b = 0; b < config_.batch; ++b) {
      if (lens[b] < 0 || lens[b] > lengths(l)[b]) {
        return Status::InvalidArgument(
            "KvCache::Truncate: lens[" + std::to_string(b) +
            "]=" + std::to_string(lens[b]) + " outside [0, " +
            std::to_string(lengths(l)[b]) + "], the length of sequence " +
            std::to_string(b) + " in layer " + std::to_string(l));
      }
    }
  }
  for (int64_t l = 0; l < config_.layers; ++l) {
    std::copy(lens.begin(), lens.end(), lengths_ptr() + l * config_.batch);
  }
  return Status::Ok();
}

void KvCache::Clear(std::byte fill) {
  std::fill_n(lengths_ptr(), config_.layers * config_.batch, 0);
  const std::span<const std::byte> all = bytes();
  std::memset(storage_.data(), static_cast<int>(fill), all.size());
}

}  // namespace attnkit
