#include "simd/simd_backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <string>
#include <vector>

#include "reference/oracle.h"
#include "runtime/backend.h"
#include "runtime/random.h"

// GCC pairs the replaced operator new with free() below and warns; the pair
// is correct (both sides are malloc/free), so the warning is off here only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

// Counting global allocation functions: the decode-path test asserts that a
// warmed-up backend allocates nothing.
namespace {
std::atomic<int64_t> g_allocations{0};
}  // namespace

void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void* operator new(std::size_t n, std::align_val_t al) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  const std::size_t a = static_cast<std::size_t>(al);
  if (void* p = std::aligned_alloc(a, (n + a - 1) / a * a)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t al) {
  return operator new(n, al);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}

namespace attnkit::simd {
namespace {

constexpr double kEps = 1.0 / (1 << 23);  // f32 unit roundoff * 2
constexpr double kDenormMin = 1.401298464324817e-45;

// Tolerance of one output element against the f64 oracle (inputs are read
// at their stored precision by both, so bf16 adds no error of its own):
//   eps * Vmax * (8 * (1 + L) + 2 * sqrt(n) + 8) + 4 * n * denorm_min
// where L bounds |logit| of the row (|scale| * max_j sum_e |q_e k_je| plus
// |bias|) and n is the number of visible keys. Why each term:
//  * 8 * (1 + L): a logit computed in f32 is off by ~eps * L (rounding of
//    the dot product, of scale*log2(e) and of the bias add); a softmax weight
//    inherits it as a relative error, so the output moves by ~eps * L * Vmax.
//    Huge logits (L ~ 1e3) are exactly where this term matters.
//  * 2 * sqrt(n): the sums of l and of O over n keys (random-walk rounding).
//  * 8: exp2's ~2 ulp polynomial, the final division, alpha rescales.
//  * 4 * n * denorm_min: with denormal V (ValueProfile::kTiny) each product
//    p * v is rounded to the denormal grid, an absolute error per key.
// The Eigen f32 reference makes errors of the same size for the same reasons.
struct Tolerances {
  std::vector<double> tol;  // dense like the oracle's output
};

Tolerances ComputeTolerances(const AttentionProblem& p,
                             const AttentionArgs& a) {
  const int64_t mq = p.max_q_len(), d = p.head_dim;
  Tolerances t;
  t.tol.assign(static_cast<size_t>(p.batch * p.q_heads * mq * d), 0.0);
  const double scale = std::fabs(p.EffectiveScale());
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t h = 0; h < p.q_heads; ++h) {
      const int64_t kh = p.KvHeadOf(h);
      double vmax = 0;
      for (int64_t j = 0; j < p.kv_lens[b]; ++j)
        for (int64_t e = 0; e < d; ++e)
          vmax = std::max(vmax, std::fabs(double{a.v.Load(b, kh, j, e)}));
      for (int64_t i = 0; i < p.q_lens[b]; ++i) {
        const KeyRange r = VisibleKeys(p, b, i);
        double L = 0;
        for (int64_t j = r.begin; j < r.end; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < d; ++e)
            dot += std::fabs(double{a.q.Load(b, h, i, e)} *
                             double{a.k.Load(b, kh, j, e)});
          double bias = 0;
          if (p.mask == MaskKind::kBias) {
            const float x = a.bias.Load(b, a.bias.shape[1] == 1 ? 0 : h, i, j);
            bias = std::isfinite(x) ? std::fabs(double{x}) : 0.0;
          }
          L = std::max(L, scale * dot + bias);
        }
        const double n =
            static_cast<double>(std::max<int64_t>(0, r.end - r.begin));
        const double tol = kEps * vmax * (8 * (1 + L) + 2 * std::sqrt(n) + 8) +
                           4 * n * kDenormMin;
        for (int64_t e = 0; e < d; ++e)
          t.tol[static_cast<size_t>(((b * p.q_heads + h) * mq + i) * d + e)] =
              tol;
      }
    }
  }
  return t;
}

