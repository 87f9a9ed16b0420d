// The attention block (seed 000's Megatron-style listing): the Q/K/V
// projections of an input X, the attention, and an optional output
// projection -- what inference runtimes fuse. The same problem is prefill
// (an empty cache prefix) and decode (X holds the new tokens, the context is
// already in the KV cache): the block writes the projected K/V of its tokens
// into the cache at positions [kv_len - q_len, kv_len) and the attention
// reads the cache prefix [0, kv_len).
#ifndef ATTNKIT_RUNTIME_ATTENTION_BLOCK_H_
#define ATTNKIT_RUNTIME_ATTENTION_BLOCK_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/problem.h"
#include "runtime/status.h"
#include "runtime/tensor.h"

namespace attnkit {

// Llama-class models stay below 16k; 65536 bounds the weights (hidden x
// (hq + 2 hkv) x d floats) a validated problem may ask for.
inline constexpr int64_t kMaxHidden = 65536;

struct AttentionBlockProblem {
  // Heads, head_dim, mask, scale and the KV cache's layout and dtype.
  // q_lens[b] = the tokens of X in sequence b (the queries), kv_lens[b] = its
  // context including them (kv_lens[b] >= q_lens[b]; decode: q 1, kv n).
  AttentionProblem attention;
  int64_t hidden = 64;
  DType weight_dtype = DType::kF32;  // Wq, Wk, Wv, Wo; X and biases are f32
  bool qkv_bias = false;             // + bq, bk, bv after the projections
  bool output_projection = false;    // out = attention · Wo, else attention

  Status Validate() const;

  int64_t q_width() const { return attention.q_heads * attention.head_dim; }
  int64_t kv_width() const { return attention.kv_heads * attention.head_dim; }
  int64_t out_width() const { return output_projection ? hidden : q_width(); }
  // 2 x the multiply-adds of the projections, the attention and Wo.
  double Flops() const;

  // The attention's canonical form followed by the block's fields, e.g.
  //   b=1,hq=8,hkv=2,d=64,q=5,kv=5,mask=causal,dtype=f32,layout=bhsd,
  //   hidden=96,w=bf16,qkv_bias=1,wo=1
  // ParseAttentionBlockProblem(ToString()) round-trips exactly.
  std::string ToString() const;
};

StatusOr<AttentionBlockProblem> ParseAttentionBlockProblem(
    std::string_view text);

// The tensors of one block call (all f32 unless stated):
//   x        [batch, 1, >= max_q_len, hidden], unit stride along hidden
//   wq       [1, 1, hidden, hq·d] (weight dtype; column h·d + e is head h's
//            dim e: the Megatron column split), wk, wv [1, 1, hidden, hkv·d]
//   bq, bk, bv [1, 1, 1, hq·d | hkv·d] (qkv_bias only)
//   wo       [1, 1, hq·d, hidden] (weight dtype; output_projection only)
//   bias     the attention's additive bias (mask=bias only), as
//            AttentionArgs::bias
//   k_cache, v_cache  [batch, kv_heads, >= max_kv_len, head_dim] in the
//            attention's layout and dtype: rows [0, kv_len - q_len) hold the
//            context; the block writes rows [kv_len - q_len, kv_len) and
//            nothing else
//   out      [batch, 1, >= max_q_len, out_width()]; rows i < q_lens[b] written
// Weights are read-only; every matrix has unit stride along its last dim.
struct AttentionBlockArgs {
  TensorView x, wq, wk, wv, bq, bk, bv, wo, bias, k_cache, v_cache, out;
};

Status ValidateBlockArgs(const AttentionBlockProblem& p,
                         const AttentionBlockArgs& args);

// The [batch, heads, max_q, d] f32 view of token-major rows -- each token's
// heads * d values side by side, as a projection writes Q (or the attention
// writes the rows Wo reads) -- with the rows' own batch and row strides.
TensorView HeadsOfRows(float* data, int64_t batch, int64_t heads, int64_t max_q,
                       int64_t d, int64_t batch_stride, int64_t row_stride);

}  // namespace attnkit

#endif  // ATTNKIT_RUNTIME_ATTENTION_BLOCK_H_
