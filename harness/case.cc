#include "harness/case.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <optional>
#include <vector>

#include "runtime/limits.h"
#include "runtime/parse.h"

namespace attnkit::harness {
namespace {

// Per-tier size caps. The oracle does every multiply-add in scalar f64 through
// strided loads (~3-5 ns each on a 2-core AMD EPYC Zen 5 family 26, GCC 12.2,
// 2026-11-21), and the naive reference materializes S = [q_len, kv_len] per
// head, so both caps bound a case's cost directly: 1.5M multiply-adds is ~6 ms
// of oracle, which with the reference and two or three fast backends keeps the
// default tier well above 1,000 cases/min on 2 cores. The long tier allows
// 32k-key contexts (decode-shaped, so S stays a few rows) and 2k x 2k prefills.
struct TierLimits {
  int64_t max_batch;
  int64_t max_kv;          // longest context a sequence may have
  double max_macs;         // sum over sequences of hq * q * kv * d
  int64_t max_s_elements;  // q_len * kv_len of the reference's S per head
  int64_t max_steps;       // decode-loop steps
  // q, k, v and bias elements drawn per case: filling costs ~25 ns per
  // normal value (Box-Muller: a log and a cos; same machine), as much as the
  // oracle's multiply-adds for a decode-shaped case over a long context.
  double max_elements;
  uint64_t spec_block;  // consecutive cases sharing a kernel specialization
};

TierLimits LimitsOf(Tier t) {
  switch (t) {
    case Tier::kSmoke:
      return {4, 300, 1.5e5, 64 * 300, 4, 6e4, 16};
    case Tier::kDefault:
      return {8, 1100, 1.5e6, 600 * 600, 8, 3e5, 32};
    case Tier::kLong:
      return {8, 32768, 1.5e8, 2048 * 2048, 64, 3e7, 8};
  }
  return {1, 1, 1, 1, 1, 1, 1};
}

template <typename T, size_t N>
T Pick(Rng& r, const std::array<T, N>& xs) {
  return xs[r.Below(N)];
}

// Weighted choice: weights need not sum to anything in particular.
template <size_t N>
size_t Weighted(Rng& r, const std::array<int, N>& w) {
  int total = 0;
  for (int x : w) total += x;
  int64_t pick = static_cast<int64_t>(r.Below(static_cast<uint64_t>(total)));
  for (size_t i = 0; i < N; ++i) {
    pick -= w[i];
    if (pick < 0) return i;
  }
  return N - 1;
}

constexpr std::array<int64_t, 20> kPrimes{2,   3,   5,   7,   11,  13,  17,
                                          31,  37,  61,  67,  97,  101, 127,
                                          131, 193, 251, 257, 509, 521};

// A context length with the edges kernels get wrong: 0, 1, a tile size +- 1
// (tiles of 8..128 keys are what SIMD and MLIR kernels use), 511/512/513,
// primes, and in the long tier thousands to 32k.
int64_t ContextLength(Rng& r, Tier tier, const TierLimits& lim) {
  int64_t n = 0;
  switch (Weighted(r, std::array<int, 8>{4, 8, 22, 8, 14, 30, 6, 8})) {
    case 0:
      n = 0;
      break;
    case 1:
      n = 1;
      break;
    case 2:
      n = Pick(r, std::array<int64_t, 6>{8, 16, 32, 64, 128, 256}) +
          r.Range(-1, 1);
      break;
    case 3:
      n = r.Range(511, 513);
      break;
    case 4:
      n = Pick(r, kPrimes);
      break;
    case 5:
      n = r.Range(2, 100);
      break;
    case 6:
      n = r.Range(100, 1100);
      break;
    case 7:
      n = tier == Tier::kLong
              ? Pick(r, std::array<int64_t, 6>{2047, 4096, 8191, 16384, 30011,
                                               32768})
              : r.Range(2, 40);
      break;
  }
  return std::min(n, lim.max_kv);
}

// head_dim: the model sizes (64, 80, 96, 128, 256) most of the time, odd
// sizes (no vector width divides them) and anything in 1..256 otherwise,
// and past 256 up to the runtime's maximum (kMaxHeadDim = 1024) in one block
// of 12 (a kernel's fixed-size row buffer or a 256-wide unroll overflows
// only there).
int64_t HeadDim(Rng& r, Tier tier) {
  switch (Weighted(r, std::array<int, 5>{45, 20, 20, 15, 9})) {
    case 0:
      return Pick(r, std::array<int64_t, 8>{64, 64, 80, 96, 128, 128, 256,
                                            tier == Tier::kSmoke ? 32 : 256});
    case 1:
      return 2 * r.Range(0, 127) + 1;  // odd, 1..255
    case 2:
      return Pick(r, std::array<int64_t, 8>{1, 2, 3, 7, 8, 9, 15, 17});
    case 3:
      return r.Range(1, 256);
    default:
      if (tier == Tier::kSmoke) return r.Range(257, 320);
      return r.Bernoulli(0.5)
                 ? Pick(r,
                        std::array<int64_t, 5>{257, 384, 512, 768, kMaxHeadDim})
                 : r.Range(257, kMaxHeadDim);
  }
}

// Where q and out lie: mostly the contiguous head-major default, else
// token-major (as a projection emits) and/or padded rows inside a larger
// buffer -- a fused QKV row's other 2 * kv_heads * head_dim elements, or a
// few stray ones.
RowLayout DrawRowLayout(Rng& r, const AttentionProblem& p) {
  RowLayout l;
  if (r.Bernoulli(0.6)) return l;
  l.token_major = r.Bernoulli(0.6);
  switch (Weighted(r, std::array<int, 3>{30, 35, 35})) {
    case 0:
      break;
    case 1:
      l.pad = r.Range(1, 17);
      break;
    default:  // the rest of a fused QKV row, or Q and K interleaved
      l.pad = l.token_major ? 2 * p.kv_heads * p.head_dim : p.head_dim;
      break;
  }
  return l;
}

// Long-context cases: decode-shaped (a few queries per sequence, at most
// two decode steps) over contexts that cross 4096, 8192, 16384 or 65536
// keys -- where a 12-bit or 16-bit key index, or an int32 byte offset of a
// wide head, wraps. The oracle and the tolerance cost O(q * kv * d) per
// head (~8 ns per multiply-add together), so these fit the default tier
// when rare and held to kLongMacs: ~1 in 40 cases, most under 0.1 s and
// the 65536-key ones under ~0.4 s (2-core AMD EPYC Zen 5 family 26, GCC
// 12.2, 2026-11-23). The kernel specialization (head_dim, GQA group, mask,
// dtype, layouts) is the block's, as for every case: the widest heads get
// the shorter thresholds.
constexpr double kLongContextRate = 1.0 / 40;
constexpr double kLongMacs = 1.2e7;
constexpr double kLongestMacs = 5e7;  // for the 65536-key contexts
constexpr std::array<int64_t, 4> kLongThresholds{4096, 8192, 16384, 65536};

void LongContexts(Case& c, Rng& r) {
  AttentionProblem& p = c.problem;
  const int64_t g = p.group_size();
  const double per_key =
      static_cast<double>(g) * static_cast<double>(p.head_dim);
  size_t t = Weighted(r, std::array<int, 4>{35, 25, 25, 15});
  auto budget = [&](size_t i) {
    return i + 1 == kLongThresholds.size() ? kLongestMacs : kLongMacs;
  };
  while (t > 0 &&
         static_cast<double>(kLongThresholds[t]) * per_key > budget(t)) {
    --t;
  }
  const int64_t threshold = kLongThresholds[t];
  const bool longest = t + 1 == kLongThresholds.size();
  // One query per sequence and one kv head over the longest contexts; up
  // to 4 queries, 2 kv heads, 3 sequences and 2 decode steps below them.
  c.decode_steps = !longest && r.Bernoulli(0.25) ? 2 : 0;
  p.kv_heads = longest || r.Bernoulli(0.75) ? 1 : 2;
  p.q_heads = p.kv_heads * g;
  p.batch = r.Bernoulli(0.5) ? 1 : r.Range(2, longest ? 2 : 3);
  p.q_lens.clear();
  p.kv_lens.clear();
  double macs = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    // The first sequence crosses the threshold: just (one key past it, the
    // edge) or by up to an eighth; the others are ragged below it.
    // The whole loop's work within the budget: fewer queries, no decode
    // steps, shorter ragged neighbours.
    const double per_key = static_cast<double>(p.q_heads) *
                           static_cast<double>(p.head_dim) *
                           static_cast<double>(c.decode_steps + 1);
    const int64_t room =
        static_cast<int64_t>(std::max(0.0, budget(t) - macs) / per_key);
    const int64_t kv =
        b == 0 ? threshold + (r.Bernoulli(0.5) ? r.Range(-1, 2)
                                               : r.Range(3, threshold / 8))
               : r.Range(0, std::min(room, longest ? 4096 : threshold));
    int64_t q = longest || r.Bernoulli(0.6) ? 1 : r.Range(0, 4);
    while (q > 1 && static_cast<double>(q * kv) * per_key > budget(t) - macs) {
      --q;
    }
    if (b == 0 && c.decode_steps > 0 &&
        static_cast<double>(q * kv) * per_key > budget(t)) {
      c.decode_steps = 0;  // one call of the widest heads only
    }
    macs += static_cast<double>(q * kv) * per_key;
    q = std::min(q, kv / std::max<int64_t>(c.decode_steps, 1));
    p.q_lens.push_back(q);
    p.kv_lens.push_back(kv - c.decode_steps * q);  // the prompt
  }
}

double Macs(const AttentionProblem& p) {
  double m = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    m += static_cast<double>(p.q_lens[b]) * static_cast<double>(p.kv_lens[b]);
  }
  return m * static_cast<double>(p.q_heads) * static_cast<double>(p.head_dim);
}