// Empty string when every written element is within tolerance (NaN-aware:
// NaN must match NaN); otherwise the worst element, for the failure message.
std::string CompareToOracle(const AttentionProblem& p, const TensorView& out,
                            const std::vector<double>& oracle,
                            const Tolerances& tol) {
  const int64_t mq = p.max_q_len(), d = p.head_dim;
  double worst = 0;
  std::string where;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.q_heads; ++h)
      for (int64_t i = 0; i < p.q_lens[b]; ++i)
        for (int64_t e = 0; e < d; ++e) {
          const size_t idx =
              static_cast<size_t>(((b * p.q_heads + h) * mq + i) * d + e);
          const double want = oracle[idx], got = out.Load(b, h, i, e);
          double ratio;
          if (std::isnan(want) || std::isnan(got)) {
            ratio = std::isnan(want) && std::isnan(got)
                        ? 0
                        : std::numeric_limits<double>::infinity();
          } else {
            ratio = std::fabs(got - want) / tol.tol[idx];
            if (std::fabs(got - want) == 0) ratio = 0;
          }
          if (!(ratio <= 1.0) && !(ratio <= worst)) {
            worst = ratio;
            where = "b=" + std::to_string(b) + " h=" + std::to_string(h) +
                    " i=" + std::to_string(i) + " e=" + std::to_string(e) +
                    " got=" + std::to_string(got) +
                    " want=" + std::to_string(want) +
                    " tol=" + std::to_string(tol.tol[idx]) +
                    " err/tol=" + std::to_string(ratio);
          }
        }
  return where;
}

// Runs `backend` on seeded data for `p` and checks it against the oracle.
// kv_extra: KV extents beyond the longest length (a cache prefix).
void CheckProblem(Backend& backend, const AttentionProblem& p, uint64_t seed,
                  ValueProfile profile = ValueProfile::kNormal,
                  int64_t kv_extra = 0) {
  SCOPED_TRACE("problem " + p.ToString() + " seed=" + std::to_string(seed) +
               " profile=" + std::string(ValueProfileName(profile)) +
               " kv_extra=" + std::to_string(kv_extra));
  auto data = AttentionData::Create(p, p.max_kv_len() + kv_extra);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  Rng rng(seed);
  data->Fill(p, rng, profile);
  const AttentionArgs& a = data->args();
  // Rows past q_lens must stay untouched: fill them with a sentinel.
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.q_heads; ++h)
      for (int64_t i = p.q_lens[b]; i < p.max_q_len(); ++i)
        for (int64_t e = 0; e < p.head_dim; ++e) a.out.Store(b, h, i, e, 7.0f);
  std::vector<double> oracle;
  ASSERT_TRUE(reference::OracleAttention(p, a, &oracle).ok());
  const Status s = backend.Attention(p, a);
  ASSERT_TRUE(s.ok()) << s.ToString();
  const std::string bad =
      CompareToOracle(p, a.out, oracle, ComputeTolerances(p, a));
  EXPECT_TRUE(bad.empty()) << bad;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.q_heads; ++h)
      for (int64_t i = p.q_lens[b]; i < p.max_q_len(); ++i)
        for (int64_t e = 0; e < p.head_dim; ++e)
          ASSERT_EQ(a.out.Load(b, h, i, e), 7.0f) << "row past q_len written";
}

