// The f64 oracle: attention in double precision with plain loops, the truth
// every backend (including the f32 reference) is measured against. Inputs are
// read at their stored precision (bf16 widened exactly; i8 K/V as integer
// times scale, exact in f64: the values as stored), so the oracle's only
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

// Rows [0, n) of view t at (b, h) -- [n, shape[3]] -- widened to f32 into
// `out`, dense (exact for f32 and bf16): what the oracle and the tolerance
// model read, once per kv head, instead of a strided Load per multiply-add.
// i8 rows widen to their integers, exactly; with `scales` given, each row
// is multiplied by its scale in f32 (the dequantized value, rounded).
void WidenRows(const TensorView& t, int64_t b, int64_t h, int64_t n,
               std::vector<float>& out, const TensorView& scales = {});

// Scales [0, n) of an i8 K/V's scale view at (b, h) as f64 -- all 1 when
// `scales` is null (K/V not quantized).
void WidenScales(const TensorView& scales, int64_t b, int64_t h, int64_t n,
                 std::vector<double>& out);

// sum_e a[e] * b[e] in f64 (four partial sums: the order differs from a
// plain loop by f64 rounding only).
double DotF64(const float* a, const float* b, int64_t n);

}  // namespace attnkit::reference

#endif  // ATTNKIT_REFERENCE_ORACLE_H_
