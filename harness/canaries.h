// Canaries: test-only backends with one planted bug each. They prove the
// tester compares (a public attention suite once computed the expected output
// and never compared it): each must be caught by the smoke tier. Their
// correct twin (Bug::kNone) is an independent flash-style implementation --
// KV tiles of 16 keys, running max and sum, rescale on a new max -- whose
// summation order differs from the naive reference's, so it also shows the
// tolerance model does not cry wolf on a correct kernel. Every canary also
// has an attention block (plain-loop projections into the cache, its own
// attention, Wo), where the block bugs are planted.
#ifndef ATTNKIT_HARNESS_CANARIES_H_
#define ATTNKIT_HARNESS_CANARIES_H_

#include <memory>
#include <string_view>
#include <vector>

#include "harness/case.h"
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
  // The blind spots of the generator's first version (issue 17): each needs
  // a shape or check the default tier once never drew or made.
  kSharedBiasByHead,     // indexes a shared bias [b, 1, q, kv] by head
  kIgnoresRowStrides,    // reads q / writes out as dense [b][h][s][d]
  kHeadDimOver256,       // a 256-float row buffer: dims past 256 dropped
  kKeyIndexWraps4096,    // a 12-bit key index: key j read as j % 4096
  kKeyIndexWraps65536,   // a 16-bit key index: key j read as j % 65536
  kScalesQInPlace,       // folds the scale into q, in place (right output)
  kZeroesKvPastLen,      // clears K/V rows past kv_len (right output)
  kAppendFirstPosition,  // appends every sequence at sequence 0's position
  kAppendIgnoresLens,    // appends max(new_lens) tokens for every sequence
  kAppendVRowMajor,      // writes V with K's strides (tv cache as row-major)
  // The attention block's (issue 19): caught only by block cases.
  kBlockKWithWv,           // K projected with Wv
  kBlockSliceOffByOne,     // each head's Wq slice read one column right
  kBlockTransposedWeight,  // Wq read as if stored [q_width, hidden]
  kBlockWoWrongHead,       // head h's attention meets head h+1's rows of Wo
  // The quantized (i8) KV cache's (issue 21): caught only by i8 cases.
  kI8ScaleWrongToken,  // key j's logit scaled by token j+1's k_scale
  kI8ScaleWrongHead,   // kv head h's V read with kv head h+1's v_scale
  kI8AppendTruncates,  // the append truncates x/scale toward zero (no RNE)
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
    {Bug::kSharedBiasByHead, "shared_bias_by_head"},
    {Bug::kIgnoresRowStrides, "ignores_row_strides"},
    {Bug::kHeadDimOver256, "head_dim_over_256"},
    {Bug::kKeyIndexWraps4096, "key_index_wraps_4096"},
    {Bug::kKeyIndexWraps65536, "key_index_wraps_65536"},
    {Bug::kScalesQInPlace, "scales_q_in_place"},
    {Bug::kZeroesKvPastLen, "zeroes_kv_past_len"},
    {Bug::kAppendFirstPosition, "append_first_position"},
    {Bug::kAppendIgnoresLens, "append_ignores_lens"},
    {Bug::kAppendVRowMajor, "append_v_row_major"},
    {Bug::kBlockKWithWv, "block_k_with_wv"},
    {Bug::kBlockSliceOffByOne, "block_slice_off_by_one"},
    {Bug::kBlockTransposedWeight, "block_transposed_weight"},
    {Bug::kBlockWoWrongHead, "block_wo_wrong_head"},
    {Bug::kI8ScaleWrongToken, "i8_scale_wrong_token"},
    {Bug::kI8ScaleWrongHead, "i8_scale_wrong_head"},
    {Bug::kI8AppendTruncates, "i8_append_truncates"},
});
static_assert(kBugNames.RoundTrips());
inline std::string_view BugName(Bug b) { return kBugNames.Name(b); }
std::vector<Bug> AllBugs();  // every planted bug (not kNone)
// The tier whose default campaign (seed 1) must catch the bug: smoke for
// the first ones, default for those needing its long contexts and wide
// heads (harness/canaries_test.cc holds each to it).
Tier CatchingTier(Bug bug);

std::unique_ptr<Backend> MakeCanary(Bug bug);

}  // namespace attnkit::harness

#endif  // ATTNKIT_HARNESS_CANARIES_H_
