// Limits every tool shares: overflow-checked size arithmetic for the
// validations, a memory estimate that is checked against a budget before
// anything is allocated (`--max-memory`), the default budget (the machine's
// available memory with a margin), and what a tool was doing when an
// allocation failed anyway (its top-level last resort reports that).
#ifndef ATTNKIT_RUNTIME_LIMITS_H_
#define ATTNKIT_RUNTIME_LIMITS_H_

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/status.h"

namespace attnkit {

// a * b, a + b, and the product of xs, or nullopt when the result leaves
// int64.
std::optional<int64_t> CheckedMul(int64_t a, int64_t b);
std::optional<int64_t> CheckedAdd(int64_t a, int64_t b);
std::optional<int64_t> CheckedProduct(std::initializer_list<int64_t> xs);

// What one run will hold at once, item by item ("kv cache (2 x layers=4 x
// batch=1 x ...)": bytes). Bytes are doubles so that no estimate of an
// absurd size overflows; they are compared, never allocated.
class MemoryEstimate {
 public:
  // Adds `what` of the product of `factors` bytes (factors as doubles).
  MemoryEstimate& Add(std::string what, std::initializer_list<double> factors);
  double total() const { return total_; }
  struct Item {
    std::string what;
    double bytes = 0;
  };
  const std::vector<Item>& items() const { return items_; }

  // OK when total() <= max_bytes; else RESOURCE_EXHAUSTED: "<subject> needs
  // an estimated N bytes (X GiB) but <flag> is M bytes: item1 B1 bytes, ...
  // (largest first); raise <flag> or shrink the sizes".
  Status Check(int64_t max_bytes, std::string_view subject,
               std::string_view flag = "--max-memory") const;

 private:
  std::vector<Item> items_;
  double total_ = 0;
};

// "1.5 GiB", "12 KiB", "17 B" (bytes as a double: estimates may be absurd).
std::string HumanBytes(double bytes);

// Parses a byte count for --max-memory: an integer with an optional K, M,
// G or T suffix (powers of 1024; "512M", "4G", "1073741824"), at least 1
// and at most 2^62. nullopt otherwise.
std::optional<int64_t> ParseByteSize(std::string_view s);

// The default --max-memory: MemAvailable of /proc/meminfo times 0.8 (what
// the machine can give without swapping or the OOM killer, less a margin
// for the process itself and its neighbours); 4 GiB when that cannot be read.
int64_t DefaultMaxMemory();

// The default --max-work of `check --repro`: multiply-adds of the f64 oracle
// (batch * heads * q * kv * head_dim over every call of a case). 2e9 is ~8
// s of oracle on a 2-core AMD EPYC Zen 5 family 26 (GCC 12.2, 2026-11-23);
// every case the long tier generates is below 1.5e8.
inline constexpr double kDefaultMaxWork = 2e9;

// The exit statuses every tool shares: 0 pass, 1 a finding (or a harness
// error), 2 bad usage (or a size over --max-memory / --max-work), and 4
// when nothing was checked (every case skipped, a campaign of 0 cases, a
// decode gate with nothing to compare): never a false green (pytest's 5).
inline constexpr int kExitPass = 0;
inline constexpr int kExitFinding = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitNothingChecked = 4;

// What the process is doing, for the message of its top-level last resort
// (an allocation failure that escaped every estimate): "running case
// seed=1,...". Set by the tools at each phase; the last one wins.
void SetActivity(std::string what);
const std::string& Activity();

}  // namespace attnkit

#endif  // ATTNKIT_RUNTIME_LIMITS_H_