// Shrinks a generated problem until it fits the tier's caps, keeping its
// character: queries shrink first (a decode-shaped case is cheap even at
// 32k keys), then kv heads, sequences, and contexts. head_dim and the GQA
// group are never changed: they are the block's kernel specialization.
void FitToLimits(Case& c, const TierLimits& lim) {
  AttentionProblem& p = c.problem;
  const int64_t steps = std::max<int64_t>(c.decode_steps, 1);
  // For a decode loop kv_lens hold the prompts here; the last step sees
  // prompt + steps * q keys.
  auto over = [&] {
    AttentionProblem last = p;
    for (int64_t b = 0; b < p.batch; ++b) {
      if (c.decode_steps > 0) last.kv_lens[b] += c.decode_steps * p.q_lens[b];
    }
    if (Macs(last) * static_cast<double>(steps) > lim.max_macs) return true;
    for (int64_t b = 0; b < p.batch; ++b) {
      if (p.q_lens[b] * (p.kv_lens[b] + steps * p.q_lens[b]) >
          lim.max_s_elements) {
        return true;
      }
    }
    return false;
  };
  for (int guard = 0; guard < 200 && over(); ++guard) {
    int64_t worst = 0;
    for (int64_t b = 1; b < p.batch; ++b) {
      if (p.q_lens[b] * p.kv_lens[b] > p.q_lens[worst] * p.kv_lens[worst]) {
        worst = b;
      }
    }
    if (p.q_lens[worst] > 1) {
      p.q_lens[worst] = (p.q_lens[worst] + 1) / 2;
    } else if (p.kv_heads > 1) {
      const int64_t g = p.group_size();
      p.kv_heads /= 2;
      p.q_heads = p.kv_heads * g;
    } else if (p.batch > 1 && worst == p.batch - 1) {
      --p.batch;
      p.q_lens.pop_back();
      p.kv_lens.pop_back();
    } else {
      p.kv_lens[worst] /= 2;  // (the prompt, for a decode loop)
      if (c.decode_steps == 0) {
        p.q_lens[worst] = std::min(p.q_lens[worst], p.kv_lens[worst]);
      }
    }
  }
  // Input elements: tensors are allocated for the longest sequence, so
  // heads, head_dim and batch go before any length (lengths are the edges).
  auto elements = [&] {
    int64_t mkv = c.kv_pad, mq = 0;
    for (int64_t b = 0; b < p.batch; ++b) {
      mkv =
          std::max(mkv, p.kv_lens[b] + c.decode_steps * p.q_lens[b] + c.kv_pad);
      mq = std::max(mq, p.q_lens[b] * steps);
    }
    const double bd = static_cast<double>(p.batch);
    double n = bd * static_cast<double>(2 * p.kv_heads * mkv * p.head_dim +
                                        p.q_heads * mq * p.head_dim);
    if (p.mask == MaskKind::kBias) {
      n += bd * static_cast<double>(p.q_heads * mq * mkv);
    }
    return n;
  };
  for (int guard = 0; guard < 200 && elements() > lim.max_elements; ++guard) {
    int64_t longest = 0;
    for (int64_t b = 1; b < p.batch; ++b) {
      if (p.kv_lens[b] > p.kv_lens[longest]) longest = b;
    }
    if (p.kv_heads > 1) {
      const int64_t g = p.group_size();
      p.kv_heads /= 2;
      p.q_heads = p.kv_heads * g;
    } else if (p.batch > 1) {
      --p.batch;
      p.q_lens.pop_back();
      p.kv_lens.pop_back();
    } else {
      p.kv_lens[longest] /= 2;
      p.q_lens[longest] = c.decode_steps == 0
                              ? std::min(p.q_lens[longest], p.kv_lens[longest])
                              : std::min<int64_t>(p.q_lens[longest], 1);
    }
  }
}

}  // namespace

