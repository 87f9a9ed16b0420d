// Seeded, reproducible randomness and the input generators every test,
// benchmark and the tester share. Never std::random_device: a failure must
// replay from its seed.
#ifndef ATTNKIT_RUNTIME_RANDOM_H_
#define ATTNKIT_RUNTIME_RANDOM_H_

#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/attention_block.h"
#include "runtime/enum_table.h"
#include "runtime/problem.h"
#include "runtime/status.h"
#include "runtime/tensor.h"

namespace attnkit {

// xoshiro256** seeded through splitmix64: fast, 256-bit state, identical
// streams on every platform (unlike std::*_distribution).
class Rng {
 public:
  explicit Rng(uint64_t seed);
  // Stream `stream` of `seed`: independent sequences for (seed, case index).
  Rng(uint64_t seed, uint64_t stream);

  uint64_t Next();
  // Uniform in [0, n); n >= 1.
  uint64_t Below(uint64_t n);
  // Uniform integer in [lo, hi].
  int64_t Range(int64_t lo, int64_t hi);
  // Uniform in [0, 1) with 24 random bits.
  float Uniform01();
  float Uniform(float lo, float hi) { return lo + (hi - lo) * Uniform01(); }
  // Standard normal (Box-Muller).
  float Normal();
  bool Bernoulli(double p) { return Uniform01() < p; }

 private:
  uint64_t s_[4];
};

// Named value distributions. The adversarial ones exist because each has
// broken a real softmax:
enum class ValueProfile : uint8_t {
  kNormal = 0,    // q, k, v ~ N(0, 1)
  kHugeLogits,    // |logit| ~ 1e3: exp(x) overflows f32 unless max is
                  // subtracted first (exp overflows past x = 88.7)
  kConstantRows,  // every key equal: softmax is uniform, ties everywhere
  kTiny,          // f32 denormals (~1e-39): every key, half the values
  kDominantKey,   // one key per sequence aligned with every query: one
                  // probability ~1, the rest underflow to 0
};
inline constexpr auto kValueProfileNames = MakeEnumTable<ValueProfile>({
    {ValueProfile::kNormal, "normal"},
    {ValueProfile::kHugeLogits, "huge_logits"},
    {ValueProfile::kConstantRows, "constant_rows"},
    {ValueProfile::kTiny, "tiny"},
    {ValueProfile::kDominantKey, "dominant_key"},
});
static_assert(kValueProfileNames.RoundTrips());
inline constexpr int kNumValueProfiles =
    static_cast<int>(kValueProfileNames.size());
inline std::string_view ValueProfileName(ValueProfile v) {
  return kValueProfileNames.Name(v);
}

// Where q or out lie in memory (the problem fixes only K/V's layout): head-
// major [b][h][s][d] or token-major [b][s][h][d] (Q sliced from a fused QKV
// projection, out written where the output projection reads it), with `pad`
// elements of slack per row (per token when token-major): pad / 2 before the
// view's first element and the rest after each row, so the view lies inside
// a larger buffer, as Q does in a QKV row of (hq + 2 hkv) * d elements.
struct RowLayout {
  bool token_major = false;
  int64_t pad = 0;
  bool is_default() const { return !token_major && pad == 0; }
};

// How AttentionData lays out q, out and bias: RowLayouts, and a bias shared
// by every head ([b, 1, q, kv], broadcast) instead of one per head.
struct ArgLayout {
  RowLayout q, out;
  bool shared_bias = false;
};

// Strides of a q or out view of `shape` [b, h, s, d] in `layout`.
std::array<int64_t, 4> RowStrides(const RowLayout& layout,
                                  const std::array<int64_t, 4>& shape);
// A q or out tensor of `shape` in `layout`, its padding allocated around
// the view (throws std::bad_alloc like Tensor::Allocate).
Tensor AllocateRows(DType dtype, const std::array<int64_t, 4>& shape,
                    const RowLayout& layout);

// Owns q, k, v, (bias), out for one problem, laid out per problem.layout
// and `layout`, with extents equal to the longest lengths (or kv_capacity
// when larger).
class AttentionData {
 public:
  static StatusOr<AttentionData> Create(const AttentionProblem& p,
                                        int64_t kv_capacity = 0,
                                        const ArgLayout& layout = {});
  // Fills q, k, v (and bias: N(0,1) with about 10% -inf entries and, per
  // sequence with q_len > 0, one fully -inf row) and zeroes out. i8 K/V
  // get the profile's f32 values quantized row by row (QuantizeRowI8) and
  // their scales. Every
  // value is a function of one key drawn from `rng` and the element's
  // coordinates (tensor, b, h, position, e) only -- not of the shape -- so a
  // smaller problem filled from the same key sees the same values at the
  // coordinates it keeps (a shrunk case slices the original's inputs).
  // `origins[b]`, when given (one per sequence), is the sequence coordinate
  // sequence b's values are drawn at.
  void Fill(const AttentionProblem& p, Rng& rng,
            ValueProfile profile = ValueProfile::kNormal,
            std::span<const int64_t> origins = {});
  void ZeroOutput();

