// One differential-test case: a problem, the value profile its inputs are
// drawn from, and the seed/index those draws come from. A case is a pure
// function of (tier, seed, index), and its one-line string form is enough to
// replay it bit for bit (after shrinking too: the shrunk problem is carried in
// the string, the values are re-drawn from the same seed and index).
#ifndef ATTNKIT_HARNESS_CASE_H_
#define ATTNKIT_HARNESS_CASE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/attention_block.h"
#include "runtime/enum_table.h"
#include "runtime/limits.h"
#include "runtime/problem.h"
#include "runtime/random.h"
#include "runtime/status.h"

namespace attnkit::harness {

// smoke   : ctest; small shapes (seconds for hundreds of cases).
// default : the CI gate; every edge, sizes capped so a 2-core machine runs
//           >= 1,000 cases/min (the oracle is O(q*kv*d) scalar f64).
// long    : adds long contexts (up to 32k keys) and 2k prefills.
enum class Tier : uint8_t { kSmoke = 0, kDefault, kLong };
inline constexpr auto kTierNames = MakeEnumTable<Tier>({
    {Tier::kSmoke, "smoke"},
    {Tier::kDefault, "default"},
    {Tier::kLong, "long"},
});
static_assert(kTierNames.RoundTrips());
inline std::string_view TierName(Tier t) { return kTierNames.Name(t); }
// INVALID_ARGUMENT "tier=<s> is not smoke|default|long" for another name.
StatusOr<Tier> ParseTier(std::string_view s);

struct Case {
  uint64_t seed = 0;
  uint64_t index = 0;
  AttentionProblem problem;
  ValueProfile profile = ValueProfile::kNormal;
  // Extra K/V capacity past the longest sequence: the views then have
  // extents (and, for BSHD/transposed V, strides) larger than the lengths,
  // as a KV-cache prefix does.
  int64_t kv_pad = 0;
  // 0: one attention call. N > 0: a decode loop of N steps on a growing,
  // preallocated cache. Then problem.q_lens are the tokens appended and
  // queried in each of steps 1..N and problem.kv_lens the final contexts;
  // step 0 appends the prompt, kv_lens - N * q_lens tokens, and queries its
  // last min(q_lens, prompt) of them. The problem is the last step's, so it
  // validates as an ordinary problem.
  int64_t decode_steps = 0;
  // Where q and out lie (head- or token-major, padded rows inside a larger
  // buffer) and whether the bias is shared by every head ([b, 1, q, kv]):
  // the problem fixes only K/V's layout, and kernels index these wrong too.
  ArgLayout io;
  // The sequence of the original case each sequence's values come from
  // (empty: sequence b is b). Set by the shrinker when it drops a sequence,
  // so the remaining ones keep their inputs.
  std::vector<int64_t> origins;
  // > 0: an attention-block case (runtime/attention_block.h): the Q/K/V
  // projections of x (this hidden size) around `problem`, which is then its
  // attention (f32 cache, kv_lens >= q_lens). One call: no decode loop, pad,
  // row layouts or value profile.
  int64_t hidden = 0;
  DType weight_dtype = DType::kF32;
  bool qkv_bias = false;
  bool output_projection = false;
  bool is_block() const { return hidden > 0; }
  AttentionBlockProblem Block() const;

  // seed=7,index=42,values=huge_logits,pad=3,steps=0,b=2,hq=8,...
  // with, when not the default, q_layout=bshd:96, out_layout=bhsd:3,
  // bias=shared, from=0:2 and block=HIDDEN:WEIGHT_DTYPE:QKV_BIAS:WO
  // (block=96:bf16:1:0) after steps.
  std::string ToString() const;
  // Size used by the shrinker to rank candidates: multiply-adds of the
  // oracle over all steps, plus small terms so simpler shapes win ties.
  double Cost() const;
};

// Problem.Validate() plus pad, steps >= 0 and the decode-loop constraint
// kv_lens >= steps*q_lens, all in overflow-checked arithmetic.
Status ValidateCase(const Case& c);

// Multiply-adds of the f64 oracle over every attention call of a valid case
// (sum over calls and sequences of q_heads * q_len * kv_len * head_dim):
// what `check --repro` holds to --max-work.
double CaseWork(const Case& c);

// What running a valid case on `backends` backends holds at once: inputs
// and outputs, the oracle's f64 buffer, the naive reference's S matrix, and
// for a decode loop one KV cache per backend, the naive concatenation and a
// step's buffers. Checked against --max-memory before anything is allocated.
MemoryEstimate CaseMemory(const Case& c, int64_t backends);

// Parses ToString()'s form; every field is named in the error.
StatusOr<Case> ParseCase(std::string_view text);

StatusOr<ValueProfile> ParseValueProfile(std::string_view s);

// The case at `index` of the campaign `seed` in `tier`. Deterministic: uses
// only Rng(seed, index) (and its block stream). With `blocks` false no case
// is an attention block; every other case is the same either way.
Case GenerateCase(Tier tier, uint64_t seed, uint64_t index, bool blocks = true);

// The problem of decode step `step` (0 = prompt) of a decode-loop case, and
// the cache capacity the loop needs.
AttentionProblem DecodeStepProblem(const Case& c, int64_t step);
int64_t DecodeCapacity(const Case& c);

}  // namespace attnkit::harness

#endif  // ATTNKIT_HARNESS_CASE_H_
