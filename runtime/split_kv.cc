#include "runtime/split_kv.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace attnkit {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

int64_t KvBytes(const AttentionProblem& p) {
  int64_t keys = 0;
  for (int64_t n : p.kv_lens) keys += n;
  return 2 * keys * p.kv_heads * p.head_dim * DTypeSize(p.KvDType());
}

bool DecodeKvStreamsFromDram(const AttentionProblem& p, int64_t llc_bytes) {
  return llc_bytes > 0 && KvBytes(p) > llc_bytes;
}

bool DecodePrefetchesKeys(const AttentionProblem& p, int64_t private_bytes) {
  return private_bytes <= 0 || KvBytes(p) > private_bytes;
}

int64_t CallBytes(const AttentionProblem& p) {
  int64_t queries = 0;
  for (int64_t n : p.q_lens) queries += n;
  const int64_t row = p.q_heads * p.head_dim;
  return queries * row * (DTypeSize(p.dtype) + DTypeSize(DType::kF32)) +
         KvBytes(p);
}

bool OutputStreamsPastCache(const AttentionProblem& p, int64_t llc_bytes) {
  return llc_bytes > 0 && CallBytes(p) > llc_bytes;
}

KvSplitPlan PlanKvSplits(int64_t items, int threads, int64_t max_keys,
                         int64_t force_splits) {
  KvSplitPlan plan;
  if (force_splits >= 1) {
    plan.splits = force_splits;
    plan.forced = true;
    return plan;
  }
  // Only when there are too few items for the cores. Not when items >=
  // threads: simd decode Hq32/Hkv8 kv_len 16k on 2 threads measured 51% of
  // the read bandwidth unsplit vs 24-36% with 8 or 32 splits (head-major or
  // split-major item order alike), because the merge is a second parallel
  // region, and on a loaded machine every region waits for both threads to
  // be scheduled. (2-core AMD EPYC Zen 5 family 26, GCC 12.2, 2026-11-21.)
  if (items <= 0 || items >= threads) return plan;
  // Two splits per thread rather than one: items are handed out first come,
  // first served, so a thread that starts late (the core is shared) leaves
  // half a share to the others instead of a whole one.
  const int64_t want = CeilDiv(2 * int64_t{threads}, items);
  plan.splits = std::clamp<int64_t>(std::min(want, max_keys / kMinKeysPerSplit),
                                    1, kMaxKvSplits);
  return plan;
}

int64_t KvSplitPlan::SplitsFor(int64_t keys) const {
  if (forced) return splits;
  return std::clamp<int64_t>(keys / kMinKeysPerSplit, 1, splits);
}

KeyRange KvSplitPlan::Range(KeyRange keys, int64_t s) const {
  const int64_t n = std::max<int64_t>(0, keys.end - keys.begin);
  const int64_t count = SplitsFor(n);
  if (s >= count) return {keys.begin + n, keys.begin + n};
  // Tiles of kKvSplitAlign keys (the last one possibly partial) dealt out as
  // evenly as floor division allows. A planned count is <= n /
  // kMinKeysPerSplit, so tiles >= 8 * count: every split but the last gets
  // >= floor(tiles / count) >= 8 whole tiles, and the last one, holding the
  // partial tile, ceil(tiles / count) tiles -- 9 or more, or exactly 8 whole
  // ones when tiles = 8 * count. Hence >= kMinKeysPerSplit keys each.
  const int64_t tiles = CeilDiv(n, kKvSplitAlign);
  auto boundary = [&](int64_t i) {
    return i >= count ? n : i * tiles / count * kKvSplitAlign;
  };
  return {keys.begin + boundary(s), keys.begin + boundary(s + 1)};
}

void PartialFromLse(const PartialLayout& layout, float* block, int64_t n) {
  constexpr float kLog2e = 1.4426950408889634f;
  for (int64_t r = 0; r < n; ++r) {
    float* m = layout.m(block, r);
    const bool empty = *m == kNegInf;
    *layout.l(block, r) = empty ? 0.0f : 1.0f;
    *m = empty ? kNegInf : *m * kLog2e;
  }
}

void MergePartialRow(const PartialLayout& layout, const float* first,
                     int64_t splits, int64_t r, int64_t d, float* out) {
  const size_t block = layout.floats();
  float M = kNegInf;
  for (int64_t s = 0; s < splits; ++s) {
    M = std::max(M, *layout.m(first + s * block, r));
  }
  std::fill(out, out + d, 0.0f);
  if (M == kNegInf) return;
  float l = 0.0f;
  for (int64_t s = 0; s < splits; ++s) {
    const float* part = first + s * block;
    const float ms = *layout.m(part, r);
    if (ms == kNegInf) continue;
    const float w = std::exp2(ms - M);
    l += w * *layout.l(part, r);
    const float* o = layout.o(part, r);
    for (int64_t e = 0; e < d; ++e) out[e] += w * o[e];
  }
  if (!(l > 0.0f)) {
    std::fill(out, out + d, 0.0f);
    return;
  }
  const float inv = 1.0f / l;
  for (int64_t e = 0; e < d; ++e) out[e] *= inv;
}

}  // namespace attnkit
