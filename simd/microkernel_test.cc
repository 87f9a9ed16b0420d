// The simd kernels' building blocks -- the QK^T tile and the P.V tile of the
// prefill path and of the decode path -- each run alone on every ISA this CPU
// has and compared with a scalar loop in double (XNNPACK's tester pattern: a
// TileTester holds one configuration, Test*() runs it). The end-to-end tests
// (simd_backend_test) see a wrong block only through the whole softmax; here
// a failure names the block, the ISA, the shape and the element.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/problem.h"
#include "runtime/random.h"
#include "runtime/tensor.h"
#include "simd/kernel.h"
#include "simd/simd_backend.h"

namespace attnkit::simd {
// gtest prints a failing parameter with this (ADL) instead of its bytes.
void PrintTo(Isa isa, std::ostream* os) { *os << IsaName(isa); }
}  // namespace attnkit::simd

namespace attnkit::simd::internal {
namespace {

enum class Path { kPrefill, kDecode };

const char* PathName(Path path) {
  return path == Path::kPrefill ? "prefill" : "decode";
}

// Strides of a [batch, heads, seq, d] K or V tensor in `layout`, with `pad`
// unused elements after every row along the unit-stride dim (a cache row
// wider than head_dim): the kernels must follow the strides, never assume
// dense rows. V of kTransposedV is d-major ([b][h][e][s]).
std::array<int64_t, 4> PaddedKvStrides(KvLayout layout, bool is_v,
                                       const std::array<int64_t, 4>& shape,
                                       int64_t pad) {
  const int64_t heads = shape[1], seq = shape[2], d = shape[3];
  if (is_v && layout == KvLayout::kTransposedV) {
    const int64_t row = seq + pad;
    return {heads * d * row, d * row, 1, row};
  }
  const int64_t row = d + pad;
  if (layout == KvLayout::kBSHD)
    return {seq * heads * row, row, heads * row, 1};
  return {heads * seq * row, seq * row, row, 1};
}

// A tensor whose gaps (padding) hold NaN, so a kernel that reads past a
// row shows up as NaN in its result.
Tensor NanPaddedTensor(DType dtype, const std::array<int64_t, 4>& shape,
                       const std::array<int64_t, 4>& strides, Rng& rng) {
  Tensor t = Tensor::Allocate(dtype, shape, strides);
  std::memset(t.buffer.data(), 0xff, t.buffer.size());  // NaN in f32 and bf16
  FillNormal(t.view, rng);
  return t;
}

// One configuration of a tile step. Defaults: an f32 BHSD tile of 3 rows,
// d = 32, the keys [5, 5 + 20) of a 30-key context.
class TileTester {
 public:
  TileTester& isa(Isa v) {
    isa_ = v;
    return *this;
  }
  TileTester& dtype(DType v) {
    dtype_ = v;
    return *this;
  }
  TileTester& layout(KvLayout v) {
    layout_ = v;
    return *this;
  }
  TileTester& head_dim(int64_t v) {
    d_ = v;
    return *this;
  }
  // Rows: `queries` x `group_heads` query heads of each of `kv_heads` kv
  // heads (more than one: the decode path's BSHD items).
  TileTester& rows(int64_t queries, int64_t group_heads, int64_t kv_heads = 1) {
    queries_ = queries;
    group_heads_ = group_heads;
    kv_heads_ = kv_heads;
    return *this;
  }
  TileTester& keys(int64_t j0, int64_t nt) {
    j0_ = j0;
    nt_ = nt;
    return *this;
  }
  TileTester& row_pad(int64_t v) {
    pad_ = v;
    return *this;
  }
  // The canary: one element of the step's output is changed before the
  // comparison, which must then fail.
  TileTester& corrupt_one_output() {
    corrupt_ = true;
    return *this;
  }
  int64_t row_count() const { return queries_ * group_heads_ * kv_heads_; }