StatusOr<Tier> ParseTier(std::string_view s) {
  if (auto t = kTierNames.Parse(s)) return *t;
  return Status::InvalidArgument(kTierNames.NotOneOf("tier", s));
}

StatusOr<ValueProfile> ParseValueProfile(std::string_view s) {
  if (auto v = kValueProfileNames.Parse(s)) return *v;
  return Status::InvalidArgument(kValueProfileNames.NotOneOf("values", s));
}

namespace {

std::string RowLayoutString(const RowLayout& l) {
  return std::string(l.token_major ? "bshd" : "bhsd") + ":" +
         std::to_string(l.pad);
}

// "bhsd:N" or "bshd:N" (N: the row padding, in elements).
std::optional<RowLayout> ParseRowLayout(std::string_view s) {
  const size_t colon = s.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  RowLayout l;
  const std::string_view name = s.substr(0, colon);
  if (name == "bshd") {
    l.token_major = true;
  } else if (name != "bhsd") {
    return std::nullopt;
  }
  auto pad = ParseUint64(s.substr(colon + 1));
  if (!pad || *pad > (1u << 20)) return std::nullopt;
  l.pad = static_cast<int64_t>(*pad);
  return l;
}

std::string JoinColon(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    s += (i ? ":" : "") + std::to_string(v[i]);
  }
  return s;
}

}  // namespace

std::string Case::ToString() const {
  std::string s = "seed=" + std::to_string(seed) +
                  ",index=" + std::to_string(index) +
                  ",values=" + std::string(ValueProfileName(profile)) +
                  ",pad=" + std::to_string(kv_pad) +
                  ",steps=" + std::to_string(decode_steps);
  if (!io.q.is_default()) s += ",q_layout=" + RowLayoutString(io.q);
  if (!io.out.is_default()) s += ",out_layout=" + RowLayoutString(io.out);
  if (io.shared_bias) s += ",bias=shared";
  if (!origins.empty()) s += ",from=" + JoinColon(origins);
  if (is_block()) {
    s += ",block=" + std::to_string(hidden) + ":" +
         std::string(DTypeName(weight_dtype)) + ":" + (qkv_bias ? "1" : "0") +
         ":" + (output_projection ? "1" : "0");
  }
  return s + "," + problem.ToString();
}