  const AttentionArgs& args() const { return args_; }
  // The whole allocations behind the views (padding included): what a
  // check byte-compares to find writes outside a call's outputs.
  const Tensor& q() const { return q_; }
  const Tensor& k() const { return k_; }
  const Tensor& v() const { return v_; }
  const Tensor& bias() const { return bias_; }
  const Tensor& out() const { return out_; }
  // An i8 K/V's scales (empty otherwise).
  const Tensor& k_scale() const { return k_scale_; }
  const Tensor& v_scale() const { return v_scale_; }

 private:
  Tensor q_, k_, v_, bias_, out_, k_scale_, v_scale_;
  AttentionArgs args_;
};

// Owns the tensors of one attention-block call (runtime/attention_block.h):
// x, the weights (and biases), the attention bias, the KV cache in the
// problem's layout with capacity max_kv_len, and out.
class AttentionBlockData {
 public:
  static StatusOr<AttentionBlockData> Create(const AttentionBlockProblem& p);
  // x ~ N(0, 1); weights ~ N(0, 1/sqrt(fan-in)) so every projection and the
  // output are O(1); biases ~ N(0, 0.1); the attention bias ~ N(0, 1); the
  // cache's context rows [0, kv_len - q_len) ~ N(0, 1) and every other cache
  // element NaN (a kernel that reads a slot before writing it, or writes
  // one it should not, shows); out zeroed. By coordinates from one key.
  void Fill(const AttentionBlockProblem& p, Rng& rng);

  const AttentionBlockArgs& args() const { return args_; }
  const Tensor& x() const { return x_; }
  const Tensor& k_cache() const { return k_; }
  const Tensor& v_cache() const { return v_; }
  const Tensor& out() const { return out_; }
  // The read-only inputs by name (x, the weights and biases, the attention
  // bias); absent ones have an empty buffer.
  std::vector<std::pair<const char*, const Tensor*>> inputs() const {
    return {{"x", &x_},   {"wq", &wq_}, {"wk", &wk_},
            {"wv", &wv_}, {"bq", &bq_}, {"bk", &bk_},
            {"bv", &bv_}, {"wo", &wo_}, {"bias", &bias_}};
  }

 private:
  Tensor x_, wq_, wk_, wv_, bq_, bk_, bv_, wo_, bias_, k_, v_, out_;
  AttentionBlockArgs args_;
};

// Fills the view from `key` by coordinates, as AttentionData::Fill does:
// element (a, b, c, e) of tensor `tag` is ~N(0, stddev) (an Irwin-Hall sum
// of four uniforms: |x| <= 3.46 stddev, ~2 ns per element).
// `origins[a]`, when given, is the coordinate used for a.
void FillByCoordinates(const TensorView& t, uint64_t key, uint64_t tag,
                       float stddev = 1.0f,
                       std::span<const int64_t> origins = {});

// Fills every element of a view (any strides) from N(0, stddev), by
// coordinates from one key drawn from `rng` (FillByCoordinates).
void FillNormal(const TensorView& t, Rng& rng, float stddev = 1.0f);

}  // namespace attnkit

#endif  // ATTNKIT_RUNTIME_RANDOM_H_
