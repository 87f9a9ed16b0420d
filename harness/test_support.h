// Helpers shared by the harness's unit tests (test-only; needs GoogleTest).
#ifndef ATTNKIT_HARNESS_TEST_SUPPORT_H_
#define ATTNKIT_HARNESS_TEST_SUPPORT_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "harness/report.h"
#include "harness/runner.h"
#include "harness/test_case.h"
#include "runtime/backend.h"
#include "runtime/problem.h"
#include "runtime/random.h"

namespace attnkit::harness::testing {

// The case of a one-line case string (the test fails if it does not parse).
inline TestCase Case(const char* text) {
  auto c = ParseTestCase(text);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return *c;
}

// `c` run on backend `b` alone.
inline CheckResult RunOne(const TestCase& c, Backend& b) {
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
// extents p.max_kv_len() + kv_pad) run on `b` alone, with the project's
// tolerance model and the runner's NaN/Inf and stray-write checks. Expects a
// pass; a failure prints the runner's report and the case string, which
// `./attnkit check --repro` replays (on the backend's default options).
inline CheckResult ExpectMatchesOracle(
    Backend& b, const AttentionProblem& p, uint64_t seed,
    ValueProfile profile = ValueProfile::kNormal, int64_t kv_pad = 0) {
  TestCase c;
  c.seed = seed;
  c.problem = p;
  c.profile = profile;
  c.kv_pad = kv_pad;
  const CheckResult r = RunOne(c, b);
  char ratio[32];
  std::snprintf(ratio, sizeof(ratio), "%.3g", r.ratio);
  EXPECT_EQ(OutcomeName(r.outcome), OutcomeName(Outcome::kPass))
      << "error/bound " << ratio << "\n"
      << FormatResult(c, r) << "  Replay: " << ReproducerCommand(c, r.backend);
  return r;
}

}  // namespace attnkit::harness::testing

#endif  // ATTNKIT_HARNESS_TEST_SUPPORT_H_
