// The simd backend's attention block (runtime/attention_block.h): the Q/K/V
// projections split by kv head -- each work item (sequence, kv head, token
// chunk) projects its group's Q columns and its K/V columns with a
// register-blocked xsimd kernel, X's rows reused across the group's heads,
// and writes K/V straight into the cache slots (no transient K/V) -- then
// the flash attention over the cache, then the output projection split by
// output columns. Heads are partitioned over the cores.
#ifndef ATTNKIT_SIMD_ATTENTION_BLOCK_H_
#define ATTNKIT_SIMD_ATTENTION_BLOCK_H_

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/attention_block.h"
#include "runtime/backend.h"
#include "runtime/status.h"

namespace attnkit::simd {

// y[r][c] (+)= sum_{h < hidden} x[r * x_stride + h] * w[h * w_stride + c]
// for r < rows, c < cols; y is dense [rows][cols]. f32, vectorized along c.
void ProjectRows(const float* x, int64_t x_stride, int64_t rows, const float* w,
                 int64_t w_stride, int64_t hidden, int64_t cols, float* y,
                 bool accumulate);

// One work item: rows [t0, t0 + n) of sequence b, and `part` -- the kv head
// of a projection item, the column chunk of an output-projection item.
struct BlockItem {
  int64_t b = 0, part = 0, t0 = 0, n = 0;
};

// Scratch of the block, grown to the largest problem seen and reused: Q and
// the attention's output (token-major), and per thread a projection tile and
// a widened weight panel (bf16 weights).
struct BlockWorkspace {
  std::vector<float> q, attn;
  std::vector<float> k, v;         // the unfused form's transient K/V
  std::vector<int64_t> positions;  // the unfused form's append positions
  std::vector<std::vector<float>> tile, panel;
  std::vector<BlockItem> items;
  void Reserve(const AttentionBlockProblem& p, int threads, bool unfused);
};

// The block with `attention` (the simd backend itself) for the attention
// step. Allocates nothing once `ws` has been reserved for `p`.
Status AttentionBlock(Backend& attention, BlockWorkspace& ws, int threads,
                      const AttentionBlockProblem& p,
                      const AttentionBlockArgs& args);

// The unfused block, the baseline the fused one is measured against:
// whole-matrix projections of every token into transient Q, K and V
// buffers, K and V appended to the cache (backend.AppendKv: a copy), then
// backend.Attention and the output projection -- what a runtime that does
// not fuse the QKV projection into attention does. Works with any backend.
Status UnfusedAttentionBlock(Backend& backend, BlockWorkspace& ws, int threads,
                             const AttentionBlockProblem& p,
                             const AttentionBlockArgs& args);

}  // namespace attnkit::simd

#endif  // ATTNKIT_SIMD_ATTENTION_BLOCK_H_
