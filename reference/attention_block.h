// The attention block's truth (runtime/attention_block.h): the naive block in
// Eigen -- every projection materialized as a whole [tokens, width] matrix,
// the K/V rows written into the cache, then the naive attention on the
// materialized Q, then the output projection -- and its f64 oracle.
#ifndef ATTNKIT_REFERENCE_ATTENTION_BLOCK_H_
#define ATTNKIT_REFERENCE_ATTENTION_BLOCK_H_

#include <vector>

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

}  // namespace attnkit::reference

#endif  // ATTNKIT_REFERENCE_ATTENTION_BLOCK_H_
