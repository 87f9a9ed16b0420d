// The one-time output check of every kernel benchmark: a fast kernel that is
// wrong must never post a good number. Compares a slice of the backend's
// output with the f64 oracle.
#ifndef ATTNKIT_BENCH_OUTPUT_CHECK_H_
#define ATTNKIT_BENCH_OUTPUT_CHECK_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "reference/tolerance.h"
#include "runtime/problem.h"
#include "runtime/status.h"
#include "runtime/tensor.h"

namespace attnkit::bench {

// Checks args.out of problem p against the f64 oracle with the tolerance
// model every comparison uses (reference/tolerance.h): every row when the
// oracle work (rows x keys) is small, otherwise the first and last `edge_rows`
// query rows of every (batch, head) -- the causal edges where masks go wrong.
// The slice is a sub-problem with the same query positions (queries align to
// the end of the context), so the oracle runs on it directly.
// FAILED_PRECONDITION names the worst element on a mismatch. `full_check_work`
// is the oracle work (batch x heads x rows x keys x dim) up to which every row
// is checked (~0.2 s of f64 loops by default on a 2-core AMD EPYC Zen 5 family
// 26, GCC 12.2, 2026-11-21).
inline constexpr double kFullCheckWork = 2e8;
//
// With a TruthCache the oracle (and the naive reference its bounds come
// from) runs once per problem and checked slice; every later check of the
// same problem only measures args.out against the kept result. Only for
// callers whose inputs (q, k, v, bias, scales) are a function of
// p.ToString(), as the benchmark binary's are (InputsFor): the key is the
// problem, not the data.
class TruthCache;
Status CheckAgainstOracle(const AttentionProblem& p, const AttentionArgs& args,
                          int64_t edge_rows = 4,
                          double full_check_work = kFullCheckWork,
                          TruthCache* cache = nullptr);

// The oracle's results by problem and checked slice. In the benchmark
// binary every backend and every paired twin checks the same problem: in
// the quick grid the f64 oracle and the naive reference were ~16% of the
// process's CPU samples, recomputed for each of them (2-core Intel Xeon
// under KVM, GCC 12.2, 2026-11-28).
class TruthCache {
 public:
  size_t size() const { return truths_.size(); }

 private:
  friend Status CheckAgainstOracle(const AttentionProblem&,
                                   const AttentionArgs&, int64_t, double,
                                   TruthCache*);
  std::map<std::string, reference::Truth, std::less<>> truths_;
};

// Fills every element of a rank-4 view (dim 3 unit-stride) with N(0, 1)
// values copied from a fixed seeded pool: memory-speed, so a 1 GB KV cache
// is ready in a fraction of a second, and still reproducible. `salt` makes
// tensors differ.
void FillFromPool(const TensorView& t, uint64_t salt);

}  // namespace attnkit::bench

#endif  // ATTNKIT_BENCH_OUTPUT_CHECK_H_
