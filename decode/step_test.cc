#include "decode/step.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "reference/concat_kv.h"
#include "reference/reference.h"
#include "runtime/random.h"

namespace attnkit::decode {
namespace {

constexpr int64_t kBatch = 2, kHeads = 4, kKvHeads = 2, kDim = 16;

AttentionProblem Shape() {
  AttentionProblem p;
  p.batch = kBatch;
  p.q_heads = kHeads;
  p.kv_heads = kKvHeads;
  p.head_dim = kDim;
  p.q_lens.assign(kBatch, 1);
  p.kv_lens.assign(kBatch, 1);
  return p;
}

// One step's inputs for `layers` layers, drawn from `seed`.
struct Inputs {
  std::vector<Tensor> q, k, v, out;
  std::vector<LayerStep> steps;
  Inputs(int64_t layers, int64_t new_tokens, uint64_t seed) {
    Rng rng(seed, 0);
    for (int64_t l = 0; l < layers; ++l) {
      q.push_back(Tensor::Contiguous(DType::kF32, {kBatch, kHeads, 1, kDim}));
      k.push_back(Tensor::Contiguous(DType::kF32,
                                     {kBatch, kKvHeads, new_tokens, kDim}));
      v.push_back(Tensor::Contiguous(DType::kF32,
                                     {kBatch, kKvHeads, new_tokens, kDim}));
      out.push_back(Tensor::Contiguous(DType::kF32, {kBatch, kHeads, 1, kDim}));
      FillNormal(q.back().view, rng);
      FillNormal(k.back().view, rng);
      FillNormal(v.back().view, rng);
    }
    for (int64_t l = 0; l < layers; ++l) {
      steps.push_back({q[l].view, k[l].view, v[l].view, {}, out[l].view});
    }
  }
};

KvCache MakeCache(int64_t layers, KvLayout layout) {
  KvCacheConfig c;
  c.layers = layers;
  c.batch = kBatch;
  c.kv_heads = kKvHeads;
  c.head_dim = kDim;
  c.capacity = 64;
  c.layout = layout;
  return std::move(KvCache::Create(c)).value();
}

// The same ragged steps in place (every layout) and naive give the same
// outputs bit for bit on the reference backend, the cache holds what the
// concatenation holds, and the in-place step copies exactly the new tokens.
TEST(StepperTest, InPlaceAndNaiveAgreeAndInPlaceCopiesOnlyTheNewTokens) {
  const int64_t layers = 2;
  for (KvLayout layout :
       {KvLayout::kBHSD, KvLayout::kBSHD, KvLayout::kTransposedV}) {
    auto backend = reference::MakeReferenceBackend();
    KvCache cache = MakeCache(layers, layout);
    std::vector<reference::ConcatKv> concat;
    for (int64_t l = 0; l < layers; ++l) {
      concat.emplace_back(kBatch, kKvHeads, kDim, DType::kF32);
    }
    Stepper in_place = Stepper::InPlace(*backend, cache);
    Stepper naive = Stepper::Naive(*backend, concat, Shape());
    // A ragged prompt (5 and 3 tokens), then two one-token steps.
    const std::vector<std::vector<int64_t>> new_lens = {{5, 3}, {1, 1}, {1, 1}};
    for (size_t s = 0; s < new_lens.size(); ++s) {
      Inputs a(layers, 5, 100 + s), b(layers, 5, 100 + s);
      AttentionProblem pa = Shape(), pb = Shape();
      StepRecord ra, rb;
      ASSERT_TRUE(in_place.Step(pa, a.steps, new_lens[s], &ra).ok());
      ASSERT_TRUE(naive.Step(pb, b.steps, new_lens[s], &rb).ok());
      EXPECT_EQ(pa.layout, layout);
      EXPECT_EQ(pa.kv_lens,
                (std::vector<int64_t>{in_place.length(0), in_place.length(1)}));
      for (int64_t l = 0; l < layers; ++l) {
        EXPECT_EQ(std::memcmp(a.out[l].view.data, b.out[l].view.data,
                              a.out[l].buffer.size()),
                  0)
            << "layer " << l << " step " << s;
      }
      // K and V of every new token of every layer and sequence, nothing else.
      EXPECT_EQ(ra.bytes_copied, 2 * layers * kKvHeads * kDim * 4 *
                                     (new_lens[s][0] + new_lens[s][1]));
      // The naive update re-copies the context (none before the first step).
      if (s > 0) {
        EXPECT_GT(rb.bytes_copied, ra.bytes_copied);
      }
      EXPECT_EQ(ra.kv_len, std::max(in_place.length(0), in_place.length(1)));
      EXPECT_GT(ra.step_us, 0);
    }
    EXPECT_EQ(in_place.length(0), 7);
    EXPECT_EQ(in_place.length(1), 5);
    EXPECT_EQ(naive.length(0), 7);
  }
}

TEST(StepperTest, MismatchedArgumentsAreNamed) {
  auto backend = reference::MakeReferenceBackend();
  KvCache cache = MakeCache(2, KvLayout::kBHSD);
  Stepper stepper = Stepper::InPlace(*backend, cache);
  Inputs one_layer(1, 1, 1);
  AttentionProblem p = Shape();
  const std::vector<int64_t> one{1, 1};
  Status s = stepper.Step(p, one_layer.steps, one, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("layers=1, expected the model's layers=2"),
            std::string::npos)
      << s.ToString();

  Inputs two(2, 1, 1);
  s = stepper.Step(p, two.steps, std::vector<int64_t>{1}, nullptr);
  EXPECT_NE(s.message().find("new_lens.size()=1, expected batch=2"),
            std::string::npos)
      << s.ToString();
  p.batch = 3;
  s = stepper.Step(p, two.steps, one, nullptr);
  EXPECT_NE(s.message().find("problem.batch=3"), std::string::npos)
      << s.ToString();
}

// A backend error says in which layer and phase it happened; an append past
// the capacity is refused by the cache before anything is written.
TEST(StepperTest, ErrorsNameTheLayerAndPhase) {
  auto backend = reference::MakeReferenceBackend();
  KvCache cache = MakeCache(2, KvLayout::kBHSD);
  Stepper stepper = Stepper::InPlace(*backend, cache);
  Inputs in(2, 65, 1);
  AttentionProblem p = Shape();
  const std::vector<int64_t> too_many{65, 1};
  Status s = stepper.Step(p, in.steps, too_many, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_EQ(s.message().rfind("layer 0 append: ", 0), 0u) << s.ToString();
  EXPECT_EQ(stepper.length(0), 0);

  // Attention with a head count the inputs do not have.
  const std::vector<int64_t> one{1, 1};
  p.q_heads = 8;
  s = stepper.Step(p, in.steps, one, nullptr);
  EXPECT_EQ(s.message().rfind("layer 0 attention: ", 0), 0u) << s.ToString();
}

// With the workspace reserved, an in-place step allocates nothing; the
// naive one allocates per layer and sequence.
TEST(StepperTest, InPlaceStepsDoNotAllocate) {
  ASSERT_TRUE(accounting::AllocHooksInstalled());
  auto backend = reference::MakeReferenceBackend();
  KvCache cache = MakeCache(2, KvLayout::kBSHD);
  Stepper stepper = Stepper::InPlace(*backend, cache);
  AttentionProblem largest = Shape();
  largest.kv_lens.assign(kBatch, 64);
  ASSERT_TRUE(backend->ReserveWorkspace(largest).ok());
  Inputs in(2, 1, 3);
  AttentionProblem p = Shape();
  const std::vector<int64_t> one{1, 1};
  accounting::Meter since;
  for (int s = 0; s < 4; ++s) {
    StepRecord r;
    ASSERT_TRUE(stepper.Step(p, in.steps, one, &r, &since).ok());
    EXPECT_EQ(r.allocs, 0) << "step " << s;
    EXPECT_EQ(r.append_allocs, 0);
    EXPECT_GE(r.peak_bytes, 0);
  }

  std::vector<reference::ConcatKv> concat;
  concat.emplace_back(kBatch, kKvHeads, kDim, DType::kF32);
  concat.emplace_back(kBatch, kKvHeads, kDim, DType::kF32);
  Stepper naive = Stepper::Naive(*backend, concat, Shape());
  StepRecord r;
  ASSERT_TRUE(naive.Step(p, in.steps, one, &r).ok());
  EXPECT_GE(r.append_allocs, 2 * kBatch);
  EXPECT_GT(r.peak_bytes, 0);
}

}  // namespace
}  // namespace attnkit::decode
