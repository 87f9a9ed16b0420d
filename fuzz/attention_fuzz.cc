// FuzzedDataProvider -> a differential-test case (problem, value profile,
// padding, decode steps, q/out layouts, shared bias) -> every registered
// backend against the f64 oracle with the harness's tolerance model
// (harness/runner.h). A mismatch, a NaN/Inf the oracle does not have, a stray
// write, a KV-cache difference or an error on a supported problem aborts with
// the harness's one-line reproducer.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "backends/registry.h"
#include "harness/case.h"
#include "harness/report.h"
#include "harness/runner.h"

namespace {

using attnkit::harness::Case;

// Sizes are capped first so one input stays around ~50 ms on the reference
// and the f64 oracle (O(batch * heads * q * kv * d) scalar work). head_dim is
// drawn from a small set because the compiled backend JIT-compiles once per
// (head_dim, dtype, mask, layout, group): a few hundred kernels at most.
constexpr int64_t kHeadDims[] = {1, 3, 8, 16, 17, 33, 64, 80, 128};

Case MakeCase(FuzzedDataProvider& in) {
  Case c;
  c.seed = in.ConsumeIntegral<uint32_t>();
  c.index = in.ConsumeIntegral<uint16_t>();
  attnkit::AttentionProblem& p = c.problem;
  p.batch = in.ConsumeIntegralInRange<int64_t>(1, 3);
  p.kv_heads = in.ConsumeIntegralInRange<int64_t>(1, 2);
  // Every group size 1..8, not just powers of two: group 3 once broke the
  // compiled prefill kernel while 1, 2, 4 and 8 passed.
  p.q_heads = p.kv_heads * in.ConsumeIntegralInRange<int64_t>(1, 8);
  p.head_dim =
      kHeadDims[in.ConsumeIntegralInRange<size_t>(0, std::size(kHeadDims) - 1)];
  // An index into each enum's table (the byte-to-value mapping of the seed
  // corpus: the tables list the values in order).
  auto pick = [&](const auto& table) {
    return table[in.ConsumeIntegralInRange<size_t>(0, table.size() - 1)].value;
  };
  p.mask = pick(attnkit::kMaskKindNames);
  if (p.mask == attnkit::MaskKind::kWindow) {
    p.window = in.ConsumeIntegralInRange<int64_t>(1, 70);
  }
  p.dtype = in.ConsumeBool() ? attnkit::DType::kBF16 : attnkit::DType::kF32;
  p.layout = pick(attnkit::kKvLayoutNames);
  if (in.ConsumeBool())
    p.scale = in.ConsumeFloatingPointInRange<float>(-4.0f, 4.0f);
  c.profile = pick(attnkit::kValueProfileNames);
  c.kv_pad = in.ConsumeIntegralInRange<int64_t>(0, 3);
  c.decode_steps =
      in.ConsumeBool() ? in.ConsumeIntegralInRange<int64_t>(1, 3) : 0;
  p.q_lens.clear();
  p.kv_lens.clear();
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t kv = in.ConsumeIntegralInRange<int64_t>(0, 80);
    p.kv_lens.push_back(kv);
    p.q_lens.push_back(
        in.ConsumeIntegralInRange<int64_t>(0, std::min<int64_t>(kv, 24)));
  }
  // Drawn last, so the corpus's older inputs (no bytes left by here: false
  // and 0) keep meaning the cases they did: where q and out lie, and a bias
  // shared by every head.
  for (attnkit::RowLayout* l : {&c.io.q, &c.io.out}) {
    l->token_major = in.ConsumeBool();
    l->pad = in.ConsumeIntegralInRange<int64_t>(0, 9);
  }
  c.io.shared_bias = p.mask == attnkit::MaskKind::kBias && in.ConsumeBool();
  // Drawn last for the same reason: a quantized (i8) K/V cache.
  if (in.ConsumeBool()) p.kv_dtype = attnkit::DType::kI8;
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static std::vector<std::unique_ptr<attnkit::Backend>>* owned = [] {
    auto* v = new std::vector<std::unique_ptr<attnkit::Backend>>();
    for (const auto& info : attnkit::backends::RegisteredBackends()) {
      v->push_back(info.make());
    }
    return v;
  }();
  std::vector<attnkit::Backend*> backends;
  for (auto& b : *owned) backends.push_back(b.get());

  FuzzedDataProvider in(data, size);
  const Case c = MakeCase(in);
  // Invalid combinations (scale 0, decode steps longer than the context...)
  // are problem_validate_fuzz's subject; here only valid cases run.
  if (!attnkit::harness::ValidateCase(c).ok()) return 0;
  auto results = attnkit::harness::RunCase(c, backends);
  if (!results.ok()) {
    std::fprintf(stderr, "attention_fuzz: valid case rejected: %s\n  %s\n",
                 results.status().ToString().c_str(), c.ToString().c_str());
    std::abort();
  }
  for (const auto& r : *results) {
    if (!r.failed()) continue;
    std::fprintf(stderr, "attention_fuzz: %s\n%s\n",
                 attnkit::harness::FormatResult(c, r).c_str(),
                 attnkit::harness::ReproducerCommand(c, r.backend).c_str());
    std::abort();
  }
  return 0;
}
