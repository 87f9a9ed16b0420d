// Shrinking: from a failing case, greedily try smaller cases (fewer decode
// steps, sequences dropped, each length/head count/head_dim bisected, mask,
// dtype, layout, scale and values simplified) and keep any that still fails
// the same way, until nothing smaller fails. What a person then debugs is the
// smallest problem that shows the bug.
#ifndef ATTNKIT_HARNESS_SHRINK_H_
#define ATTNKIT_HARNESS_SHRINK_H_

#include <functional>
#include <optional>
#include <vector>

#include "harness/case.h"
#include "harness/runner.h"
#include "runtime/backend.h"

namespace attnkit::harness {

// Every simplification of `c` one step away, in the order they are tried
// (the biggest cuts first). All validate and cost less than `c`.
std::vector<Case> ShrinkCandidates(const Case& c);

struct ShrinkResult {
  Case smallest;
  CheckResult failure;  // the smallest case's failure
  int attempts = 0;     // candidates run
  int accepted = 0;     // candidates that still failed
};

// `fails(candidate)` runs a candidate and returns its failure, or nullopt
// when it passes. A candidate is kept only when it fails with the same
// outcome as `failure`. Stops after `max_attempts` runs.
using FailureOf = std::function<std::optional<CheckResult>(const Case&)>;
// Stops after `max_attempts` runs or, when time_budget_s > 0, once that
// much time has passed.
ShrinkResult Shrink(const Case& c, const CheckResult& failure,
                    const FailureOf& fails, int max_attempts = 400,
                    double time_budget_s = 0);

// Shrinks against one backend through RunCase. A death (crash, exit,
// timeout) runs each candidate after Backend::Reset (a fresh worker), so
// the smallest case dies on its own, not because of the calls before it.
ShrinkResult ShrinkOnBackend(const Case& c, const CheckResult& failure,
                             Backend& backend, int max_attempts = 400,
                             double time_budget_s = 0);

}  // namespace attnkit::harness

#endif  // ATTNKIT_HARNESS_SHRINK_H_
