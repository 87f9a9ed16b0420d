// Quick, non-gating timing of the compiled backend against the Eigen
// reference (medians of a few runs); the real benchmarks live in bench/.
//   compiled_perf [q_heads kv_heads head_dim seq mask(none|causal) dtype]
#include "compiled/compiled_backend.h"
#include "reference/reference.h"
#include "runtime/random.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace attnkit;

static double medianMs(Backend &b, const AttentionProblem &p,
                       const AttentionArgs &a, int reps) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    auto s = std::chrono::steady_clock::now();
    if (!b.Attention(p, a).ok())
      std::abort();
    t.push_back(std::chrono::duration<double, std::milli>(
                    std::chrono::steady_clock::now() - s)
                    .count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int main(int argc, char **argv) {
  AttentionProblem p;
  p.q_heads = argc > 1 ? std::atoi(argv[1]) : 8;
  p.kv_heads = argc > 2 ? std::atoi(argv[2]) : 2;
  p.head_dim = argc > 3 ? std::atoi(argv[3]) : 128;
  const int64_t s = argc > 4 ? std::atoi(argv[4]) : 1024;
  p.mask = (argc > 5 && std::string(argv[5]) == "none") ? MaskKind::kNone
                                                        : MaskKind::kCausal;
  p.dtype =
      (argc > 6 && std::string(argv[6]) == "bf16") ? DType::kBF16 : DType::kF32;
  const int64_t q = argc > 7 ? std::atoi(argv[7]) : s;
  p.q_lens = {q};
  p.kv_lens = {s};
  auto data = AttentionData::Create(p);
  Rng rng(1);
  data->Fill(p, rng);
  auto compiled = compiled::MakeCompiledBackend();
  auto t0 = std::chrono::steady_clock::now();
  if (!compiled->Attention(p, data->args()).ok())
    return 1;
  double firstMs = std::chrono::duration<double, std::milli>(
                       std::chrono::steady_clock::now() - t0)
                       .count();
  double c = medianMs(*compiled, p, data->args(), 5);
  auto ref = reference::MakeReferenceBackend();
  double r = medianMs(*ref, p, data->args(), 3);
  std::printf("%s\n  first call (incl. JIT) %.1f ms; compiled %.2f ms "
              "(%.1f GFLOP/s); reference %.2f ms; speedup %.2fx\n",
              p.ToString().c_str(), firstMs, c, p.Flops() / c / 1e6, r, r / c);
  return 0;
}