  // scores = Q K^T of the step against the double-precision dot products.
  // Bound: the f32 rounding of a d-term dot product in any summation order,
  // |err| <= d * u * sum_e |q_e k_e| (u = 2^-24, Higham's gamma_d), doubled
  // for the exp-free slack of fused vs separate multiply-adds; bf16 inputs
  // are exact in f32 and vdpbf16ps's products are exact, so the same bound
  // holds for them.
  void TestQk(Path path) const {
    Setup s = MakeSetup();
    const TileSteps& steps = Steps(path);
    const int64_t R = row_count();
    std::vector<float> scores(static_cast<size_t>(R * nt_), -1.0f);
    steps.qk(s.job, j0_, nt_, s.ws(), scores.data());
    if (corrupt_) Corrupt(scores);
    const TensorView& q = s.q.view;
    const TensorView& k = s.k.view;
    for (int64_t r = 0; r < R; ++r) {
      const RowIndex ri = Row(r);
      for (int64_t j = 0; j < nt_; ++j) {
        double ref = 0, mag = 0;
        for (int64_t e = 0; e < d_; ++e) {
          const double x =
              static_cast<double>(q.Load(1, ri.head, ri.query, e)) *
              k.Load(1, ri.kv_head, j0_ + j, e);
          ref += x;
          mag += std::fabs(x);
        }
        const double bound = 2.0 * static_cast<double>(d_) * 0x1p-24 * mag;
        const float got = scores[static_cast<size_t>(r * nt_ + j)];
        if (!(std::fabs(got - ref) <= bound)) {
          ADD_FAILURE() << Describe("qk", path) << ": score[row " << r
                        << "][key " << j << "] = " << got << ", expected "
                        << ref << " (bound " << bound << ")";
          return;
        }
      }
    }
  }

  // out = out_in + P V of the step (probabilities in [0, 1), out_in ~N(0,1):
  // the step accumulates) against double. Bound: (nt + 1) * u * (|out_in| +
  // sum_j |p_j v_j|), doubled as for QK^T.
  void TestPv(Path path) const {
    Setup s = MakeSetup();
    const TileSteps& steps = Steps(path);
    const int64_t R = row_count();
    Rng rng(0x9f, static_cast<uint64_t>(d_ * 1000 + nt_));
    std::vector<float> probs(static_cast<size_t>(R * nt_));
    for (float& x : probs) x = rng.Uniform01();
    std::vector<float> out(static_cast<size_t>(R * d_));
    for (float& x : out) x = rng.Normal();
    const std::vector<float> out_in = out;
    steps.pv(s.job, j0_, nt_, probs.data(), s.ws(), out.data());
    if (corrupt_) Corrupt(out);
    const TensorView& v = s.v.view;
    for (int64_t r = 0; r < R; ++r) {
      const RowIndex ri = Row(r);
      for (int64_t e = 0; e < d_; ++e) {
        double ref = out_in[static_cast<size_t>(r * d_ + e)];
        double mag = std::fabs(ref);
        for (int64_t j = 0; j < nt_; ++j) {
          const double x =
              static_cast<double>(probs[static_cast<size_t>(r * nt_ + j)]) *
              v.Load(1, ri.kv_head, j0_ + j, e);
          ref += x;
          mag += std::fabs(x);
        }
        const double bound = 2.0 * static_cast<double>(nt_ + 1) * 0x1p-24 * mag;
        const float got = out[static_cast<size_t>(r * d_ + e)];
        if (!(std::fabs(got - ref) <= bound)) {
          ADD_FAILURE() << Describe("pv", path) << ": out[row " << r << "][e "
                        << e << "] = " << got << ", expected " << ref
                        << " (bound " << bound << ")";
          return;
        }
      }
    }
  }

 private:
  // The job's sequence, first kv head, first head of the group and first
  // query are not 0, so an offset computed from the wrong index shows.
  static constexpr int64_t kBatch = 2, kGroup = 4, kKvHeadsTotal = 3;
  static constexpr int64_t kSeq = 1, kFirstQuery = 2;

  struct RowIndex {
    int64_t kv_head, head, query;
  };
  struct Setup {
    AttentionProblem p;
    Tensor q, k, v;
    AttentionArgs args;
    BlockJob job;
    AlignedBuffer workspace;
    float* ws() const { return static_cast<float*>(workspace.data()); }
  };

  static void Corrupt(std::vector<float>& x) {
    float& y = x[x.size() / 2];
    y += 0.5f + std::fabs(y) * 0x1p-10f;
  }

  int64_t first_kv_head() const { return kKvHeadsTotal - kv_heads_; }

