#include "harness/shrink.h"

#include <algorithm>
#include <chrono>

namespace attnkit::harness {
namespace {

// Smaller values of a length, biggest cut first: 0, 1, 2, halves, then
// n - n/4, n - n/8, ... n - 1, so a failure that needs a length past some
// edge (a key index past 4096) closes in on the edge in logarithmically
// many steps instead of one key at a time.
std::vector<int64_t> SmallerThan(int64_t n) {
  std::vector<int64_t> out;
  auto add = [&](int64_t v) {
    if (v >= 0 && v < n && std::find(out.begin(), out.end(), v) == out.end()) {
      out.push_back(v);
    }
  };
  for (int64_t v : {int64_t{0}, int64_t{1}, int64_t{2}, n / 2, (n + 1) / 2}) {
    add(v);
  }
  for (int64_t k = 4; n / k >= 1; k *= 2) add(n - n / k);
  add(n - 1);
  return out;
}

// Lowers q_lens so the case stays valid after a length or step change
// (causal/window need q <= kv; a decode loop needs kv >= steps * q).
void FitQueries(Case& c) {
  AttentionProblem& p = c.problem;
  const bool ordered =
      p.mask == MaskKind::kCausal || p.mask == MaskKind::kWindow;
  for (int64_t b = 0; b < p.batch; ++b) {
    if (c.decode_steps > 0) {
      p.q_lens[b] = std::min(p.q_lens[b], p.kv_lens[b] / c.decode_steps);
    } else if (ordered) {
      p.q_lens[b] = std::min(p.q_lens[b], p.kv_lens[b]);
    }
  }
}

}  // namespace

std::vector<Case> ShrinkCandidates(const Case& c) {
  std::vector<Case> out;
  const AttentionProblem& p = c.problem;
  auto add = [&](Case t) {
    FitQueries(t);
    if (t.problem.mask != MaskKind::kWindow) t.problem.window = 0;
    if (t.problem.mask != MaskKind::kBias) t.io.shared_bias = false;
    if (ValidateCase(t).ok() && t.Cost() < c.Cost()) out.push_back(t);
  };
  // Decode loops: a plain call first, then fewer steps.
  if (c.decode_steps > 0) {
    Case t = c;
    t.decode_steps = 0;
    add(t);
    for (int64_t s : SmallerThan(c.decode_steps)) {
      if (s == 0) continue;
      t = c;
      t.decode_steps = s;
      add(t);
    }
  }
  // Drop whole sequences; the others keep their values (from=).
  for (int64_t b = 0; b < p.batch && p.batch > 1; ++b) {
    Case t = c;
    t.problem.batch -= 1;
    t.problem.q_lens.erase(t.problem.q_lens.begin() + b);
    t.problem.kv_lens.erase(t.problem.kv_lens.begin() + b);
    if (t.origins.empty()) {
      for (int64_t i = 0; i < p.batch; ++i) t.origins.push_back(i);
    }
    t.origins.erase(t.origins.begin() + b);
    // The identity needs no field.
    bool identity = true;
    for (size_t i = 0; i < t.origins.size(); ++i) {
      identity = identity && t.origins[i] == static_cast<int64_t>(i);
    }
    if (identity) t.origins.clear();
    add(t);
  }
  // Heads: one of each, no grouping, half the kv heads, half the group.
  {
    const int64_t g = p.group_size();
    const std::pair<int64_t, int64_t> heads[] = {
        {1, 1},
        {g, 1},
        {p.kv_heads, p.kv_heads},
        {(p.kv_heads / 2) * g, p.kv_heads / 2},
        {p.kv_heads * (g / 2), p.kv_heads},
        {p.q_heads - p.kv_heads, p.kv_heads}};
    for (auto [hq, hkv] : heads) {
      if (hq < 1 || hkv < 1 || (hq == p.q_heads && hkv == p.kv_heads)) {
        continue;
      }
      Case t = c;
      t.problem.q_heads = hq;
      t.problem.kv_heads = hkv;
      add(t);
    }
  }
  // Lengths, one sequence at a time.
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t kv : SmallerThan(p.kv_lens[b])) {
      Case t = c;
      t.problem.kv_lens[b] = kv;
      add(t);
    }
    for (int64_t q : SmallerThan(p.q_lens[b])) {
      Case t = c;
      t.problem.q_lens[b] = q;
      add(t);
    }
  }
  for (int64_t d : SmallerThan(p.head_dim)) {
    if (d == 0) continue;
    Case t = c;
    t.problem.head_dim = d;
    add(t);
  }
  // The mask: plainer kinds, then narrower windows.
  if (p.mask != MaskKind::kNone) {
    Case t = c;
    t.problem.mask = MaskKind::kNone;
    add(t);
  }
  if (p.mask == MaskKind::kWindow) {
    Case t = c;
    t.problem.mask = MaskKind::kCausal;
    add(t);
    for (int64_t w : SmallerThan(p.window)) {
      if (w == 0) continue;
      t = c;
      t.problem.window = w;
      add(t);
    }
  }
  if (c.kv_pad > 0) {
    Case t = c;
    t.kv_pad = 0;
    add(t);
  }
  if (p.scale) {
    Case t = c;
    t.problem.scale.reset();
    add(t);
  }
  if (p.dtype != DType::kF32) {
    Case t = c;
    t.problem.dtype = DType::kF32;
    add(t);
  }
  if (p.kv_dtype) {  // an unquantized cache
    Case t = c;
    t.problem.kv_dtype.reset();
    add(t);
  }
  if (p.layout != KvLayout::kBHSD) {
    Case t = c;
    t.problem.layout = KvLayout::kBHSD;
    add(t);
  }
  // Where q and out lie, and a shared bias: back to the defaults.
  if (!c.io.q.is_default()) {
    Case t = c;
    t.io.q = {};
    add(t);
  }
  if (!c.io.out.is_default()) {
    Case t = c;
    t.io.out = {};
    add(t);
  }
  if (c.io.shared_bias) {
    Case t = c;
    t.io.shared_bias = false;
    add(t);
  }
  if (c.profile != ValueProfile::kNormal) {
    Case t = c;
    t.profile = ValueProfile::kNormal;
    add(t);
  }
  return out;
}

