#include "bench/output_check.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "reference/tolerance.h"
#include "runtime/random.h"

namespace attnkit::bench {
namespace {

bool Uniform(const std::vector<int64_t>& v) {
  return std::all_of(v.begin(), v.end(), [&](int64_t x) { return x == v[0]; });
}

// Holds args.out to the tolerance model (reference/tolerance.h: the f64
// oracle, with bounds derived from the naive reference on the same inputs)
// -- the model the differential tester and the decode report use. Indices in
// the message are shifted by row_offset (the slice's first row).
// `kept`: the oracle's result for (p, args' inputs), or null to compute it
// into *computed.
Status CompareRows(const AttentionProblem& p, const AttentionArgs& args,
                   int64_t row_offset, const reference::Truth* kept,
                   reference::Truth* computed) {
  if (kept == nullptr) {
    Tensor scratch = Tensor::Contiguous(
        DType::kF32, {p.batch, p.q_heads, p.max_q_len(), p.head_dim});
    AttentionArgs truth_args = args;
    truth_args.out = scratch.view;
    ATTNKIT_ASSIGN_OR_RETURN(*computed, reference::ComputeTruth(p, truth_args));
    kept = computed;
  }
  const reference::Truth& truth = *kept;
  const reference::ErrorStats e =
      reference::MeasureError(p, truth.oracle, args.out, truth.bounds.max_abs);
  const bool nonfinite = e.nonfinite > 0;
  if (!nonfinite && reference::WithinTolerance(e, truth.bounds)) {
    return Status::Ok();
  }
  const std::array<int64_t, 4> at =
      nonfinite ? e.first_nonfinite_index : e.max_abs_index;
  const int64_t mq = p.max_q_len();
  const double want = truth.oracle[static_cast<size_t>(
      ((at[0] * p.q_heads + at[1]) * mq + at[2]) * p.head_dim + at[3])];
  char buf[320];
  std::snprintf(
      buf, sizeof(buf),
      "output mismatch at [b=%lld,h=%lld,i=%lld,d=%lld]: got %.6g, oracle "
      "%.6g; max |err| %.3g (bound %.3g), mean |err| %.3g (bound %.3g), "
      "%lld NaN/Inf, by the tolerance model for ",
      static_cast<long long>(at[0]), static_cast<long long>(at[1]),
      static_cast<long long>(at[2] + row_offset), static_cast<long long>(at[3]),
      static_cast<double>(args.out.Load(at[0], at[1], at[2], at[3])), want,
      e.max_abs, truth.bounds.max_abs, e.mean_abs, truth.bounds.mean_abs,
      static_cast<long long>(e.nonfinite));
  return Status::FailedPrecondition(buf + p.ToString());
}

}  // namespace

Status CheckAgainstOracle(const AttentionProblem& p, const AttentionArgs& args,
                          int64_t edge_rows, double full_check_work,
                          TruthCache* cache) {
  ATTNKIT_RETURN_IF_ERROR(ValidateArgs(p, args));
  // Rows [row_offset, ...) of p's output as the sub-problem `sub`, through
  // the cache when there is one (keyed by p and the slice's first row).
  const std::string problem = cache != nullptr ? p.ToString() : std::string();
  auto compare = [&](const AttentionProblem& sub, const AttentionArgs& a,
                     int64_t row_offset) {
    reference::Truth computed;
    if (cache == nullptr) {
      return CompareRows(sub, a, row_offset, nullptr, &computed);
    }
    const std::string key = problem + " rows:" + std::to_string(row_offset) +
                            "+" + std::to_string(sub.max_q_len());
    auto it = cache->truths_.find(key);
    const bool hit = it != cache->truths_.end();
    const Status s =
        CompareRows(sub, a, row_offset, hit ? &it->second : nullptr, &computed);
    // A verdict, good or bad, means the truth was computed: keep it. (A
    // failed ComputeTruth leaves `computed` empty and is not kept.)
    if (!hit && !computed.oracle.empty()) {
      cache->truths_.emplace(key, std::move(computed));
    }
    return s;
  };
  const double work = static_cast<double>(p.batch * p.q_heads * p.head_dim) *
                      static_cast<double>(p.max_q_len()) *
                      static_cast<double>(p.max_kv_len());
  const int64_t ql = p.q_lens[0], kl = p.kv_lens[0];
  if (work <= full_check_work || !Uniform(p.q_lens) || !Uniform(p.kv_lens) ||
      ql <= 2 * edge_rows) {
    return compare(p, args, 0);
  }
  for (const int64_t i0 : {int64_t{0}, ql - edge_rows}) {
    const int64_t i1 = i0 + edge_rows;
    AttentionProblem sub = p;
    // Query i keeps its absolute position kv - q + i when the context is cut
    // to end at the last visible key of the slice's last row.
    const bool prefix_only =
        p.mask == MaskKind::kCausal || p.mask == MaskKind::kWindow;
    const int64_t sub_kv = prefix_only ? kl - ql + i1 : kl;
    std::fill(sub.q_lens.begin(), sub.q_lens.end(), edge_rows);
    std::fill(sub.kv_lens.begin(), sub.kv_lens.end(), sub_kv);
    AttentionArgs a = args;
    a.q = args.q.Slice({0, 0, i0, 0},
                       {p.batch, p.q_heads, edge_rows, p.head_dim});
    a.out = args.out.Slice({0, 0, i0, 0},
                           {p.batch, p.q_heads, edge_rows, p.head_dim});
    a.k = args.k.Slice({0, 0, 0, 0}, {p.batch, p.kv_heads, sub_kv, p.head_dim});
    a.v = args.v.Slice({0, 0, 0, 0}, {p.batch, p.kv_heads, sub_kv, p.head_dim});
    if (!args.bias.is_null()) {
      a.bias = args.bias.Slice(
          {0, 0, i0, 0}, {p.batch, args.bias.shape[1], edge_rows, sub_kv});
    }
    ATTNKIT_RETURN_IF_ERROR(compare(sub, a, i0));
  }
  return Status::Ok();
}

void FillFromPool(const TensorView& t, uint64_t salt) {
  // 2^20 + 7 values: a prime-ish period so consecutive rows start at
  // unrelated offsets.
  static const std::vector<float> pool = [] {
    std::vector<float> v((size_t{1} << 20) + 7);
    Rng rng(0xA77E4B17u);
    for (float& x : v) x = rng.Normal();
    return v;
  }();
  const int64_t d = t.shape[3];
  if (t.NumElements() == 0) return;
  assert(t.strides[3] == 1 && d <= static_cast<int64_t>(pool.size()));
  // f32 or bf16 only: an i8 view needs its scales (QuantizeRows over an f32
  // fill).
  assert(t.dtype != DType::kI8);
  uint64_t row = salt * 0x9E3779B97F4A7C15ull;
  const size_t span = pool.size() - static_cast<size_t>(d);
  for (int64_t a = 0; a < t.shape[0]; ++a) {
    for (int64_t b = 0; b < t.shape[1]; ++b) {
      for (int64_t s = 0; s < t.shape[2]; ++s, row += 7919) {
        const float* src = pool.data() + row % span;
        const int64_t off = t.Offset(a, b, s, 0);
        if (t.dtype == DType::kF32) {
          std::memcpy(t.As<float>() + off, src, static_cast<size_t>(d) * 4);
        } else {
          bf16* dst = t.As<bf16>() + off;
          for (int64_t i = 0; i < d; ++i) dst[i] = bf16::FromFloat(src[i]);
        }
      }
    }
  }
}

}  // namespace attnkit::bench
