#include "simd/attention_block.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "runtime/parallel.h"
#include "xsimd/xsimd.hpp"

namespace attnkit::simd {
namespace {

using Vec = xsimd::batch<float>;
constexpr int64_t kLanes = static_cast<int64_t>(Vec::size);

// Tokens per work item: enough rows that a weight panel read from L2 is
// reused (each panel row feeds kTokens / kRows register blocks), few enough
// that a Llama-like prefill of 2k tokens still gives both cores items.
constexpr int64_t kTokens = 64;
// Hidden rows per weight panel: 256 rows x (G * d <= 512) f32 columns is at
// most 512 KiB, inside a 1 MiB L2 with the x rows beside it.
constexpr int64_t kHiddenChunk = 256;
// Output columns per item of the output projection.
constexpr int64_t kOutColumns = 256;

// R rows x 4 vectors of y in registers: 4R accumulators (16 for R = 4, half
// of AVX-512's 32 zmm), 4 weight loads and R broadcasts per 4R FMAs.
template <int R>
void Block4(const float* x, int64_t xs, const float* w, int64_t ws,
            int64_t hidden, float* y, int64_t ys, bool accumulate) {
  Vec acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < 4; ++k)
      acc[r][k] =
          accumulate ? Vec::load_unaligned(y + r * ys + k * kLanes) : Vec(0.0f);
  for (int64_t h = 0; h < hidden; ++h) {
    const float* wr = w + h * ws;
    const Vec w0 = Vec::load_unaligned(wr),
              w1 = Vec::load_unaligned(wr + kLanes),
              w2 = Vec::load_unaligned(wr + 2 * kLanes),
              w3 = Vec::load_unaligned(wr + 3 * kLanes);
    for (int r = 0; r < R; ++r) {
      const Vec xr(x[r * xs + h]);
      acc[r][0] = xsimd::fma(xr, w0, acc[r][0]);
      acc[r][1] = xsimd::fma(xr, w1, acc[r][1]);
      acc[r][2] = xsimd::fma(xr, w2, acc[r][2]);
      acc[r][3] = xsimd::fma(xr, w3, acc[r][3]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < 4; ++k)
      acc[r][k].store_unaligned(y + r * ys + k * kLanes);
}

// One row, columns [c0, cols): vectors, then scalars.
void RowTail(const float* x, const float* w, int64_t ws, int64_t hidden,
             int64_t c0, int64_t cols, float* y, bool accumulate) {
  int64_t c = c0;
  for (; c + kLanes <= cols; c += kLanes) {
    Vec acc = accumulate ? Vec::load_unaligned(y + c) : Vec(0.0f);
    for (int64_t h = 0; h < hidden; ++h)
      acc = xsimd::fma(Vec(x[h]), Vec::load_unaligned(w + h * ws + c), acc);
    acc.store_unaligned(y + c);
  }
  for (; c < cols; ++c) {
    float acc = accumulate ? y[c] : 0.0f;
    for (int64_t h = 0; h < hidden; ++h) acc += x[h] * w[h * ws + c];
    y[c] = acc;
  }
}

template <int R>
void Rows(const float* x, int64_t xs, const float* w, int64_t ws,
          int64_t hidden, int64_t cols, float* y, bool accumulate) {
  int64_t c = 0;
  for (; c + 4 * kLanes <= cols; c += 4 * kLanes)
    Block4<R>(x, xs, w + c, ws, hidden, y + c, cols, accumulate);
  if (c < cols)
    for (int r = 0; r < R; ++r)
      RowTail(x + r * xs, w, ws, hidden, c, cols, y + r * cols, accumulate);
}

// Weight rows [h0, h0 + n) and columns [c0, c0 + cols) as f32 rows with
// stride *stride: in place for f32, widened into `panel` for bf16.
const float* Panel(const TensorView& w, int64_t h0, int64_t n, int64_t c0,
                   int64_t cols, std::vector<float>& panel, int64_t* stride) {
  if (w.dtype == DType::kF32) {
    *stride = w.strides[2];
    return w.As<float>() + w.Offset(0, 0, h0, c0);
  }
  const uint16_t* src = static_cast<const uint16_t*>(w.data);
  for (int64_t h = 0; h < n; ++h) {
    const uint16_t* __restrict row = src + w.Offset(0, 0, h0 + h, c0);
    float* __restrict dst = panel.data() + h * cols;
    // A bf16 is the top half of an f32: zero-extend and shift (the loop
    // vectorizes; through bf16::ToFloat it did not).
    for (int64_t c = 0; c < cols; ++c)
      dst[c] = std::bit_cast<float>(static_cast<uint32_t>(row[c]) << 16);
  }
  *stride = cols;
  return panel.data();
}

// y[t][c] = x[t] . w[:, c0 + c] for t < n, c < cols; y dense [n][cols].
// Hidden in panels of kHiddenChunk rows: each panel serves every token of
// the item before the next is read.
void Project(const float* x, int64_t xs, int64_t n, const TensorView& w,
             int64_t c0, int64_t cols, std::vector<float>& panel, float* y) {
  const int64_t hidden = w.shape[2];
  for (int64_t h0 = 0; h0 < hidden; h0 += kHiddenChunk) {
    const int64_t hn = std::min(kHiddenChunk, hidden - h0);
    int64_t ps = 0;
    const float* p = Panel(w, h0, hn, c0, cols, panel, &ps);
    ProjectRows(x + h0, xs, n, p, ps, hn, cols, y, h0 > 0);
  }
}

// Rows t < n of a projection tile (plus the bias's columns [c0, c0 + cols))
// written by store(t, c, value).
template <typename Store>
void WriteTile(const float* y, int64_t n, int64_t cols, const TensorView& bias,
               int64_t c0, Store&& store) {
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < cols; ++c)
      store(t, c,
            y[t * cols + c] +
                (bias.is_null()
                     ? 0.0f
                     : bias.As<float>()[bias.Offset(0, 0, 0, c0 + c)]));
}

// Items (sequence, kv head, token chunk), the chunks of every sequence.
template <typename Fn>
void ForEachChunk(const AttentionProblem& at, int64_t heads, Fn&& fn) {
  for (int64_t b = 0; b < at.batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t t0 = 0; t0 < at.q_lens[b]; t0 += kTokens)
        fn(BlockItem{b, h, t0, std::min(kTokens, at.q_lens[b] - t0)});
}

// The Q columns of the group and the K/V columns of one kv head for one
// token chunk: Q into ws.q, K and V into the cache slots p0 + t.
void ProjectItem(const AttentionBlockProblem& p, const AttentionBlockArgs& a,
                 const BlockItem& it, BlockWorkspace& ws, int thread) {
  const AttentionProblem& at = p.attention;
  const int64_t d = at.head_dim, g = at.group_size(), mq = at.max_q_len();
  const float* x = a.x.As<float>() + a.x.Offset(it.b, 0, it.t0, 0);
  const int64_t xs = a.x.strides[2];
  std::vector<float>& tile = ws.tile[thread];
  std::vector<float>& panel = ws.panel[thread];
  const int64_t qc0 = it.part * g * d;
  Project(x, xs, it.n, a.wq, qc0, g * d, panel, tile.data());
  float* q = ws.q.data() + (it.b * mq + it.t0) * p.q_width() + qc0;
  WriteTile(tile.data(), it.n, g * d, a.bq, qc0,
            [&](int64_t t, int64_t c, float v) { q[t * p.q_width() + c] = v; });
  const int64_t kc0 = it.part * d;
  const int64_t p0 = at.kv_lens[it.b] - at.q_lens[it.b] + it.t0;
  for (const auto& [w, bias, cache] :
       {std::tuple<const TensorView&, const TensorView&, const TensorView&>{
            a.wk, a.bk, a.k_cache},
        std::tuple<const TensorView&, const TensorView&, const TensorView&>{
            a.wv, a.bv, a.v_cache}}) {
    Project(x, xs, it.n, w, kc0, d, panel, tile.data());
    float* base = cache.As<float>() + cache.Offset(it.b, it.part, p0, 0);
    const int64_t ts = cache.strides[2], es = cache.strides[3];
    WriteTile(
        tile.data(), it.n, d, bias, kc0,
        [&](int64_t t, int64_t e, float v) { base[t * ts + e * es] = v; });
  }
}

}  // namespace

void ProjectRows(const float* x, int64_t x_stride, int64_t rows, const float* w,
                 int64_t w_stride, int64_t hidden, int64_t cols, float* y,
                 bool accumulate) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4)
    Rows<4>(x + r * x_stride, x_stride, w, w_stride, hidden, cols, y + r * cols,
            accumulate);
  for (; r < rows; ++r)
    Rows<1>(x + r * x_stride, x_stride, w, w_stride, hidden, cols, y + r * cols,
            accumulate);
}

