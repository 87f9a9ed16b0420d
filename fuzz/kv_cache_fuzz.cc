// Random sequences of append / clear / overflow / prefix operations on a
// KvCache (every layout and dtype, every registered backend's AppendKv)
// against a plain model: per layer and sequence, the list of appended tokens'
// raw bits. The cache must stay bit-exact, untouched slots must keep the last
// fill byte, and a failed append must leave every byte unchanged. An i8
// cache (f32 or bf16 new tokens) is modelled by the quantization rule
// applied to each new row on its own (QuantizeRowI8 into a scratch row): the
// cache must hold those bytes and that scale in the token's slot and scale
// entry; a non-finite value in an appended row must fail the append, name
// the value, and change nothing.
#include <fuzzer/FuzzedDataProvider.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backends/registry.h"
#include "runtime/kv_cache.h"
#include "runtime/random.h"
#include "runtime/tensor.h"

namespace {

using attnkit::KvCache;
using attnkit::TensorView;

[[noreturn]] void Fail(const std::string& what,
                       const attnkit::KvCacheConfig& c) {
  std::fprintf(stderr,
               "kv_cache_fuzz: %s\n  config: layers=%ld batch=%ld kv_heads=%ld "
               "head_dim=%ld capacity=%ld dtype=%s layout=%s\n",
               what.c_str(), static_cast<long>(c.layers),
               static_cast<long>(c.batch), static_cast<long>(c.kv_heads),
               static_cast<long>(c.head_dim), static_cast<long>(c.capacity),
               std::string(attnkit::DTypeName(c.dtype)).c_str(),
               std::string(attnkit::KvLayoutName(c.layout)).c_str());
  std::abort();
}

// Raw bits of element (b, h, s, e): bit-exact comparison, NaN payloads too.
uint32_t Bits(const TensorView& t, int64_t b, int64_t h, int64_t s, int64_t e) {
  const int64_t off = t.Offset(b, h, s, e);
  if (t.dtype == attnkit::DType::kBF16) return t.As<uint16_t>()[off];
  if (t.dtype == attnkit::DType::kI8) return t.As<uint8_t>()[off];
  return t.As<uint32_t>()[off];
}

bool Quantized(const attnkit::KvCacheConfig& c) {
  return c.dtype == attnkit::DType::kI8;
}

// Model entries per token: K then V (kv_heads * head_dim each), then for an
// i8 cache the K and the V scales' bits (kv_heads each).
int64_t TokenEntries(const attnkit::KvCacheConfig& c) {
  return 2 * c.kv_heads * c.head_dim + (Quantized(c) ? 2 * c.kv_heads : 0);
}

struct Model {
  // tokens[layer][b] = TokenEntries() per appended token.
  std::vector<std::vector<std::vector<uint32_t>>> tokens;
  uint8_t fill = 0;
};

// An element of `dtype` whose every byte is `fill`.
uint32_t FillBits(attnkit::DType dtype, uint8_t fill) {
  const uint32_t b = fill;
  switch (dtype) {
    case attnkit::DType::kBF16:
      return b << 8 | b;
    case attnkit::DType::kI8:
      return b;
    default:
      return b << 24 | b << 16 | b << 8 | b;
  }
}

void CheckAgainstModel(const KvCache& cache, const Model& m) {
  const auto& c = cache.config();
  const int64_t per = c.kv_heads * c.head_dim, tok = TokenEntries(c);
  const bool i8 = Quantized(c);
  auto where = [](const char* what, int64_t l, int64_t b, int64_t h,
                  int64_t s) {
    return std::string(what) + " (layer " + std::to_string(l) + ", seq " +
           std::to_string(b) + ", head " + std::to_string(h) + ", pos " +
           std::to_string(s);
  };
  for (int64_t l = 0; l < c.layers; ++l) {
    const KvCache::View full = cache.Full(l);
    const KvCache::View prefix = cache.Prefix(l);
    if (prefix.k.shape[2] != cache.max_length(l) ||
        prefix.k.strides != full.k.strides || prefix.k.data != full.k.data) {
      Fail("Prefix is not a no-copy view of [0, max_length)", c);
    }
    if (i8 != !full.k_scale.is_null() || i8 != !prefix.v_scale.is_null() ||
        (i8 && (prefix.k_scale.shape[2] != cache.max_length(l) ||
                prefix.k_scale.data != full.k_scale.data))) {
      Fail("scale views do not match the cache's dtype and prefix", c);
    }
    for (int64_t b = 0; b < c.batch; ++b) {
      const auto& seq = m.tokens[l][b];
      const int64_t len = static_cast<int64_t>(seq.size()) / tok;
      if (cache.lengths(l)[b] != len) Fail("length differs from the model", c);
      for (int64_t h = 0; h < c.kv_heads; ++h)
        for (int64_t s = 0; s < c.capacity; ++s) {
          const uint32_t* t = s < len ? seq.data() + s * tok : nullptr;
          for (int64_t e = 0; e < c.head_dim; ++e) {
            const int64_t i = h * c.head_dim + e;
            const uint32_t want_k = t ? t[i] : FillBits(c.dtype, m.fill);
            const uint32_t want_v = t ? t[per + i] : FillBits(c.dtype, m.fill);
            if (Bits(full.k, b, h, s, e) != want_k ||
                Bits(full.v, b, h, s, e) != want_v) {
              Fail(where("slot", l, b, h, s) + ", dim " + std::to_string(e) +
                       ") differs from the model",
                   c);
            }
          }
          if (!i8) continue;
          const uint32_t fill = FillBits(attnkit::DType::kF32, m.fill);
          if (Bits(full.k_scale, b, h, s, 0) != (t ? t[2 * per + h] : fill) ||
              Bits(full.v_scale, b, h, s, 0) !=
                  (t ? t[2 * per + c.kv_heads + h] : fill)) {
            Fail(where("scale", l, b, h, s) + ") differs from the model", c);
          }
        }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  attnkit::KvCacheConfig c;
  // Caps keep one input well under ~50 ms with the full model check.
  c.layers = in.ConsumeIntegralInRange<int64_t>(1, 3);
  c.batch = in.ConsumeIntegralInRange<int64_t>(1, 4);
  c.kv_heads = in.ConsumeIntegralInRange<int64_t>(1, 3);
  c.head_dim = in.ConsumeIntegralInRange<int64_t>(1, 19);
  c.capacity = in.ConsumeIntegralInRange<int64_t>(1, 24);
  constexpr attnkit::DType kDTypes[] = {
      attnkit::DType::kF32, attnkit::DType::kBF16, attnkit::DType::kI8};
  c.dtype = kDTypes[in.ConsumeIntegralInRange<size_t>(0, 2)];
  // The new tokens' dtype: the cache's, or f32/bf16 into an i8 cache.
  const attnkit::DType src_dtype =
      Quantized(c)
          ? (in.ConsumeBool() ? attnkit::DType::kBF16 : attnkit::DType::kF32)
          : c.dtype;
  c.layout = attnkit::kKvLayoutNames[in.ConsumeIntegralInRange<size_t>(
                                         0, attnkit::kKvLayoutNames.size() - 1)]
                 .value;
  auto created = KvCache::Create(c);
  if (!created.ok())
    Fail("valid config rejected: " + created.status().ToString(), c);
  KvCache cache = std::move(created).value();
  attnkit::Rng rng(in.ConsumeIntegral<uint64_t>());

  const auto backends = attnkit::backends::RegisteredBackends();
  std::vector<std::unique_ptr<attnkit::Backend>> owned;
  for (const auto& info : backends) owned.push_back(info.make());

  Model m;
  m.tokens.assign(
      static_cast<size_t>(c.layers),
      std::vector<std::vector<uint32_t>>(static_cast<size_t>(c.batch)));
  cache.Clear(std::byte{0});
  const int64_t max_new = c.capacity + 2;  // room to overflow
  attnkit::Tensor nk = attnkit::Tensor::Contiguous(
      src_dtype, {c.batch, c.kv_heads, max_new, c.head_dim});
  attnkit::Tensor nv = attnkit::Tensor::Contiguous(
      src_dtype, {c.batch, c.kv_heads, max_new, c.head_dim});
  // The model's quantization of one row (i8 cache).
  attnkit::Tensor qrow =
      attnkit::Tensor::Contiguous(attnkit::DType::kI8, {1, 1, 1, c.head_dim});

  for (int op = 0; op < 24 && in.remaining_bytes() > 0; ++op) {
    switch (in.ConsumeIntegralInRange<int>(0, 5)) {
      case 0: {  // clear with a fill byte (NaN patterns included)
        m.fill = in.ConsumeIntegral<uint8_t>();
        cache.Clear(std::byte{m.fill});
        for (auto& layer : m.tokens)
          for (auto& seq : layer) seq.clear();
        break;
      }
      default: {  // ragged append, sometimes past capacity
        const int64_t layer =
            in.ConsumeIntegralInRange<int64_t>(0, c.layers - 1);
        std::vector<int64_t> lens(static_cast<size_t>(c.batch));
        for (int64_t& n : lens)
          n = in.ConsumeIntegralInRange<int64_t>(0, 3) == 0
                  ? in.ConsumeIntegralInRange<int64_t>(0, max_new)
                  : in.ConsumeIntegralInRange<int64_t>(0, 2);
        // Random bit patterns, NaNs and infinities included -- into an i8
        // cache only when the input asks for a non-finite row (the append
        // must refuse it); otherwise finite values of every magnitude
        // (subnormal rows whose scale underflows included).
        const bool any_bits =
            !Quantized(c) || in.ConsumeIntegral<uint8_t>() < 32;
        for (auto* t : {&nk, &nv}) {
          const int64_t n = t->view.NumElements();
          for (int64_t i = 0; i < n; ++i) {
            uint32_t bits = static_cast<uint32_t>(rng.Next());
            if (src_dtype == attnkit::DType::kBF16) {
              if (!any_bits && (bits & 0x7f80u) == 0x7f80u) bits &= ~0x4000u;
              t->view.As<uint16_t>()[i] = static_cast<uint16_t>(bits);
            } else {
              if (!any_bits && (bits & 0x7f800000u) == 0x7f800000u)
                bits &= ~0x40000000u;
              t->view.As<uint32_t>()[i] = bits;
            }
          }
        }
        // Whether every appended row is finite (an i8 cache needs it).
        bool finite = true;
        for (const auto* t : {&nk.view, &nv.view})
          for (int64_t b = 0; b < c.batch; ++b)
            for (int64_t h = 0; h < c.kv_heads; ++h)
              for (int64_t i = 0; i < lens[b]; ++i)
                for (int64_t e = 0; e < c.head_dim; ++e)
                  finite = finite && std::isfinite(t->Load(b, h, i, e));
        attnkit::Backend* backend = nullptr;
        const size_t pick = in.ConsumeIntegralInRange<size_t>(0, owned.size());
        if (pick < owned.size()) backend = owned[pick].get();
        bool fits = true;
        for (int64_t b = 0; b < c.batch; ++b)
          fits = fits && cache.lengths(layer)[b] + lens[b] <= c.capacity;
        const std::vector<std::byte> before(cache.bytes().begin(),
                                            cache.bytes().end());
        const attnkit::Status s =
            cache.Append(layer, nk.view, nv.view, lens, backend);
        const bool storable = finite || !Quantized(c);
        if ((fits && storable) != s.ok()) {
          Fail("append status " + s.ToString() +
                   " but fits=" + std::to_string(fits) +
                   " storable=" + std::to_string(storable) + " (backend " +
                   (backend ? std::string(backend->name()) : "default") + ")",
               c);
        }
        if (!s.ok()) {
          if (storable &&
              (s.code() != attnkit::StatusCode::kOutOfRange ||
               s.message().find("capacity=" + std::to_string(c.capacity)) ==
                   std::string::npos)) {
            Fail("overflow error does not name the capacity: " + s.ToString(),
                 c);
          }
          if (fits &&
              (s.code() != attnkit::StatusCode::kInvalidArgument ||
               s.message().find("is not finite") == std::string::npos)) {
            Fail("a non-finite value's error does not name it: " + s.ToString(),
                 c);
          }
          if (std::memcmp(before.data(), cache.bytes().data(), before.size())) {
            Fail("a failed append changed the cache", c);
          }
          break;
        }
        for (int64_t b = 0; b < c.batch; ++b)
          for (int64_t t = 0; t < lens[b]; ++t) {
            auto& seq = m.tokens[layer][b];
            std::vector<uint32_t> scales;
            for (const TensorView* src : {&nk.view, &nv.view})
              for (int64_t h = 0; h < c.kv_heads; ++h) {
                if (!Quantized(c)) {
                  for (int64_t e = 0; e < c.head_dim; ++e)
                    seq.push_back(Bits(*src, b, h, t, e));
                  continue;
                }
                scales.push_back(std::bit_cast<uint32_t>(attnkit::QuantizeRowI8(
                    *src, {b, h, t}, qrow.view, {0, 0, 0})));
                for (int64_t e = 0; e < c.head_dim; ++e)
                  seq.push_back(Bits(qrow.view, 0, 0, 0, e));
              }
            seq.insert(seq.end(), scales.begin(), scales.end());
          }
        break;
      }
    }
    CheckAgainstModel(cache, m);
  }
  return 0;
}