ShrinkResult Shrink(const Case& c, const CheckResult& failure,
                    const FailureOf& fails, int max_attempts,
                    double time_budget_s) {
  ShrinkResult r{c, failure, 0, 0};
  const auto t0 = std::chrono::steady_clock::now();
  auto out_of_time = [&] {
    return time_budget_s > 0 &&
           std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
                   .count() >= time_budget_s;
  };
  bool progress = true;
  while (progress && r.attempts < max_attempts) {
    progress = false;
    for (const Case& t : ShrinkCandidates(r.smallest)) {
      if (r.attempts >= max_attempts || out_of_time()) break;
      ++r.attempts;
      std::optional<CheckResult> f = fails(t);
      if (f && f->outcome == failure.outcome) {
        r.smallest = t;
        r.failure = std::move(*f);
        ++r.accepted;
        progress = true;
        break;  // candidates of the smaller case next
      }
    }
  }
  return r;
}

ShrinkResult ShrinkOnBackend(const Case& c, const CheckResult& failure,
                             Backend& backend, int max_attempts,
                             double time_budget_s) {
  Backend* one[] = {&backend};
  const bool fresh = IsDeath(failure.outcome);
  return Shrink(
      c, failure,
      [&](const Case& t) -> std::optional<CheckResult> {
        if (fresh) backend.Reset();
        auto results = RunCase(t, one);
        if (!results.ok() || !(*results)[0].failed()) return std::nullopt;
        return (*results)[0];
      },
      max_attempts, time_budget_s);
}

}  // namespace attnkit::harness