void BlockWorkspace::Reserve(const AttentionBlockProblem& p, int threads,
                             bool unfused) {
  const AttentionProblem& at = p.attention;
  const size_t tokens = static_cast<size_t>(at.batch * at.max_q_len());
  if (q.size() < tokens * p.q_width()) q.resize(tokens * p.q_width());
  if (p.output_projection && attn.size() < q.size()) attn.resize(q.size());
  if (unfused && k.size() < tokens * p.kv_width()) {
    k.resize(tokens * p.kv_width());
    v.resize(tokens * p.kv_width());
  }
  if (unfused && positions.size() < static_cast<size_t>(at.batch))
    positions.resize(static_cast<size_t>(at.batch));
  const int64_t widest =
      std::max({at.group_size() * at.head_dim, p.kv_width(), kOutColumns});
  const size_t tile_floats = static_cast<size_t>(kTokens * widest);
  const size_t panel_floats = static_cast<size_t>(kHiddenChunk * widest);
  // Items: (sequence, kv head or column chunk, token chunk).
  const int64_t parts =
      std::max({at.kv_heads, (p.hidden + kOutColumns - 1) / kOutColumns,
                (p.q_width() + kOutColumns - 1) / kOutColumns});
  items.reserve(static_cast<size_t>(
      at.batch * parts * ((at.max_q_len() + kTokens - 1) / kTokens)));
  if (static_cast<int>(tile.size()) < threads) tile.resize(threads);
  if (static_cast<int>(panel.size()) < threads) panel.resize(threads);
  for (std::vector<float>& t : tile)
    if (t.size() < tile_floats) t.resize(tile_floats);
  for (std::vector<float>& t : panel)
    if (t.size() < panel_floats) t.resize(panel_floats);
}