// A seeded random problem covering every feature: ragged batches with empty
// sequences, GQA/MQA, odd head dims, every mask, dtype and layout, lengths
// around the tile sizes (64, 256) and the row block (64 rows).
AttentionProblem RandomProblem(Rng& rng) {
  AttentionProblem p;
  p.batch = rng.Range(1, 3);
  p.kv_heads = rng.Range(1, 3);
  const int64_t groups[] = {1, 1, 2, 3, 4, 5, 8, 16};
  p.q_heads = p.kv_heads * groups[rng.Below(8)];
  const int64_t dims[] = {1, 3, 8, 16, 17, 31, 32, 48, 64, 80, 96, 128};
  p.head_dim = dims[rng.Below(12)];
  p.mask = static_cast<MaskKind>(rng.Below(4));
  p.dtype = rng.Bernoulli(0.5) ? DType::kF32 : DType::kBF16;
  p.layout = static_cast<KvLayout>(rng.Below(3));
  if (rng.Bernoulli(0.2)) p.scale = rng.Uniform(-0.5f, 0.5f) + 0.01f;
  const bool big = rng.Bernoulli(0.2);
  p.q_lens.clear();
  p.kv_lens.clear();
  for (int64_t b = 0; b < p.batch; ++b) {
    int64_t kv = big ? rng.Range(150, 600) : rng.Range(0, 80);
    if (rng.Bernoulli(0.1)) kv = 0;
    int64_t q = rng.Bernoulli(0.4) ? std::min<int64_t>(1, kv + 1)
                                   : rng.Range(0, big ? 70 : 20);
    if (rng.Bernoulli(0.1)) q = 0;
    if (p.mask == MaskKind::kCausal || p.mask == MaskKind::kWindow)
      q = std::min(q, kv);
    p.q_lens.push_back(q);
    p.kv_lens.push_back(kv);
  }
  if (p.mask == MaskKind::kWindow) p.window = rng.Range(1, 90);
  return p;
}

class SimdIsaTest : public ::testing::TestWithParam<Isa> {
 protected:
  std::unique_ptr<Backend> Make(int force_splits = 0) {
    SimdOptions o;
    o.isa = GetParam();
    o.force_kv_splits = force_splits;
    return MakeSimdBackend(o);
  }
};

TEST_P(SimdIsaTest, RandomSweepMatchesOracle) {
  auto backend = Make();
  Rng rng(0x5eed, static_cast<uint64_t>(GetParam()));
  for (int c = 0; c < 40; ++c) {
    const AttentionProblem p = RandomProblem(rng);
    ASSERT_TRUE(p.Validate().ok()) << p.ToString();
    CheckProblem(*backend, p, 1000 + c, ValueProfile::kNormal,
                 rng.Bernoulli(0.3) ? rng.Range(1, 40) : 0);
    if (HasFatalFailure() || HasFailure()) return;
  }
}

TEST_P(SimdIsaTest, AdversarialProfiles) {
  auto backend = Make();
  for (int prof = 1; prof < kNumValueProfiles; ++prof) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
      for (MaskKind mask :
           {MaskKind::kNone, MaskKind::kCausal, MaskKind::kBias}) {
        // Tile edges: 513 = 2 * 256 + 1 (decode tiles), 65 = 64 + 1.
        AttentionProblem p;
        p.batch = 2;
        p.q_heads = 4;
        p.kv_heads = 2;
        p.head_dim = 32;
        p.dtype = dt;
        p.mask = mask;
        p.q_lens = {17, 1};
        p.kv_lens = {130, 513};
        CheckProblem(*backend, p, 77 + prof, static_cast<ValueProfile>(prof));
        p.q_lens = {20, 0};  // 40 rows: the lanes path; one empty sequence
        p.kv_lens = {129, 65};
        p.layout = KvLayout::kTransposedV;
        CheckProblem(*backend, p, 99 + prof, static_cast<ValueProfile>(prof));
      }
    }
  }
}

TEST_P(SimdIsaTest, SplitKvMergeMatchesOracle) {
  Rng rng(0x5b1, static_cast<uint64_t>(GetParam()));
  for (int splits : {2, 3, 7}) {
    auto backend = Make(splits);
    for (int c = 0; c < 12; ++c) {
      const AttentionProblem p = RandomProblem(rng);
      CheckProblem(*backend, p, 500 + c);
      if (HasFailure()) return;
    }
  }
}