  RowIndex Row(int64_t r) const {  // run_block's order: kv head, query, head
    const int64_t k = r / (queries_ * group_heads_);
    const int64_t ii = r / group_heads_ % queries_, gg = r % group_heads_;
    const int64_t kvh = first_kv_head() + k;
    return {kvh, kvh * kGroup + (kGroup - group_heads_) + gg, kFirstQuery + ii};
  }

  const TileSteps& Steps(Path path) const {
    const KernelSteps* steps = StepsFor(isa_);
    EXPECT_NE(steps, nullptr);
    return path == Path::kPrefill ? steps->prefill : steps->decode;
  }

  Setup MakeSetup() const {
    Setup s;
    const int64_t kv_len = j0_ + nt_ + 2, capacity = kv_len + 5;
    s.p.batch = kBatch;
    s.p.kv_heads = kKvHeadsTotal;
    s.p.q_heads = kKvHeadsTotal * kGroup;
    s.p.head_dim = d_;
    s.p.dtype = dtype_;
    s.p.layout = layout_;
    s.p.q_lens.assign(kBatch, kFirstQuery + queries_);
    s.p.kv_lens.assign(kBatch, kv_len);
    Rng rng(0x71e, static_cast<uint64_t>(d_ * 131 + nt_ * 7 + pad_));
    const std::array<int64_t, 4> qshape{kBatch, s.p.q_heads,
                                        kFirstQuery + queries_, d_};
    const std::array<int64_t, 4> kvshape{kBatch, kKvHeadsTotal, capacity, d_};
    s.q = NanPaddedTensor(dtype_, qshape,
                          PaddedKvStrides(KvLayout::kBHSD, false, qshape, pad_),
                          rng);
    s.k = NanPaddedTensor(dtype_, kvshape,
                          PaddedKvStrides(layout_, false, kvshape, pad_), rng);
    s.v = NanPaddedTensor(dtype_, kvshape,
                          PaddedKvStrides(layout_, true, kvshape, pad_), rng);
    s.args.q = s.q.view;
    s.args.k = s.k.view;
    s.args.v = s.v.view;
    s.job.problem = &s.p;
    s.job.args = &s.args;
    s.job.batch = kSeq;
    s.job.kv_head = first_kv_head();
    s.job.kv_heads = kv_heads_;
    s.job.first_group_head = kGroup - group_heads_;
    s.job.group_heads = group_heads_;
    s.job.first_query = kFirstQuery;
    s.job.queries = queries_;
    s.job.kv_begin = 0;
    s.job.kv_end = kv_len;
    s.workspace = AlignedBuffer(ComputeLayout(d_).total * sizeof(float));
    return s;
  }

  std::string Describe(const char* step, Path path) const {
    std::ostringstream os;
    os << PathName(path) << " " << step << " isa=" << IsaName(isa_)
       << " dtype=" << DTypeName(dtype_) << " layout=" << KvLayoutName(layout_)
       << " d=" << d_ << " rows=" << queries_ << "x" << group_heads_ << "x"
       << kv_heads_ << " keys=[" << j0_ << ", " << j0_ + nt_
       << ") row_pad=" << pad_;
    return os.str();
  }

  Isa isa_ = Isa::kScalar;
  DType dtype_ = DType::kF32;
  KvLayout layout_ = KvLayout::kBHSD;
  int64_t d_ = 32, queries_ = 3, group_heads_ = 1, kv_heads_ = 1;
  int64_t j0_ = 5, nt_ = 20, pad_ = 0;
  bool corrupt_ = false;
};

class MicroKernelTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (StepsFor(GetParam()) == nullptr) {
      GTEST_SKIP() << "this CPU cannot run " << IsaName(GetParam());
    }
    ops_ = OpsFor(GetParam());
  }
  int W() const { return ops_->vector_floats; }
  const KernelOps* ops_ = nullptr;
};

// Head dims: 1, odd, below / at / above every vector width (4, 8, 16 f32;
// 32 bf16 for vdpbf16ps), and the common 128.
constexpr int64_t kDims[] = {1, 3, 8, 17, 32, 40, 64, 128};
constexpr DType kDtypes[] = {DType::kF32, DType::kBF16};
constexpr KvLayout kLayouts[] = {KvLayout::kBHSD, KvLayout::kBSHD,
                                 KvLayout::kTransposedV};