AttentionBlockProblem Case::Block() const {
  AttentionBlockProblem b;
  b.attention = problem;
  b.hidden = hidden;
  b.weight_dtype = weight_dtype;
  b.qkv_bias = qkv_bias;
  b.output_projection = output_projection;
  return b;
}

namespace {

// Multiply-adds of a block case's projections (x . Wq, Wk, Wv, Wo).
double ProjectionMacs(const Case& c) {
  if (!c.is_block()) return 0;
  const AttentionBlockProblem b = c.Block();
  double tokens = 0;  // projected over all steps of a decode loop
  for (int64_t q : c.problem.q_lens)
    tokens += static_cast<double>(q * std::max<int64_t>(c.decode_steps, 1));
  const double h = static_cast<double>(b.hidden);
  return tokens * h *
         static_cast<double>(b.q_width() + 2 * b.kv_width() +
                             (b.output_projection ? b.q_width() : 0));
}

// "HIDDEN:WEIGHT_DTYPE:QKV_BIAS:WO" of block=.
bool ParseBlockSpec(std::string_view v, Case& c) {
  std::vector<std::string_view> parts;
  for (size_t at = 0; at <= v.size();) {
    const size_t colon = std::min(v.find(':', at), v.size());
    parts.push_back(v.substr(at, colon - at));
    at = colon + 1;
  }
  if (parts.size() != 4) return false;
  auto hidden = ParseUint64(parts[0]);
  auto w = ParseDType(parts[1]);
  auto flag = [](std::string_view f) -> std::optional<bool> {
    if (f == "0" || f == "1") return f == "1";
    return std::nullopt;
  };
  auto qkv_bias = flag(parts[2]), wo = flag(parts[3]);
  if (!hidden || *hidden < 1 || *hidden > static_cast<uint64_t>(kMaxHidden) ||
      !w || !qkv_bias || !wo) {
    return false;
  }
  c.hidden = static_cast<int64_t>(*hidden);
  c.weight_dtype = *w;
  c.qkv_bias = *qkv_bias;
  c.output_projection = *wo;
  return true;
}

}  // namespace

double Case::Cost() const {
  const AttentionProblem& p = problem;
  double cost = 0;
  for (int64_t s = 0; s <= decode_steps; ++s) {
    const AttentionProblem ps =
        decode_steps > 0 ? DecodeStepProblem(*this, s) : problem;
    cost += Macs(ps);
  }
  // Tie-breakers: fewer sequences, heads, dims, tokens and steps read easier
  // even when they cost nothing (a zero-length sequence).
  double tokens = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    tokens += static_cast<double>(p.q_lens[b] + p.kv_lens[b]);
  }
  return cost + ProjectionMacs(*this) + tokens +
         static_cast<double>(p.batch + p.q_heads + p.kv_heads + p.head_dim +
                             kv_pad + hidden) +
         static_cast<double>(decode_steps) +
         (profile == ValueProfile::kNormal ? 0 : 0.5) +
         (p.mask == MaskKind::kNone ? 0 : 0.25) +
         (p.dtype == DType::kF32 ? 0 : 0.125) + (p.kv_dtype ? 0.125 : 0) +
         (p.layout == KvLayout::kBHSD ? 0 : 0.125) + (p.scale ? 0.0625 : 0) +
         (io.q.is_default() ? 0 : 0.03125) +
         (io.out.is_default() ? 0 : 0.03125) + (io.shared_bias ? 0.015625 : 0);
}

