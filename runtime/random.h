// Seeded, reproducible randomness and the input generators every test,
// benchmark and the tester share. Never std::random_device: a failure must
// replay from its seed.
#ifndef ATTNKIT_RUNTIME_RANDOM_H_
#define ATTNKIT_RUNTIME_RANDOM_H_

#include <cstdint>
#include <string_view>

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
  kTiny,          // values ~ 1e-39: f32 denormals in q, k and v
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

// Owns q, k, v, (bias), out for one problem, laid out per problem.layout,
// with extents equal to the longest lengths (or kv_capacity when larger).
class AttentionData {
 public:
  static StatusOr<AttentionData> Create(const AttentionProblem& p,
                                        int64_t kv_capacity = 0);
  // Fills q, k, v (and bias: N(0,1) with about 10% -inf entries and, per
  // sequence with q_len > 0, one fully -inf row) and zeroes out.
  void Fill(const AttentionProblem& p, Rng& rng,
            ValueProfile profile = ValueProfile::kNormal);
  void ZeroOutput();

  const AttentionArgs& args() const { return args_; }

 private:
  Tensor q_, k_, v_, bias_, out_;
  AttentionArgs args_;
};

// Fills every element of a view (any strides) from N(0, stddev).
void FillNormal(const TensorView& t, Rng& rng, float stddev = 1.0f);

}  // namespace attnkit

#endif  // ATTNKIT_RUNTIME_RANDOM_H_
