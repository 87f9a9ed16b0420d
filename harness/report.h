// Reports: a torch-style failure text for people, a per-backend summary
// table, and versioned JSON for machines.
#ifndef ATTNKIT_HARNESS_REPORT_H_
#define ATTNKIT_HARNESS_REPORT_H_

#include <span>
#include <string>
#include <string_view>

#include "harness/campaign.h"
#include "harness/runner.h"

namespace attnkit::harness {

// Bumped whenever a field changes meaning or disappears (additions too, so
// consumers can rely on a version's fields being present).
inline constexpr int kJsonSchemaVersion = 2;  // 2: deaths, quarantine

// The one-line command that replays `c` on `backend`; plug-ins needed to
// build that backend are passed along, and `extra_flags` (the isolation
// and deadline flags the run was given) appended as they are.
std::string ReproducerCommand(const Case& c, std::string_view backend,
                              std::span<const std::string> plugins = {},
                              std::string_view extra_flags = {});

// Single quotes for a POSIX shell (case strings never contain one, but a
// plug-in path might).
std::string ShellQuote(std::string_view s);

// "FAIL [simd] mismatch ..." with mismatched count and %, greatest absolute
// and relative differences with their [b, h, i, e] index, the mean error,
// the bounds, seed/index, the (shrunk) problem and the reproducer.
std::string FormatFailure(const FailureReport& f,
                          std::span<const std::string> plugins = {},
                          std::string_view extra_flags = {});

// One check's result in the same words (the --repro path).
std::string FormatResult(const Case& c, const CheckResult& r);

// backend | cases | failures | skipped | worst err/bound | cases/s, then a
// QUARANTINED line per backend left out after its worker kept dying.
std::string FormatSummary(const CampaignResult& r);

struct JsonContext {
  std::string tier;
  uint64_t seed = 0;
  std::string shard;  // "i/n"
  std::span<const std::string> plugins;
  std::string extra_flags;  // for the reproducers (ReproducerCommand)
};
// {"schema_version", "tool", "tier", "seed", "shard", "summary": {cases,
// failures, seconds, cpu_seconds, interrupted, fatal}, "backends": [...],
// "failures":
// [one object per failing case, with its reproducer]}, keys in that order.
// Non-finite numbers are written as null (JSON has neither NaN nor Inf).
std::string CampaignJson(const CampaignResult& r, const JsonContext& ctx);

// JUnit XML for CI systems that read it: one <testsuite> per backend
// (tests, failures, skipped counted in cases), a <testcase> per failing case
// named by its case string with the reproducer as the failure's message, one
// passing <testcase> standing for the cases that passed and one skipped
// <testcase> for the unsupported ones. An interrupted or fatal campaign adds
// an "attnkit" suite whose testcase is an <error>. Text is XML-escaped;
// characters XML 1.0 cannot carry (control characters) are written \xNN.
std::string CampaignJunit(const CampaignResult& r, const JsonContext& ctx);

}  // namespace attnkit::harness

#endif  // ATTNKIT_HARNESS_REPORT_H_
