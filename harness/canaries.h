// Canaries: test-only backends with one planted bug each. They prove the
// tester compares (a public attention suite once computed the expected output
// and never compared it): each must be caught by the smoke tier. Their
// correct twin (Bug::kNone) is an independent flash-style implementation --
// KV tiles of 16 keys, running max and sum, rescale on a new max -- whose
// summation order differs from the naive reference's, so it also shows the
// tolerance model does not cry wolf on a correct kernel.
#ifndef ATTNKIT_HARNESS_CANARIES_H_
#define ATTNKIT_HARNESS_CANARIES_H_

#include <memory>
#include <string_view>
#include <vector>

#include "runtime/backend.h"
#include "runtime/enum_table.h"

namespace attnkit::harness {

enum class Bug : uint8_t {
  kNone = 0,
  kOneElementOff,      // the last output element off by 1e-3 * (1 + |x|)
  kWrongScale,         // ignores problem.scale, always 1/sqrt(head_dim)
  kMissingRescale,     // a new running max does not rescale the accumulator
  kTailOffByOne,       // a partial last KV tile drops its last key
  kWrongGqaMapping,    // q head h reads kv head h % kv_heads
  kCausalShifted,      // causal/window masks let each query see one key ahead
  kAppendSpill,        // KV append writes the last token again, one past
  kBf16Probabilities,  // P rounded to bf16 before P.V (2^-9 relative): a
                       // precision bug, not a logic one
};
inline constexpr auto kBugNames = MakeEnumTable<Bug>({
    {Bug::kNone, "none"},
    {Bug::kOneElementOff, "one_element_off"},
    {Bug::kWrongScale, "wrong_scale"},
    {Bug::kMissingRescale, "missing_rescale"},
    {Bug::kTailOffByOne, "tail_off_by_one"},
    {Bug::kWrongGqaMapping, "wrong_gqa_mapping"},
    {Bug::kCausalShifted, "causal_shifted"},
    {Bug::kAppendSpill, "append_spill"},
    {Bug::kBf16Probabilities, "bf16_probabilities"},
});
static_assert(kBugNames.RoundTrips());
inline std::string_view BugName(Bug b) { return kBugNames.Name(b); }
std::vector<Bug> AllBugs();  // every planted bug (not kNone)

std::unique_ptr<Backend> MakeCanary(Bug bug);

}  // namespace attnkit::harness

#endif  // ATTNKIT_HARNESS_CANARIES_H_