StatusOr<Case> ParseCase(std::string_view text) {
  Case c;
  auto bad = [&](std::string m) {
    return Status::InvalidArgument("case '" + std::string(text) + "': " + m);
  };
  // The harness fields lead; whatever follows is the problem.
  std::string problem_text;
  bool seen_seed = false, seen_index = false;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view item = text.substr(start, end - start);
    const size_t eq = item.find('=');
    const std::string_view key =
        eq == std::string_view::npos ? item : item.substr(0, eq);
    const std::string_view val =
        eq == std::string_view::npos ? std::string_view() : item.substr(eq + 1);
    const std::string vs(val);
    if (key == "seed" || key == "index" || key == "pad" || key == "steps") {
      auto n = ParseUint64(val);
      if (!n) return bad(std::string(key) + "=" + vs + " is not an integer");
      if (key == "seed") {
        c.seed = *n;
        seen_seed = true;
      } else if (key == "index") {
        c.index = *n;
        seen_index = true;
      } else if (*n > (1u << 20)) {
        return bad(std::string(key) + "=" + vs + " exceeds 1048576");
      } else if (key == "pad") {
        c.kv_pad = static_cast<int64_t>(*n);
      } else {
        c.decode_steps = static_cast<int64_t>(*n);
      }
    } else if (key == "values") {
      auto v = ParseValueProfile(val);
      if (!v.ok()) return bad(v.status().message());
      c.profile = *v;
    } else if (key == "q_layout" || key == "out_layout") {
      auto l = ParseRowLayout(val);
      if (!l) {
        return bad(std::string(key) + "=" + vs +
                   " is not bhsd:PAD or bshd:PAD (PAD in [0, 1048576])");
      }
      (key == "q_layout" ? c.io.q : c.io.out) = *l;
    } else if (key == "bias") {
      if (val != "shared" && val != "heads") {
        return bad("bias=" + vs + " is not shared|heads");
      }
      c.io.shared_bias = val == "shared";
    } else if (key == "block") {
      if (!ParseBlockSpec(val, c)) {
        return bad("block=" + vs +
                   " is not HIDDEN:f32|bf16:0|1:0|1 (hidden in [1, " +
                   std::to_string(kMaxHidden) + "])");
      }
    } else if (key == "from") {
      c.origins.clear();
      for (size_t at = 0; at <= val.size();) {
        const size_t colon = std::min(val.find(':', at), val.size());
        auto n = ParseUint64(val.substr(at, colon - at));
        if (!n || *n > (1u << 20)) {
          return bad("from=" + vs + " is not a:b:... of sequence indices");
        }
        c.origins.push_back(static_cast<int64_t>(*n));
        at = colon + 1;
      }
    } else {
      problem_text = std::string(text.substr(start));
      break;
    }
    start = end + 1;
  }
  if (!seen_seed) return bad("missing seed=N");
  if (!seen_index) return bad("missing index=N");
  if (problem_text.empty()) return bad("missing the problem (b=...,q=...)");
  auto p = ParseProblem(problem_text);
  if (!p.ok()) return bad(p.status().message());
  c.problem = std::move(*p);
  if (Status s = ValidateCase(c); !s.ok()) return bad(s.message());
  return c;
}

Status ValidateCase(const Case& c) {
  ATTNKIT_RETURN_IF_ERROR(c.problem.Validate());
  const AttentionProblem& p = c.problem;
  if (c.kv_pad < 0) {
    return Status::InvalidArgument("pad=" + std::to_string(c.kv_pad) +
                                   " must be >= 0");
  }
  if (c.decode_steps < 0) {
    return Status::InvalidArgument("steps=" + std::to_string(c.decode_steps) +
                                   " must be >= 0");
  }
  for (const auto& [name, l] :
       {std::pair{"q_layout", c.io.q}, std::pair{"out_layout", c.io.out}}) {
    if (l.pad < 0 || l.pad > (int64_t{1} << 20)) {
      return Status::InvalidArgument(std::string(name) +
                                     " pad=" + std::to_string(l.pad) +
                                     " is not in [0, 1048576]");
    }
  }
  if (c.io.shared_bias && p.mask != MaskKind::kBias) {
    return Status::InvalidArgument("bias=shared needs mask=bias, not mask=" +
                                   std::string(MaskKindName(p.mask)));
  }
  if (!c.origins.empty() && static_cast<int64_t>(c.origins.size()) != p.batch) {
    return Status::InvalidArgument(
        "from= names " + std::to_string(c.origins.size()) +
        " sequence(s) but batch=" + std::to_string(p.batch));
  }
  if (!CheckedAdd(p.max_kv_len(), c.kv_pad)) {
    return Status::InvalidArgument(
        "pad=" + std::to_string(c.kv_pad) + " + the longest kv_len=" +
        std::to_string(p.max_kv_len()) + " overflows int64");
  }
  for (int64_t b = 0; b < p.batch; ++b) {
    const std::optional<int64_t> appended =
        CheckedMul(c.decode_steps, p.q_lens[b]);
    if (!appended || p.kv_lens[b] < *appended) {
      return Status::InvalidArgument(
          "steps=" + std::to_string(c.decode_steps) + " of q_lens[" +
          std::to_string(b) + "]=" + std::to_string(p.q_lens[b]) +
          " token(s) do not fit in kv_lens[" + std::to_string(b) +
          "]=" + std::to_string(p.kv_lens[b]) +
          (appended ? "" : " (their product overflows int64)"));
    }
  }
  if (c.is_block()) {
    ATTNKIT_RETURN_IF_ERROR(c.Block().Validate());
    auto only = [](std::string what) {
      return Status::InvalidArgument("block=: a block case has plain inputs (" +
                                     what + ")");
    };
    if (c.kv_pad != 0) return only("pad=0");
    if (!c.io.q.is_default() || !c.io.out.is_default() || c.io.shared_bias)
      return only("no q_layout, out_layout or bias=shared");
    if (c.profile != ValueProfile::kNormal) return only("values=normal");
    if (!c.origins.empty()) return only("no from=");
  }
  return Status::Ok();
}

double CaseWork(const Case& c) {
  const AttentionProblem& p = c.problem;
  const double per_pair =
      static_cast<double>(p.q_heads) * static_cast<double>(p.head_dim);
  double pairs = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    const double q = static_cast<double>(p.q_lens[b]);
    const double kv = static_cast<double>(p.kv_lens[b]);
    if (c.decode_steps == 0) {
      pairs += q * kv;
      continue;
    }
    // Step 0 queries min(q, prompt) rows over the prompt; step s >= 1
    // queries q rows over prompt + s * q keys (closed form: no loop over an
    // untrusted step count).
    const double n = static_cast<double>(c.decode_steps);
    const double prompt = kv - n * q;
    pairs += std::min(q, prompt) * prompt;
    pairs += q * (n * prompt + q * n * (n + 1) / 2);
  }
  return pairs * per_pair + ProjectionMacs(c);
}

