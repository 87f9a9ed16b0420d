// Arbitrary field values (negative, huge, products that overflow, enum values
// out of range, NaN scales) -> AttentionProblem::Validate() must never crash
// or overflow, and every problem it accepts must run: on every registered
// backend when small enough to execute, and through ToString/ParseProblem
// always. The remaining bytes are also fed to ParseProblem as text.
#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

#include "backends/registry.h"
#include "runtime/problem.h"
#include "runtime/random.h"

namespace {

using attnkit::AttentionProblem;

[[noreturn]] void Fail(const std::string& what, const AttentionProblem& p) {
  std::fprintf(stderr, "problem_validate_fuzz: %s\n  problem: %s\n",
               what.c_str(), p.ToString().c_str());
  std::abort();
}

// Mostly small values (so accepted problems are common), sometimes anything.
int64_t Field(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0:
      return in.ConsumeIntegral<int64_t>();
    case 1:
      return int64_t{1} << in.ConsumeIntegralInRange<int>(0, 62);
    default:
      return in.ConsumeIntegralInRange<int64_t>(-2, 9);
  }
}

// Work and memory limits for actually running an accepted problem: one input
// stays well under ~50 ms even on the reference.
constexpr double kMaxFlops = 4e6;
constexpr double kMaxElements = 1 << 18;

void RoundTrip(const AttentionProblem& p) {
  const std::string s = p.ToString();
  auto back = attnkit::ParseProblem(s);
  if (!back.ok())
    Fail("ToString does not parse: " + back.status().ToString(), p);
  if (back->ToString() != s) Fail("round trip changed " + s, p);
}

void RunEverywhere(const AttentionProblem& p, uint64_t seed) {
  // In double: each tensor fits int64 (Validate), but their sum may not.
  const double mq = static_cast<double>(p.max_q_len());
  const double mkv = static_cast<double>(p.max_kv_len());
  const double b = static_cast<double>(p.batch);
  const double elements =
      b *
          (static_cast<double>(p.q_heads) * mq +
           2.0 * static_cast<double>(p.kv_heads) * mkv) *
          static_cast<double>(p.head_dim) +
      (p.mask == attnkit::MaskKind::kBias
           ? b * static_cast<double>(p.q_heads) * mq * mkv
           : 0.0) +
      // Loops over (sequence, head) cost time even when lengths are 0.
      b * static_cast<double>(p.q_heads + p.kv_heads);
  if (p.Flops() > kMaxFlops || elements > kMaxElements) return;
  auto data = attnkit::AttentionData::Create(p);
  if (!data.ok())
    Fail("valid problem rejected: " + data.status().ToString(), p);
  attnkit::Rng rng(seed);
  data->Fill(p, rng);
  for (const attnkit::backends::BackendInfo& info :
       attnkit::backends::RegisteredBackends()) {
    auto backend = info.make();
    if (!backend->Supports(p).ok()) continue;
    const attnkit::Status s = backend->Attention(p, data->args());
    if (!s.ok()) Fail(std::string(info.name) + " failed: " + s.ToString(), p);
    const attnkit::TensorView& o = data->args().out;
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.q_heads; ++h)
        for (int64_t i = 0; i < p.q_lens[b]; ++i)
          for (int64_t e = 0; e < p.head_dim; ++e)
            if (!std::isfinite(o.Load(b, h, i, e))) {
              Fail(std::string(info.name) + " wrote a non-finite output", p);
            }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  AttentionProblem p;
  p.batch = Field(in);
  p.q_heads = Field(in);
  p.kv_heads = Field(in);
  p.head_dim = Field(in);
  p.q_lens.resize(in.ConsumeIntegralInRange<size_t>(0, 9));
  for (int64_t& l : p.q_lens) l = Field(in);
  p.kv_lens.resize(in.ConsumeIntegralInRange<size_t>(0, 9));
  for (int64_t& l : p.kv_lens) l = Field(in);
  p.mask = static_cast<attnkit::MaskKind>(in.ConsumeIntegralInRange<int>(0, 5));
  p.window = in.ConsumeBool() ? Field(in) : 0;
  if (in.ConsumeBool()) p.scale = in.ConsumeFloatingPoint<float>();
  p.dtype = static_cast<attnkit::DType>(in.ConsumeIntegralInRange<int>(0, 3));
  p.layout =
      static_cast<attnkit::KvLayout>(in.ConsumeIntegralInRange<int>(0, 4));
  const uint64_t seed = in.ConsumeIntegral<uint64_t>();

  const attnkit::Status s = p.Validate();
  if (s.ok()) {
    RoundTrip(p);
    if (!std::isfinite(p.Flops())) Fail("Flops() is not finite", p);
    RunEverywhere(p, seed);
  } else if (s.message().empty() ||
             s.code() != attnkit::StatusCode::kInvalidArgument) {
    Fail("rejection without an INVALID_ARGUMENT message: " + s.ToString(), p);
  }

  // The same bytes' tail as a problem string (the --repro path).
  const std::string text = in.ConsumeRemainingBytesAsString();
  auto parsed = attnkit::ParseProblem(text);
  if (parsed.ok() && parsed->Validate().ok()) RoundTrip(*parsed);
  return 0;
}
