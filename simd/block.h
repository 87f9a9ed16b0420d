// What the prefill and decode kernels share about one work item: its rows
// (query x head, with each row's visible keys and bias row), which of a
// tile's keys the rows see, the mask applied to a row of logits, and the
// write-out of the finished rows.
//
// Include ONLY from the per-ISA kernel headers (see simd/isa.h: everything
// here lives in the per-ISA namespace ATTNKIT_SIMD_NS).
#ifndef ATTNKIT_SIMD_NS
#error "define ATTNKIT_SIMD_NS before including simd/block.h"
#endif

#ifndef ATTNKIT_SIMD_BLOCK_H_
#define ATTNKIT_SIMD_BLOCK_H_

#include <cstdint>

#include "runtime/problem.h"
#include "runtime/split_kv.h"
#include "simd/isa.h"
#include "simd/kernel.h"

namespace attnkit::simd::internal::ATTNKIT_SIMD_NS {
namespace {

// The rows of one work item, row r = (kv head, query, head), kv head
// outermost: the decode path takes each kv head's rows as one contiguous
// block.
struct Rows {
  int64_t count = 0;
  int64_t head[kMaxRows], query[kMaxRows];
  // Keys [key_begin[r], key_end[r]) of the job's range row r may see.
  int64_t key_begin[kMaxRows], key_end[kMaxRows];
  const float* bias[kMaxRows];  // row of bias (stride bias.strides[3]) or null
  // The union of the rows' non-empty key ranges (begin >= end: none).
  int64_t keys_begin = 0, keys_end = 0;
};

ATTNKIT_SIMD_STEP inline Rows MakeRows(const BlockJob& job) {
  const AttentionProblem& p = *job.problem;
  const AttentionArgs& a = *job.args;
  Rows rows;
  const int64_t G = p.group_size();
  rows.keys_begin = job.kv_end;
  rows.keys_end = job.kv_begin;
  for (int64_t k = 0; k < job.kv_heads; ++k) {
    for (int64_t ii = 0; ii < job.queries; ++ii) {
      for (int64_t gg = 0; gg < job.group_heads; ++gg) {
        const int64_t r = rows.count++;
        rows.head[r] = (job.kv_head + k) * G + job.first_group_head + gg;
        rows.query[r] = job.first_query + ii;
        const KeyRange kr = VisibleKeys(p, job.batch, rows.query[r]);
        rows.key_begin[r] = kr.begin > job.kv_begin ? kr.begin : job.kv_begin;
        rows.key_end[r] = kr.end < job.kv_end ? kr.end : job.kv_end;
        if (rows.key_begin[r] < rows.key_end[r]) {
          rows.keys_begin = rows.key_begin[r] < rows.keys_begin
                                ? rows.key_begin[r]
                                : rows.keys_begin;
          rows.keys_end =
              rows.key_end[r] > rows.keys_end ? rows.key_end[r] : rows.keys_end;
        }
        rows.bias[r] = nullptr;
        if (p.mask == MaskKind::kBias) {
          // Not Offset(): the key extent may be 0 (every kv_len 0).
          const int64_t hb = a.bias.shape[1] == 1 ? 0 : rows.head[r];
          rows.bias[r] = a.bias.As<float>() + job.batch * a.bias.strides[0] +
                         hb * a.bias.strides[1] +
                         rows.query[r] * a.bias.strides[2];
        }
      }
    }
  }
  return rows;
}

// Which of the keys [j0, j0 + nt) the rows see. full: every row sees every
// key and no bias applies (the tile needs no mask); empty: no row sees any
// (causal or window: the tile is skipped).
struct TileCoverage {
  bool full = true, empty = true;
};

ATTNKIT_SIMD_STEP inline TileCoverage CoverTile(const Rows& rows, int64_t j0,
                                                int64_t nt, bool has_bias) {
  TileCoverage c;
  c.full = !has_bias;
  for (int64_t r = 0; r < rows.count; ++r) {
    if (rows.key_begin[r] > j0 || rows.key_end[r] < j0 + nt) c.full = false;
    if (rows.key_begin[r] < j0 + nt && rows.key_end[r] > j0 &&
        rows.key_begin[r] < rows.key_end[r])
      c.empty = false;
  }
  return c;
}

// Row r's logits s[j * kStride], j < nt, of the tile at key j0 (log2 units):
// -inf for a key the row does not see, plus its bias (times log2 e) else.
template <int64_t kStride>
ATTNKIT_SIMD_STEP inline void MaskRow(const Rows& rows, int64_t r, int64_t j0,
                                      int64_t nt, int64_t bias_stride,
                                      float* s) {
  const int64_t lo = rows.key_begin[r] - j0, hi = rows.key_end[r] - j0;
  const float* br = rows.bias[r];
  for (int64_t j = 0; j < nt; ++j) {
    float& x = s[j * kStride];
    if (j < lo || j >= hi) {
      x = kNegInf;
    } else if (br != nullptr) {
      x += br[(j0 + j) * bias_stride] * kLog2e;
    }
  }
}

// Where the end of a work item puts row r's O: args.out, O times `scale` =
// 1 / l (zeros, `zero`, when l is 0: no key), or, for a split job, its
// partial block, O as it is (scale 1), whose m and l this stores.
struct RowSink {
  float* dst;
  float scale;
  bool zero;
};
ATTNKIT_SIMD_STEP inline RowSink RowSinkOf(const BlockJob& job,
                                           const Rows& rows, int64_t r, float m,
                                           float l) {
  if (job.partial != nullptr) {
    const PartialLayout pl = PartialLayoutFor(job.problem->head_dim);
    *pl.m(job.partial, r) = m;
    *pl.l(job.partial, r) = l;
    return {pl.o(job.partial, r), 1.0f, false};
  }
  const AttentionArgs& a = *job.args;
  float* out = a.out.As<float>() +
               a.out.Offset(job.batch, rows.head[r], rows.query[r], 0);
  return {out, l > 0.0f ? 1.0f / l : 0.0f, !(l > 0.0f)};
}

// The end of a work item: row r's O (o_at(r, e), e < d) into its sink.
template <class OAt>
ATTNKIT_SIMD_STEP inline void WriteRows(const BlockJob& job, const Rows& rows,
                                        const float* m, const float* l,
                                        OAt o_at) {
  const int64_t d = job.problem->head_dim;
  for (int64_t r = 0; r < rows.count; ++r) {
    const RowSink sink = RowSinkOf(job, rows, r, m[r], l[r]);
    for (int64_t e = 0; e < d; ++e)
      sink.dst[e] = sink.zero ? 0.0f : o_at(r, e) * sink.scale;
  }
}

}  // namespace
}  // namespace attnkit::simd::internal::ATTNKIT_SIMD_NS

#endif  // ATTNKIT_SIMD_BLOCK_H_
