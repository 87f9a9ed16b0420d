// Helpers for unit tests that run cases through the harness: its own tests
// and the backends' (test-only; needs GoogleTest).
#ifndef ATTNKIT_HARNESS_TEST_SUPPORT_H_
#define ATTNKIT_HARNESS_TEST_SUPPORT_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "harness/case.h"
#include "harness/report.h"
#include "harness/runner.h"
#include "runtime/accounting.h"
#include "runtime/attention_block.h"
#include "runtime/backend.h"
#include "runtime/problem.h"
#include "runtime/random.h"

namespace attnkit::harness::testing {

// The case of a one-line case string (the test fails if it does not parse).
inline Case CaseFrom(const char* text) {
  auto c = ParseCase(text);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return *c;
}

// `c` run on backend `b` alone.
inline CheckResult RunOne(const Case& c, Backend& b) {
  Backend* one[] = {&b};
  auto r = RunCase(c, one);
  if (!r.ok()) {
    // The case itself is bad: reported as an error, never read from `r`.
    ADD_FAILURE() << r.status().ToString();
    CheckResult bad;
    bad.backend = std::string(b.name());
    bad.outcome = Outcome::kError;
    bad.message = "bad case: " + r.status().ToString();
    bad.problem = c.problem;
    return bad;
  }
  return (*r)[0];
}

// The one way a backend's unit tests compare it with the f64 oracle: `p` as
// a plain case (values drawn by the runner from `seed` and `profile`, K/V
// extents p.max_kv_len() + kv_pad) run on each of `backends` (the oracle and
// the bounds computed once), with the project's tolerance model and the
// runner's NaN/Inf and stray-write checks. Expects every backend to pass; a
// failure prints the runner's report and the case string, which
// `./attnkit check --repro` replays (on the backend's default options).
inline std::vector<CheckResult> ExpectMatchesOracle(
    std::span<Backend* const> backends, const AttentionProblem& p,
    uint64_t seed, ValueProfile profile = ValueProfile::kNormal,
    int64_t kv_pad = 0) {
  Case c;
  c.seed = seed;
  c.problem = p;
  c.profile = profile;
  c.kv_pad = kv_pad;
  auto r = RunCase(c, backends);
  if (!r.ok()) {
    ADD_FAILURE() << "bad case " << c.ToString() << ": "
                  << r.status().ToString();
    std::vector<CheckResult> bad(backends.size());
    for (size_t i = 0; i < bad.size(); ++i) {
      bad[i].backend = std::string(backends[i]->name());
      bad[i].outcome = Outcome::kError;
      bad[i].message = r.status().ToString();
      bad[i].problem = p;
    }
    return bad;
  }
  for (const CheckResult& x : *r) {
    char ratio[32];
    std::snprintf(ratio, sizeof(ratio), "%.3g", x.ratio);
    EXPECT_EQ(OutcomeName(x.outcome), OutcomeName(Outcome::kPass))
        << "error/bound " << ratio << "\n"
        << FormatResult(c, x)
        << "  Replay: " << ReproducerCommand(c, x.backend);
  }
  return std::move(r).value();
}

// The same for an attention block: `p` as a block case run on each of
// `backends` -- output, the cache's new slots and every other cache byte
// checked by the runner (harness/README.md, "Cases").
// The one-call block case of `p`, its values from `seed`.
inline Case BlockCase(const AttentionBlockProblem& p, uint64_t seed) {
  Case c;
  c.seed = seed;
  c.problem = p.attention;
  c.hidden = p.hidden;
  c.weight_dtype = p.weight_dtype;
  c.qkv_bias = p.qkv_bias;
  c.output_projection = p.output_projection;
  return c;
}

inline std::vector<CheckResult> ExpectBlockMatchesOracle(
    std::span<Backend* const> backends, const AttentionBlockProblem& p,
    uint64_t seed) {
  const Case c = BlockCase(p, seed);
  auto r = RunCase(c, backends);
  if (!r.ok()) {
    ADD_FAILURE() << "bad case " << c.ToString() << ": "
                  << r.status().ToString();
    return {};
  }
  for (const CheckResult& x : *r) {
    char ratio[32];
    std::snprintf(ratio, sizeof(ratio), "%.3g", x.ratio);
    EXPECT_EQ(OutcomeName(x.outcome), OutcomeName(Outcome::kPass))
        << "error/bound " << ratio << "\n"
        << FormatResult(c, x) << "  " << x.message
        << "\n  Replay: " << ReproducerCommand(c, x.backend);
  }
  return std::move(r).value();
}

// `steps` warm decode steps of `b`'s block (`last`'s contexts less `steps`,
// then one more token each step, up to `last`), each metered: no allocation
// and no byte copied -- the K/V projections' stores into the cache slots are
// the step's only writes besides out.
inline void ExpectBlockDecodeStepsAllocateAndCopyNothing(
    Backend& b, const AttentionBlockProblem& last, const AttentionBlockArgs& a,
    int64_t steps) {
  for (int64_t step = steps; step >= 0; --step) {
    AttentionBlockProblem p = last;
    for (int64_t& kv : p.attention.kv_lens) kv -= step;
    accounting::Meter meter;
    ASSERT_TRUE(b.AttentionBlock(p, a).ok()) << "step " << step;
    const accounting::Counts c = meter.Read();
    EXPECT_EQ(c.allocs, 0) << "step " << step;
    EXPECT_EQ(c.bytes_copied, 0) << "step " << step;
  }
}

inline CheckResult ExpectMatchesOracle(
    Backend& b, const AttentionProblem& p, uint64_t seed,
    ValueProfile profile = ValueProfile::kNormal, int64_t kv_pad = 0) {
  Backend* one[] = {&b};
  return ExpectMatchesOracle(one, p, seed, profile, kv_pad)[0];
}

}  // namespace attnkit::harness::testing

#endif  // ATTNKIT_HARNESS_TEST_SUPPORT_H_