// The prefill path holds up to max_rows = 4 vectors of rows of one kv head:
// 1 row, a vector's worth +- 1, and the full block; keys up to its 64-key
// tile, with tails.
TEST_P(MicroKernelTest, PrefillTiles) {
  const int64_t w = W();
  const int64_t row_shapes[][2] = {
      {1, 1}, {w - 1, 1}, {(w + 1) / 2, 3}, {w, 4}};  // queries x group heads
  const int64_t tiles[][2] = {{0, 1},
                              {3, w + 1},
                              {0, kMaxPrefillTileKeys},
                              {70, kMaxPrefillTileKeys - 1}};
  for (DType dt : kDtypes)
    for (KvLayout layout : kLayouts)
      for (int64_t d : kDims)
        for (const auto& rs : row_shapes)
          for (const auto& tile : tiles)
            for (int64_t pad : {0, 3}) {
              TileTester t;
              t.isa(GetParam())
                  .dtype(dt)
                  .layout(layout)
                  .head_dim(d)
                  .rows(rs[0], rs[1])
                  .keys(tile[0], tile[1])
                  .row_pad(pad);
              ASSERT_LE(t.row_count(), ops_->max_rows);
              t.TestQk(Path::kPrefill);
              t.TestPv(Path::kPrefill);
              if (HasFailure()) return;
            }
}

// The decode path: few rows (one query of a GQA group, a couple of
// queries, an odd count, rows of two kv heads), keys up to its tile
// (DecodeTileKeys: 128; 256 for BHSD f32 / bf16 items of up to 4 rows;
// transposed V 128-256 keys on narrower ISAs, 2048 on AVX-512), with tails
// that leave a partial vector of keys. Head dims also 120: rows widened into
// the workspace's zero-padded 128 (P.V's whole-row path for adjacent f32 rows,
// as d = 128 without padding takes it in place).
TEST_P(MicroKernelTest, DecodeTiles) {
  const int64_t w = W();
  const int64_t row_shapes[][3] = {
      {1, 1, 1}, {1, 4, 1}, {2, 3, 1}, {5, 1, 1}, {1, 2, 2}};
  std::vector<int64_t> dims(std::begin(kDims), std::end(kDims));
  dims.push_back(120);
  for (DType dt : kDtypes)
    for (KvLayout layout : kLayouts)
      for (int64_t d : dims)
        for (const auto& rs : row_shapes)
          for (const int64_t tk = DecodeTileKeys(
                   layout, dt, rs[0] * rs[1] * rs[2], static_cast<int>(w));
               const auto& tile : std::array<std::array<int64_t, 2>, 4>{
                   {{0, 1}, {5, w + 3}, {0, tk}, {130, tk - 5}}})
            for (int64_t pad : {0, 3}) {
              TileTester t;
              t.isa(GetParam())
                  .dtype(dt)
                  .layout(layout)
                  .head_dim(d)
                  .rows(rs[0], rs[1], rs[2])
                  .keys(tile[0], tile[1])
                  .row_pad(pad);
              t.TestQk(Path::kDecode);
              t.TestPv(Path::kDecode);
              if (HasFailure()) return;
            }
}

// The canary (DESIGN.md): a checker that cannot fail proves nothing. One
// output element changed after the step ran must fail each comparison.
TEST_P(MicroKernelTest, CheckerCatchesOneWrongElement) {
  for (Path path : {Path::kPrefill, Path::kDecode}) {
    for (DType dt : kDtypes) {
      TileTester t;
      t.isa(GetParam()).dtype(dt).corrupt_one_output();
      ::testing::TestPartResultArray failures;
      {
        ::testing::ScopedFakeTestPartResultReporter reporter(
            ::testing::ScopedFakeTestPartResultReporter::
                INTERCEPT_ONLY_CURRENT_THREAD,
            &failures);
        t.TestQk(path);
        t.TestPv(path);
      }
      EXPECT_EQ(failures.size(), 2) << PathName(path) << " " << DTypeName(dt);
    }
  }
}