MemoryEstimate CaseMemory(const Case& c, int64_t backends) {
  const AttentionProblem& p = c.problem;
  const double b = static_cast<double>(p.batch);
  const double hq = static_cast<double>(p.q_heads);
  const double hkv = static_cast<double>(p.kv_heads);
  const double d = static_cast<double>(p.head_dim);
  const double es = static_cast<double>(DTypeSize(p.dtype));
  // K/V bytes per element: an i8 cache's row scale spread over its values,
  // rounded up to a whole byte (a bound, not a count).
  const double kv_es = p.quantized_kv() ? 2 : es;
  const double cap =
      static_cast<double>(p.max_kv_len()) + static_cast<double>(c.kv_pad);
  const bool bias = p.mask == MaskKind::kBias;
  const std::string shape = "batch=" + std::to_string(p.batch) +
                            " x q_heads=" + std::to_string(p.q_heads);
  const std::string kv_shape = "batch=" + std::to_string(p.batch) +
                               " x kv_heads=" + std::to_string(p.kv_heads);
  const std::string dim = " x head_dim=" + std::to_string(p.head_dim);
  MemoryEstimate e;
  // Longest query block of one call, and of the whole case's inputs.
  double mq = 0, mq_all = 0;
  for (int64_t i = 0; i < p.batch; ++i) {
    const double q = static_cast<double>(p.q_lens[i]);
    mq = std::max(mq, q);
    if (c.decode_steps > 0) {
      const double n = static_cast<double>(c.decode_steps);
      const double prompt = static_cast<double>(p.kv_lens[i]) - n * q;
      mq_all = std::max(mq_all, std::min(q, prompt) + n * q);
    } else {
      mq_all = mq;
    }
  }
  const std::string cap_s = " x capacity=" + std::to_string(p.max_kv_len()) +
                            "+" + std::to_string(c.kv_pad);
  e.Add("inputs q+out (" + shape +
            " x q=" + std::to_string(static_cast<int64_t>(mq_all)) + dim + ")",
        {b, hq, mq_all, d, es + 4});
  if (!c.io.q.is_default() || !c.io.out.is_default()) {
    e.Add("q/out row padding", {b, hq, mq_all,
                                static_cast<double>(c.io.q.pad) * es +
                                    static_cast<double>(c.io.out.pad) * 4});
  }
  e.Add("inputs k+v (2 x " + kv_shape + cap_s + dim + ")",
        {2, b, hkv, cap, d, kv_es});
  if (bias) {
    e.Add("inputs bias (" + (c.io.shared_bias ? "shared" : shape) + " x q=" +
              std::to_string(static_cast<int64_t>(mq_all)) + cap_s + ")",
          {b, c.io.shared_bias ? 1 : hq, mq_all, cap, 4});
  }
  // The runner keeps the inputs' bytes to find writes to them (q, k, v,
  // bias: the same sizes again; a decode step's inputs are smaller).
  e.Add("input snapshots (q, k, v" + std::string(bias ? ", bias" : "") + ")",
        {b, hq * mq_all * d * es + 2 * hkv * cap * d * kv_es +
                (bias ? (c.io.shared_bias ? 1 : hq) * mq_all * cap * 4 : 0)});
  e.Add("oracle's f32 copies of one head (q, k, v: " +
            std::to_string(static_cast<int64_t>(mq)) + " + 2 x " +
            std::to_string(p.max_kv_len()) + " rows" + dim + ")",
        {mq + 2 * static_cast<double>(p.max_kv_len()), d, 4});
  e.Add("oracle f64 output (" + shape +
            " x q=" + std::to_string(static_cast<int64_t>(mq)) + dim + ")",
        {b, hq, mq, d, 8});
  // The naive reference materializes S = [q_len, kv_len] per head, and
  // widens one head's bf16 q, k, v to f32 (f32 is mapped in place).
  e.Add("reference S (q=" + std::to_string(static_cast<int64_t>(mq)) +
            " x kv=" + std::to_string(p.max_kv_len()) + ")",
        {mq, cap, 4});
  if (p.dtype == DType::kBF16) {
    e.Add("reference bf16 q/k/v widened", {mq + 2 * cap, d, 4});
  }
  if (c.decode_steps > 0) {
    e.Add("kv caches (" + std::to_string(backends) + " backend(s) x 2 x " +
              kv_shape + cap_s + dim + ")",
          {static_cast<double>(backends), 2, b, hkv, cap, d, es});
    // The naive concatenation the caches are compared with (and its copy
    // while it grows), and one step's staging buffers, q, out and bias.
    e.Add("naive concatenation (2 x 2 x " + kv_shape + cap_s + dim + ")",
          {4, b, hkv, cap, d, es});
    e.Add("step staging + q + out",
          {b, (2 * hkv * cap * es) + hq * mq * (es + 4), d});
    if (bias) e.Add("step bias", {b, hq, mq, cap, 4});
    if (p.quantized_kv()) {
      e.Add("i8 k+v as stored, for the oracle (2 x " + kv_shape + cap_s + dim +
                ")",
            {2, b, hkv, cap, d, 2});
    }
  }
  if (c.is_block()) {
    // x and out, the weights, the block's Q and attention buffers (the
    // reference's and the oracle's in f64), the cache's snapshot.
    const AttentionBlockProblem blk = c.Block();
    const double h = static_cast<double>(blk.hidden);
    const double width =
        static_cast<double>(blk.q_width() + 2 * blk.kv_width() +
                            (blk.output_projection ? blk.q_width() : 0));
    e.Add("block x + out (batch x q x hidden)", {b, mq, h + hq * d, 4});
    e.Add("block weights (hidden=" + std::to_string(blk.hidden) + " x " +
              std::to_string(static_cast<int64_t>(width)) + " columns)",
          {h, width, static_cast<double>(DTypeSize(blk.weight_dtype))});
    e.Add("block projections (f32 + f64 oracle)", {b, mq, width, 12});
    e.Add("block cache snapshot (2 x " + kv_shape + cap_s + dim + ")",
          {2, b, hkv, cap, d, 4});
  }
  return e;
}