TEST_P(SimdIsaTest, DecodeShapesAllLayoutsAndDtypes) {
  auto backend = Make();
  for (KvLayout layout :
       {KvLayout::kBHSD, KvLayout::kBSHD, KvLayout::kTransposedV}) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
      for (int64_t d : {64, 128, 40}) {
        AttentionProblem p;
        p.batch = 2;
        p.q_heads = 8;
        p.kv_heads = 2;
        p.head_dim = d;
        p.dtype = dt;
        p.layout = layout;
        p.mask = MaskKind::kCausal;
        p.q_lens = {1, 1};
        p.kv_lens = {1030, 255};
        CheckProblem(*backend, p, 3, ValueProfile::kNormal, 100);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllIsas, SimdIsaTest,
                         ::testing::ValuesIn(AvailableIsas()),
                         [](const ::testing::TestParamInfo<Isa>& info) {
                           return std::string(IsaName(info.param));
                         });

TEST(SimdTest, IsasAgreeWithEachOther) {
  const std::vector<Isa> isas = AvailableIsas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.front(), Isa::kScalar);
  EXPECT_NE(std::find(isas.begin(), isas.end(), BestIsa()), isas.end());
  Rng rng(42);
  for (int c = 0; c < 10; ++c) {
    const AttentionProblem p = RandomProblem(rng);
    auto data = AttentionData::Create(p);
    ASSERT_TRUE(data.ok());
    Rng fill(c);
    data->Fill(p, fill);
    const AttentionArgs& a = data->args();
    std::vector<double> oracle;
    ASSERT_TRUE(reference::OracleAttention(p, a, &oracle).ok());
    const Tolerances tol = ComputeTolerances(p, a);
    std::vector<std::vector<float>> outs;
    for (Isa isa : isas) {
      SimdOptions o;
      o.isa = isa;
      ASSERT_TRUE(MakeSimdBackend(o)->Attention(p, a).ok());
      std::vector<float> out;
      for (int64_t b = 0; b < p.batch; ++b)
        for (int64_t h = 0; h < p.q_heads; ++h)
          for (int64_t i = 0; i < p.q_lens[b]; ++i)
            for (int64_t e = 0; e < p.head_dim; ++e)
              out.push_back(a.out.Load(b, h, i, e));
      outs.push_back(std::move(out));
    }
    // Each pair differs by at most the sum of their allowed errors.
    size_t k = 0;
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.q_heads; ++h)
        for (int64_t i = 0; i < p.q_lens[b]; ++i)
          for (int64_t e = 0; e < p.head_dim; ++e, ++k) {
            const double t = tol.tol[static_cast<size_t>(
                ((b * p.q_heads + h) * p.max_q_len() + i) * p.head_dim + e)];
            for (size_t x = 1; x < outs.size(); ++x)
              ASSERT_LE(std::fabs(double{outs[x][k]} - outs[0][k]), 2 * t)
                  << IsaName(isas[x]) << " vs scalar, " << p.ToString();
          }
  }
}

TEST(SimdTest, CheckerCatchesOneCorruptedElement) {
  // The canary: the comparison used by every test must flag one bad value.
  AttentionProblem p;
  p.q_heads = 2;
  p.head_dim = 16;
  p.q_lens = {5};
  p.kv_lens = {40};
  auto data = AttentionData::Create(p);
  ASSERT_TRUE(data.ok());
  Rng rng(1);
  data->Fill(p, rng);
  const AttentionArgs& a = data->args();
  std::vector<double> oracle;
  ASSERT_TRUE(reference::OracleAttention(p, a, &oracle).ok());
  ASSERT_TRUE(MakeSimdBackend()->Attention(p, a).ok());
  const Tolerances tol = ComputeTolerances(p, a);
  EXPECT_EQ(CompareToOracle(p, a.out, oracle, tol), "");
  const float v = a.out.Load(0, 1, 3, 7);
  a.out.Store(0, 1, 3, 7, v + 1e-3f);
  EXPECT_NE(CompareToOracle(p, a.out, oracle, tol), "");
  a.out.Store(0, 1, 3, 7, std::numeric_limits<float>::quiet_NaN());
  EXPECT_NE(CompareToOracle(p, a.out, oracle, tol), "");
}