namespace {

// Rows of one sequence: x or a token-major buffer, by sequence and token.
struct RowSource {
  const float* data;
  int64_t batch_stride, row_stride;
};
struct RowSink {
  float* data;
  int64_t batch_stride, row_stride;
};

// dst[b][t][c] = src[b][t] . w[:, c] (+ bias[c]) for every token of every
// sequence and every column of w: a whole projection, split by 256-column
// chunk and token chunk over the cores.
void ProjectAll(const AttentionProblem& at, const RowSource& src,
                const TensorView& w, const TensorView& bias, const RowSink& dst,
                BlockWorkspace& ws, int threads) {
  const int64_t width = w.shape[3];
  std::vector<BlockItem>& items = ws.items;
  items.clear();
  ForEachChunk(at, (width + kOutColumns - 1) / kOutColumns,
               [&](const BlockItem& it) { items.push_back(it); });
  ForEachItem(
      static_cast<int64_t>(items.size()), threads, [&](int64_t i, int thread) {
        const BlockItem& it = items[i];
        const int64_t c0 = it.part * kOutColumns;
        const int64_t cols = std::min(kOutColumns, width - c0);
        const float* x =
            src.data + it.b * src.batch_stride + it.t0 * src.row_stride;
        std::vector<float>& tile = ws.tile[thread];
        Project(x, src.row_stride, it.n, w, c0, cols, ws.panel[thread],
                tile.data());
        float* out =
            dst.data + it.b * dst.batch_stride + it.t0 * dst.row_stride + c0;
        WriteTile(tile.data(), it.n, cols, bias, c0,
                  [&](int64_t t, int64_t c, float v) {
                    out[t * dst.row_stride + c] = v;
                  });
      });
}

// Steps 2 and 3 of either form: the attention over the cache (Q
// token-major in ws.q; without Wo straight into out's rows), then out =
// attention . Wo.
Status AttendAndProject(Backend& attention, BlockWorkspace& ws, int threads,
                        const AttentionBlockProblem& p,
                        const AttentionBlockArgs& a) {
  const AttentionProblem& at = p.attention;
  const int64_t mq = at.max_q_len(), d = at.head_dim;
  AttentionArgs args;
  args.q = HeadsOfRows(ws.q.data(), at.batch, at.q_heads, mq, d,
                       mq * p.q_width(), p.q_width());
  args.k = a.k_cache;
  args.v = a.v_cache;
  args.bias = a.bias;
  args.out = p.output_projection
                 ? HeadsOfRows(ws.attn.data(), at.batch, at.q_heads, mq, d,
                               mq * p.q_width(), p.q_width())
                 : HeadsOfRows(a.out.As<float>(), at.batch, at.q_heads, mq, d,
                               a.out.strides[0], a.out.strides[2]);
  ATTNKIT_RETURN_IF_ERROR(attention.Attention(at, args));
  if (!p.output_projection) return Status::Ok();
  ProjectAll(
      at, {ws.attn.data(), mq * p.q_width(), p.q_width()}, a.wo, TensorView(),
      {a.out.As<float>(), a.out.strides[0], a.out.strides[2]}, ws, threads);
  return Status::Ok();
}

}  // namespace