AttentionProblem DecodeStepProblem(const Case& c, int64_t step) {
  AttentionProblem p = c.problem;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t n = c.problem.q_lens[b];
    const int64_t prompt = c.problem.kv_lens[b] - c.decode_steps * n;
    p.q_lens[b] = step == 0 ? std::min(n, prompt) : n;
    p.kv_lens[b] = prompt + step * n;
  }
  return p;
}

int64_t DecodeCapacity(const Case& c) {
  return c.problem.max_kv_len() + c.kv_pad;
}

namespace {

// About 1 case in 10 is an attention block (it costs its projections on top
// of the attention).
constexpr double kBlockRate = 0.1;

// About 1 spec block in 5 stores K/V as i8 (a quantized cache).
constexpr double kQuantizedKvRate = 0.2;

// Turns a drawn case into an attention-block case: the block's hidden size
// (odd ones, one, past the kernels' 4-row and 256-row blocks), weight dtype,
// biases and output projection; its attention is the drawn problem with an
// f32 cache, kv_lens >= q_lens, head_dim <= 128 and <= 96 tokens per
// sequence (the f64 oracle projects every token over every column).
void MakeBlock(Case& c, Rng& r, const TierLimits& lim) {
  AttentionProblem& p = c.problem;
  c.hidden = Pick(r, std::array<int64_t, 9>{1, 2, 7, 16, 33, 64, 96, 130, 257});
  c.weight_dtype = r.Bernoulli(0.5) ? DType::kBF16 : DType::kF32;
  c.qkv_bias = r.Bernoulli(0.4);
  c.output_projection = r.Bernoulli(0.5);
  // A third are decode loops: 2-4 steps of 1-2 new tokens each, every step
  // projecting into the slots after the previous step's.
  c.decode_steps = r.Bernoulli(0.33) ? r.Range(2, 4) : 0;
  c.kv_pad = 0;
  c.io = {};
  c.origins.clear();
  c.profile = ValueProfile::kNormal;
  p.dtype = DType::kF32;
  p.kv_dtype.reset();
  if (p.head_dim > 128) p.head_dim = r.Range(1, 128);
  for (int64_t b = 0; b < p.batch; ++b) {
    p.q_lens[b] = std::min<int64_t>(p.q_lens[b], c.decode_steps ? 2 : 96);
    p.kv_lens[b] = std::max(p.kv_lens[b],
                            p.q_lens[b] * std::max<int64_t>(c.decode_steps, 1));
  }
  // The projections cost the oracle as much as the attention may: halve the
  // hidden size, then the new tokens, until the case fits the tier again.
  while (ProjectionMacs(c) > lim.max_macs) {
    if (c.hidden > 1) {
      c.hidden /= 2;
      continue;
    }
    for (int64_t& q : p.q_lens) q /= 2;
  }
}

}  // namespace