TEST(SimdTest, FullyMaskedRowsAreZerosNeverNaN) {
  AttentionProblem p;
  p.batch = 3;
  p.q_heads = 4;
  p.kv_heads = 2;
  p.head_dim = 24;
  p.mask = MaskKind::kBias;
  p.q_lens = {3, 2, 20};
  p.kv_lens = {0, 70, 300};
  auto data = AttentionData::Create(p);
  ASSERT_TRUE(data.ok());
  Rng rng(5);
  data->Fill(p, rng);
  const AttentionArgs& a = data->args();
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t j = 0; j < 300; ++j) a.bias.Store(2, h, 4, j, ninf);
  auto backend = MakeSimdBackend();
  ASSERT_TRUE(backend->Attention(p, a).ok());
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t e = 0; e < 24; ++e) {
      EXPECT_EQ(a.out.Load(0, h, 0, e), 0.0f);  // empty context
      EXPECT_EQ(a.out.Load(2, h, 4, e), 0.0f);  // all -inf bias row
      EXPECT_FALSE(std::isnan(a.out.Load(2, h, 5, e)));
    }
}

TEST(SimdTest, ThreadCountDoesNotChangeBits) {
  // Work items are independent, so 1 and 2 threads must agree exactly (a
  // race on a shared workspace would not).
  AttentionProblem p;
  p.batch = 2;
  p.q_heads = 8;
  p.kv_heads = 2;
  p.head_dim = 64;
  p.mask = MaskKind::kCausal;
  p.q_lens = {150, 90};
  p.kv_lens = {400, 90};
  auto data = AttentionData::Create(p);
  ASSERT_TRUE(data.ok());
  Rng rng(11);
  data->Fill(p, rng);
  const AttentionArgs& a = data->args();
  std::vector<float> outs[2];
  for (int threads : {1, 2}) {
    SimdOptions o;
    o.num_threads = threads;
    ASSERT_TRUE(MakeSimdBackend(o)->Attention(p, a).ok());
    const float* f = a.out.As<float>();
    outs[threads - 1].assign(f, f + a.out.NumElements());
  }
  EXPECT_EQ(outs[0], outs[1]);
}

TEST(SimdTest, WarmDecodeDoesNotAllocate) {
  for (int splits : {0, 4}) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
      AttentionProblem p;
      p.q_heads = 32;
      p.kv_heads = 8;
      p.head_dim = 128;
      p.dtype = dt;
      p.mask = MaskKind::kCausal;
      p.q_lens = {1};
      p.kv_lens = {3000};
      auto data = AttentionData::Create(p);
      ASSERT_TRUE(data.ok());
      Rng rng(3);
      data->Fill(p, rng);
      SimdOptions o;
      o.force_kv_splits = splits;
      auto backend = MakeSimdBackend(o);
      ASSERT_TRUE(backend->Attention(p, data->args()).ok());  // warm-up
      int64_t before = g_allocations.load();
      ASSERT_TRUE(backend->Attention(p, data->args()).ok());
      EXPECT_EQ(g_allocations.load() - before, 0) << "same shape";
      AttentionProblem smaller = p;
      smaller.kv_lens = {2000};
      before = g_allocations.load();
      ASSERT_TRUE(backend->Attention(smaller, data->args()).ok());
      EXPECT_EQ(g_allocations.load() - before, 0) << "smaller shape";
    }
  }
}

TEST(SimdTest, InvalidInputIsAStatus) {
  AttentionProblem p;
  p.head_dim = 8;
  p.q_lens = {2};
  p.kv_lens = {2};
  auto data = AttentionData::Create(p);
  ASSERT_TRUE(data.ok());
  AttentionArgs a = data->args();
  a.k.shape[3] = 7;
  auto backend = MakeSimdBackend();
  const Status s = backend->Attention(p, a);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("k:"), std::string::npos) << s.ToString();
  p.kv_heads = 0;
  EXPECT_EQ(backend->Attention(p, data->args()).code(),
            StatusCode::kInvalidArgument);
}