Status AttentionBlock(Backend& attention, BlockWorkspace& ws, int threads,
                      const AttentionBlockProblem& p,
                      const AttentionBlockArgs& a) {
  ATTNKIT_RETURN_IF_ERROR(ValidateBlockArgs(p, a));
  ws.Reserve(p, threads, /*unfused=*/false);
  // The projections, split by kv head (and token chunk) over the cores.
  std::vector<BlockItem>& items = ws.items;
  items.clear();
  ForEachChunk(p.attention, p.attention.kv_heads,
               [&](const BlockItem& it) { items.push_back(it); });
  ForEachItem(
      static_cast<int64_t>(items.size()), threads,
      [&](int64_t i, int thread) { ProjectItem(p, a, items[i], ws, thread); });
  return AttendAndProject(attention, ws, threads, p, a);
}

Status UnfusedAttentionBlock(Backend& backend, BlockWorkspace& ws, int threads,
                             const AttentionBlockProblem& p,
                             const AttentionBlockArgs& a) {
  ATTNKIT_RETURN_IF_ERROR(ValidateBlockArgs(p, a));
  const AttentionProblem& at = p.attention;
  const int64_t mq = at.max_q_len(), d = at.head_dim;
  ws.Reserve(p, threads, /*unfused=*/true);
  const RowSource x{a.x.As<float>(), a.x.strides[0], a.x.strides[2]};
  ProjectAll(at, x, a.wq, a.bq, {ws.q.data(), mq * p.q_width(), p.q_width()},
             ws, threads);
  ProjectAll(at, x, a.wk, a.bk, {ws.k.data(), mq * p.kv_width(), p.kv_width()},
             ws, threads);
  ProjectAll(at, x, a.wv, a.bv, {ws.v.data(), mq * p.kv_width(), p.kv_width()},
             ws, threads);
  // The transient K/V copied into the cache: what the fused form avoids.
  for (int64_t b = 0; b < at.batch; ++b)
    ws.positions[b] = at.kv_lens[b] - at.q_lens[b];
  KvAppendArgs append;
  append.k_cache = a.k_cache;
  append.v_cache = a.v_cache;
  append.new_k = HeadsOfRows(ws.k.data(), at.batch, at.kv_heads, mq, d,
                             mq * p.kv_width(), p.kv_width());
  append.new_v = HeadsOfRows(ws.v.data(), at.batch, at.kv_heads, mq, d,
                             mq * p.kv_width(), p.kv_width());
  append.positions = std::span<const int64_t>(ws.positions.data(), at.batch);
  append.new_lens = at.q_lens;
  ATTNKIT_RETURN_IF_ERROR(backend.AppendKv(append));
  return AttendAndProject(backend, ws, threads, p, a);
}

}  // namespace attnkit::simd