Case GenerateCase(Tier tier, uint64_t seed, uint64_t index, bool blocks) {
  const TierLimits lim = LimitsOf(tier);
  // What a JIT backend specializes on -- head_dim, dtype, mask kind, V
  // layout, GQA group -- is drawn once per block of consecutive cases, so a
  // campaign compiles once per block (~0.75 s of LLVM 22 on a 2-core AMD EPYC
  // Zen 5 family 26, GCC 12.2, 2026-11-21) instead of once per case; lengths,
  // batch, head counts, values, scale and decode mode still vary case by case.
  Rng spec(seed ^ 0x73706563ull, index / lim.spec_block);  // "spec"
  Rng r(seed, index);
  Case c;
  c.seed = seed;
  c.index = index;
  AttentionProblem& p = c.problem;

  // Decode loops are ~1 in 8 cases: each costs several attention calls.
  if (r.Bernoulli(0.125)) c.decode_steps = r.Range(2, lim.max_steps);

  p.batch = r.Bernoulli(0.4) ? 1 : r.Range(2, lim.max_batch);
  switch (Weighted(spec, std::array<int, 3>{70, 15, 15})) {
    case 0: {  // GQA ratio 1/2/4/8
      const int64_t g = Pick(spec, std::array<int64_t, 4>{1, 2, 4, 8});
      p.kv_heads = r.Range(1, tier == Tier::kSmoke ? 2 : 4);
      p.q_heads = p.kv_heads * g;
      break;
    }
    case 1:  // MQA: one kv head for any number of query heads
      p.kv_heads = 1;
      p.q_heads = spec.Range(2, 12);
      break;
    default: {  // ratios that are not a power of two (3, 5, 6)
      const int64_t g = Pick(spec, std::array<int64_t, 3>{3, 5, 6});
      p.kv_heads = r.Range(1, 2);
      p.q_heads = p.kv_heads * g;
      break;
    }
  }
  p.head_dim = HeadDim(spec, tier);

  switch (Weighted(spec, std::array<int, 4>{25, 30, 20, 25})) {
    case 0:
      p.mask = MaskKind::kNone;
      break;
    case 1:
      p.mask = MaskKind::kCausal;
      break;
    case 2:
      p.mask = MaskKind::kWindow;
      break;
    default:
      p.mask = MaskKind::kBias;
      break;
  }
  p.dtype = spec.Bernoulli(0.5) ? DType::kF32 : DType::kBF16;
  p.layout = static_cast<KvLayout>(spec.Below(3));
  // Quantized K/V from a stream of their own (every other draw stays what
  // it was before i8 existed), per spec block like the dtype (a JIT
  // specializes on it).
  Rng quant(seed ^ 0x7175616e74ull, index / lim.spec_block);  // "quant"
  if (quant.Bernoulli(kQuantizedKvRate)) p.kv_dtype = DType::kI8;
  if (r.Bernoulli(0.2)) {
    // Explicit scales, including negative ones (legal; they flip which key
    // is the maximum, so a kernel that assumes scale > 0 is caught).
    const float mag = r.Uniform(0.02f, 1.5f);
    p.scale = r.Bernoulli(0.15) ? -mag : mag;
  }

  // Ragged lengths. The query block is decode (1), a full prefill, a chunk,
  // or empty; with no structural mask it may also exceed the context.
  const bool ordered =
      p.mask == MaskKind::kCausal || p.mask == MaskKind::kWindow;
  p.q_lens.clear();
  p.kv_lens.clear();
  const bool all_decode = c.decode_steps == 0 && r.Bernoulli(0.25);
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t kv = ContextLength(r, tier, lim);
    int64_t q = 0;
    if (c.decode_steps > 0) {
      q = r.Bernoulli(0.8) ? 1 : r.Range(0, 4);  // tokens per step
    } else if (all_decode) {
      q = 1;
    } else {
      switch (Weighted(r, std::array<int, 5>{30, 25, 30, 5, 10})) {
        case 0:
          q = 1;
          break;
        case 1:
          q = kv;
          break;
        case 2:
          q = r.Range(0, kv);
          break;
        case 3:
          q = 0;
          break;
        default:
          q = ordered ? r.Range(0, kv) : r.Range(1, 70);
          break;
      }
    }
    if (ordered && c.decode_steps == 0) q = std::min(q, kv);
    p.q_lens.push_back(q);
    p.kv_lens.push_back(kv);
  }
  if (p.mask == MaskKind::kWindow) {
    switch (Weighted(r, std::array<int, 4>{15, 35, 35, 15})) {
      case 0:
        p.window = 1;  // only itself
        break;
      case 1:
        p.window = Pick(r, std::array<int64_t, 5>{8, 16, 32, 64, 128}) +
                   r.Range(-1, 1);
        break;
      case 2:
        p.window = r.Range(2, std::max<int64_t>(2, p.max_kv_len()));
        break;
      default:
        p.window = p.max_kv_len() + r.Range(1, 50);  // wider than any context
        break;
    }
  }

  const int vp = static_cast<int>(
      Weighted(r, std::array<int, kNumValueProfiles>{48, 13, 13, 13, 13}));
  c.profile = kValueProfileNames[static_cast<size_t>(vp)].value;
  if (r.Bernoulli(0.25)) c.kv_pad = r.Range(1, 17);

  if (tier != Tier::kSmoke && r.Bernoulli(kLongContextRate)) {
    LongContexts(c, r);  // kv_lens are the prompts, as FitToLimits leaves them
    if (p.mask == MaskKind::kWindow) {
      // A narrow window, or one wide enough to span the wrap.
      p.window =
          r.Bernoulli(0.5) ? r.Range(1, 300) : r.Range(2, p.max_kv_len() + 64);
    }
  } else {
    FitToLimits(c, lim);
  }
  for (int64_t b = 0; b < p.batch; ++b) {
    p.kv_lens[b] += c.decode_steps * p.q_lens[b];  // prompt -> final context
  }
  c.io.q = DrawRowLayout(r, p);
  c.io.out = DrawRowLayout(r, p);
  c.io.shared_bias = p.mask == MaskKind::kBias && r.Bernoulli(0.35);
  // Attention-block cases from a stream of their own, so every other case
  // is what it was before blocks existed.
  Rng blk(seed ^ 0x626c6f636bull, index);  // "block"
  if (blk.Bernoulli(kBlockRate) && blocks) MakeBlock(c, blk, lim);
  return c;
}

}  // namespace attnkit::harness
