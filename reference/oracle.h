// The f64 oracle: attention in double precision with plain loops, the truth
// every backend (including the f32 reference) is measured against. Inputs are
// read at their stored precision (bf16 widened exactly), so the oracle's only
// error is f64 rounding, ~1e-16 relative.
#ifndef ATTNKIT_REFERENCE_ORACLE_H_
#define ATTNKIT_REFERENCE_ORACLE_H_

#include <vector>

#include "runtime/problem.h"
#include "runtime/status.h"

namespace attnkit::reference {

// Writes a dense [batch, q_heads, max_q_len, head_dim] result into *out
// (rows past q_lens[b] are zero). args.out is not read or written.
Status OracleAttention(const AttentionProblem& p, const AttentionArgs& args,
                       std::vector<double>* out);

}  // namespace attnkit::reference

#endif  // ATTNKIT_REFERENCE_ORACLE_H_
