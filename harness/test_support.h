// Helpers shared by the harness's unit tests (test-only; needs GoogleTest).
#ifndef ATTNKIT_HARNESS_TEST_SUPPORT_H_
#define ATTNKIT_HARNESS_TEST_SUPPORT_H_

#include <gtest/gtest.h>

#include "harness/runner.h"
#include "harness/test_case.h"
#include "runtime/backend.h"

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
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return (*r)[0];
}

}  // namespace attnkit::harness::testing

#endif  // ATTNKIT_HARNESS_TEST_SUPPORT_H_