TEST(SimdTest, RegisteredAsSimd) {
  auto b = MakeBackend("simd");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((*b)->name(), "simd");
}

// ---------------------------------------------------------------- append

TEST(SimdAppendTest, BitExactVersusStridedAppendInEveryLayout) {
  Rng rng(21);
  for (KvLayout layout :
       {KvLayout::kBHSD, KvLayout::kBSHD, KvLayout::kTransposedV}) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
      for (int new_order = 0; new_order < 3; ++new_order) {
        const int64_t B = 3, H = 2, cap = 90, d = 37, n = 20;
        const std::array<int64_t, 4> cshape{B, H, cap, d}, nshape{B, H, n, d};
        Tensor kc[2], vc[2];
        for (int x = 0; x < 2; ++x) {
          kc[x] =
              Tensor::Allocate(dt, cshape, KvStrides(layout, false, cshape));
          vc[x] = Tensor::Allocate(dt, cshape, KvStrides(layout, true, cshape));
        }
        Rng fill(7);
        FillNormal(kc[0].view, fill);
        FillNormal(vc[0].view, fill);
        std::memcpy(kc[1].buffer.data(), kc[0].buffer.data(),
                    kc[0].buffer.size());
        std::memcpy(vc[1].buffer.data(), vc[0].buffer.data(),
                    vc[0].buffer.size());
        // New tokens in BHSD, BSHD or sequence-major order.
        const std::array<int, 4> orders[] = {
            {0, 1, 2, 3}, {0, 2, 1, 3}, {0, 1, 3, 2}};
        Tensor nk = Tensor::Allocate(
            dt, nshape, PermutedStrides(nshape, orders[new_order]));
        Tensor nv = Tensor::Allocate(
            dt, nshape, PermutedStrides(nshape, orders[new_order]));
        FillNormal(nk.view, fill);
        FillNormal(nv.view, fill);
        const std::vector<int64_t> pos = {0, 33, 70}, lens = {n, 0, 20};
        KvAppendArgs args[2];
        for (int x = 0; x < 2; ++x)
          args[x] = {kc[x].view, vc[x].view, nk.view, nv.view, pos, lens};
        AppendKvStrided(args[0]);
        ASSERT_TRUE(MakeSimdBackend()->AppendKv(args[1]).ok());
        EXPECT_EQ(std::memcmp(kc[0].buffer.data(), kc[1].buffer.data(),
                              kc[0].buffer.size()),
                  0)
            << KvLayoutName(layout) << " " << DTypeName(dt) << " " << new_order;
        EXPECT_EQ(std::memcmp(vc[0].buffer.data(), vc[1].buffer.data(),
                              vc[0].buffer.size()),
                  0)
            << KvLayoutName(layout) << " " << DTypeName(dt) << " " << new_order;
      }
    }
  }
  (void)rng;
}

TEST(SimdAppendTest, OverflowIsOutOfRangeAndWritesNothing) {
  const std::array<int64_t, 4> cshape{1, 1, 8, 4}, nshape{1, 1, 3, 4};
  Tensor kc = Tensor::Contiguous(DType::kF32, cshape);
  Tensor vc = Tensor::Contiguous(DType::kF32, cshape);
  Tensor nk = Tensor::Contiguous(DType::kF32, nshape);
  Tensor nv = Tensor::Contiguous(DType::kF32, nshape);
  Rng rng(1);
  FillNormal(nk.view, rng);
  const std::vector<int64_t> pos = {6}, lens = {3};
  const Status s = MakeSimdBackend()->AppendKv(
      {kc.view, vc.view, nk.view, nv.view, pos, lens});
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.ToString();
  for (int64_t j = 0; j < 8; ++j) EXPECT_EQ(kc.view.Load(0, 0, j, 0), 0.0f);
}

}  // namespace
}  // namespace attnkit::simd
