// The attention block's truth (runtime/attention_block.h): the naive block in
// Eigen -- every projection materialized as a whole [tokens, width] matrix,
// the K/V rows written into the cache, then the naive attention on the
// materialized Q, then the output projection -- and its f64 oracle.
#ifndef ATTNKIT_REFERENCE_ATTENTION_BLOCK_H_
#define ATTNKIT_REFERENCE_ATTENTION_BLOCK_H_

#include <vector>

#include "reference/tolerance.h"
#include "runtime/attention_block.h"
#include "runtime/status.h"

namespace attnkit::reference {

// The naive f32 block: writes args.out rows i < q_lens[b] and the cache rows
// [kv_len - q_len, kv_len) of every sequence and kv head, nothing else.
Status AttentionBlock(const AttentionBlockProblem& p,
                      const AttentionBlockArgs& args);

// The block in double precision with plain loops. Weights and x are read at
// their stored precision, the cache's context rows [0, kv_len - q_len) as
// stored; the new tokens' K/V are the oracle's own f64 projections (the
// cache's rows there are not read).
struct BlockOracle {
  std::vector<double> out;   // [batch, max_q_len, out_width], zeros past q_len
  std::vector<double> k, v;  // [batch, max_q_len, kv_width]: new tokens' K/V
};
Status OracleAttentionBlock(const AttentionBlockProblem& p,
                            const AttentionBlockArgs& args, BlockOracle* out);

// The block's output as MeasureError (reference/tolerance.h) sees it: one
// "head" of out_width() columns per token, [batch, 1, max_q_len, out_width],
// the layout of BlockOracle::out and of AttentionBlockArgs::out.
AttentionProblem BlockOutputShape(const AttentionBlockProblem& p);

// What one block call is held to -- the tolerance model of
// reference/tolerance.h carried over to the block:
//  * out: max |err| <= 2 x the naive block's max |err| + floor, mean |err|
//    <= 1.5 x its mean + floor (FlashAttention's rule, as for attention).
//    floor = 32 (max) or 8 (mean) eps_f32 x max(1, max |oracle out|) x
//    sqrt(hidden + q_width): where the naive block happens to round a dot
//    product exactly, a correct kernel summing the hidden-long (and, through
//    Wo, q_width-long) products in another order (panels, vector lanes,
//    FMA) is ~sqrt(n) ulps off; 32 of them are still >100x below a wrong
//    weight column or head (O(0.1) of the output). Inputs are O(1)
//    (AttentionBlockData), so the logits are too: no huge-logit term.
//  * the new tokens' K/V in the cache: per element |err| <= (hidden + 2)
//    eps_f32 x (sum_h |x_h w_hc| + |bias_c|): the worst-case rounding of a
//    hidden-long f32 dot product in any summation order (Higham's gamma_n),
//    so no correct kernel can exceed it, and any wrong one (O(|k|)) does.
struct BlockTruth {
  BlockOracle oracle;
  ErrorStats naive;  // the naive block's error on out
  Bounds out;
  std::vector<double> k_bound, v_bound;  // [batch, max_q_len, kv_width]
};
// Runs the oracle and the naive block. args.out and the cache's new-token
// slots are scratch (they hold the naive block's results afterwards).
// INTERNAL when the naive block produces NaN/Inf (broken inputs or
// reference, not the backend under test).
StatusOr<BlockTruth> ComputeBlockTruth(const AttentionBlockProblem& p,
                                       const AttentionBlockArgs& args);

}  // namespace attnkit::reference

#endif  // ATTNKIT_REFERENCE_ATTENTION_BLOCK_H_