// The softmax's exp2, whatever instructions an ISA computes it with: a
// masked logit (-inf, or anything at or below -127) gives exactly +0, NaN
// stays NaN, exp2(0) is exactly 1 (an unchanged max rescales nothing),
// integers give their power of two exactly, and the rest is within 3 ulp of
// exp2 in double down to where the result is no longer a normal float.
TEST_P(MicroKernelTest, Exp2KeepsItsContract) {
  const KernelSteps& steps = *StepsFor(GetParam());
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {-inf,    -1e30f,  -200.0f,       -150.0f,
                          -127.5f, -127.0f, std::nanf(""), 0.0f};
  const size_t zeros = 6;
  for (int n = -125; n <= 9; ++n) x.push_back(static_cast<float>(n));
  const size_t exact = x.size();
  for (float v = -125.0f; v <= 9.0f; v += 0.0137f) x.push_back(v);
  std::vector<float> y(x.size(), -1.0f);
  steps.exp2(x.data(), static_cast<int64_t>(x.size()), y.data());
  for (size_t i = 0; i < zeros; ++i) {
    EXPECT_EQ(y[i], 0.0f) << "exp2(" << x[i] << ")";
    EXPECT_FALSE(std::signbit(y[i])) << "exp2(" << x[i] << ")";
  }
  EXPECT_TRUE(std::isnan(y[6])) << "exp2(NaN) = " << y[6];
  EXPECT_EQ(y[7], 1.0f);
  for (size_t i = 8; i < exact; ++i)
    EXPECT_EQ(y[i], std::ldexp(1.0f, static_cast<int>(x[i])))
        << "exp2(" << x[i] << ")";
  for (size_t i = exact; i < x.size(); ++i) {
    const double want = std::exp2(static_cast<double>(x[i]));
    const double ulp = std::ldexp(1.0, std::ilogb(want) - 23);
    ASSERT_LE(std::abs(y[i] - want), 3 * ulp) << "exp2(" << x[i] << ")";
  }
}

// Which BSHD decode items read their blocks ahead (BshdItemReadsAhead): f32
// items of several kv heads; bf16 from 4 KiB of rows per key on (Hkv 16 and
// up at d 128, not Hkv 8's 2 KiB); never int8, a single head, another
// layout, a call whose K/V fit the cache, an ISA narrower than AVX-512 or a
// head_dim the in-place micro-kernel does not take.
TEST(BshdItemReadsAheadTest, FollowsTheMeasuredRule) {
  AttentionProblem p;
  p.layout = KvLayout::kBSHD;
  p.head_dim = 128;
  p.kv_heads = 32;
  EXPECT_TRUE(BshdItemReadsAhead(p, 8, 16, true));
  EXPECT_TRUE(BshdItemReadsAhead(p, 2, 16, true));
  EXPECT_FALSE(BshdItemReadsAhead(p, 1, 16, true));
  EXPECT_FALSE(BshdItemReadsAhead(p, 8, 16, false));
  EXPECT_FALSE(BshdItemReadsAhead(p, 8, 8, true));
  p.dtype = DType::kBF16;
  EXPECT_FALSE(BshdItemReadsAhead(p, 8, 16, true));
  EXPECT_TRUE(BshdItemReadsAhead(p, 16, 16, true));
  EXPECT_TRUE(BshdItemReadsAhead(p, 32, 16, true));
  p.kv_dtype = DType::kI8;
  EXPECT_FALSE(BshdItemReadsAhead(p, 32, 16, true));
  p.kv_dtype.reset();
  p.layout = KvLayout::kBHSD;
  EXPECT_FALSE(BshdItemReadsAhead(p, 32, 16, true));
  p.layout = KvLayout::kTransposedV;
  EXPECT_FALSE(BshdItemReadsAhead(p, 32, 16, true));
  p.layout = KvLayout::kBSHD;
  p.dtype = DType::kF32;
  p.head_dim = 120;
  EXPECT_FALSE(BshdItemReadsAhead(p, 32, 16, true));
}

INSTANTIATE_TEST_SUITE_P(AllIsas, MicroKernelTest,
                         ::testing::Values(Isa::kScalar, Isa::kAvx2,
                                           Isa::kAvx512, Isa::kAvx512Bf16,
                                           Isa::kAvx512Amx),
                         [](const ::testing::TestParamInfo<Isa>& info) {
                           return std::string(IsaName(info.param));
                         });

}  // namespace
}  // namespace attnkit::simd::internal
