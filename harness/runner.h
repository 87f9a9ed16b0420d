// The differential runner: one case, every backend under test, each checked
// against the f64 oracle with the tolerance model. A plain case is one
// attention call; a decode-loop case appends to a preallocated cache per
// backend step by step and checks every step's output and the cache bytes;
// an attention-block case runs each backend's block and checks its output,
// the new tokens' cache slots and every other byte of the cache.
#ifndef ATTNKIT_HARNESS_RUNNER_H_
#define ATTNKIT_HARNESS_RUNNER_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "harness/case.h"
#include "reference/tolerance.h"
#include "runtime/backend.h"
#include "runtime/enum_table.h"
#include "runtime/status.h"

namespace attnkit::harness {

// The tolerance model is reference/tolerance.h (the decode report uses it
// too); the results carry its error and bounds.
using reference::Bounds;
using reference::ErrorStats;

enum class Outcome : uint8_t {
  kPass = 0,
  kSkipped,     // Supports() said no: never a failure
  kMismatch,    // error beyond the tolerance
  kNonFinite,   // NaN/Inf where the oracle is finite
  kKvCache,     // cache bytes differ from the naive concatenation
  kStrayWrite,  // wrote output rows past q_lens[b] or out's padding
  kInputWrite,  // changed a byte of q, k, v, bias or the new tokens (inputs
                // it may only read), or of their padding
  kError,       // returned an error (or threw) on a supported problem
  // The backend's worker process (backends/remote.h) died in a call:
  kCrash,    // killed by a signal (SIGSEGV, abort()'s SIGABRT, ...)
  kExit,     // exited, whatever its status (exit(0) included)
  kTimeout,  // overran the call's deadline (hung) and was killed
};
inline constexpr auto kOutcomeNames = MakeEnumTable<Outcome>({
    {Outcome::kPass, "pass"},
    {Outcome::kSkipped, "skipped"},
    {Outcome::kMismatch, "mismatch"},
    {Outcome::kNonFinite, "nonfinite"},
    {Outcome::kKvCache, "kv_cache"},
    {Outcome::kStrayWrite, "stray_write"},
    {Outcome::kInputWrite, "input_write"},
    {Outcome::kError, "error"},
    {Outcome::kCrash, "crash"},
    {Outcome::kExit, "exit"},
    {Outcome::kTimeout, "timeout"},
});
static_assert(kOutcomeNames.RoundTrips());
inline std::string_view OutcomeName(Outcome o) { return kOutcomeNames.Name(o); }
// The backend's process died (not merely answered wrong).
inline bool IsDeath(Outcome o) {
  return o == Outcome::kCrash || o == Outcome::kExit || o == Outcome::kTimeout;
}

struct CheckResult {
  std::string backend;
  Outcome outcome = Outcome::kPass;
  std::string message;  // the skip reason, error, or cache/stray detail
  int64_t step = -1;    // decode step of the failure (-1: a plain case)
  // The problem of the failing (or, on a pass, the worst) call.
  AttentionProblem problem;
  ErrorStats error;
  Bounds bounds;
  double ratio = 0;    // worst error/bound over the case's calls
  double seconds = 0;  // time inside this backend (append + attention)

  bool failed() const {
    return outcome != Outcome::kPass && outcome != Outcome::kSkipped;
  }
};

// Runs `c` on every backend (in order). A Status error means the case itself
// is bad (it does not validate) -- never a backend failure.
StatusOr<std::vector<CheckResult>> RunCase(const Case& c,
                                           std::span<Backend* const> backends);

// The seed of the value stream of a case: independent of the shape stream
// Rng(seed, index), so a shrunk problem re-draws its values reproducibly.
Rng ValueRng(const Case& c);

}  // namespace attnkit::harness

#endif  // ATTNKIT_HARNESS_RUNNER_H_
