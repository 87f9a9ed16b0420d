// The main job's command line. `check` runs every registered backend against
// the f64 oracle over a seeded sweep of shapes and prints one row per backend.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "reference/oracle.h"
#include "runtime/backend.h"
#include "runtime/random.h"

namespace attnkit {
namespace {

// One sweep case from (seed, index): every mask, dtype and layout, ragged
// lengths including 0 and 1, GQA ratios 1/2/4, odd head dims.
AttentionProblem SweepCase(uint64_t seed, uint64_t index) {
  Rng r(seed, index);
  AttentionProblem p;
  p.batch = r.Range(1, 3);
  p.kv_heads = r.Range(1, 2);
  p.q_heads = p.kv_heads * (int64_t{1} << r.Range(0, 2));
  p.head_dim = std::vector<int64_t>{1, 7, 16, 33, 64, 80, 128}[r.Below(7)];
  p.mask = static_cast<MaskKind>(index % 4);
  p.dtype = static_cast<DType>((index / 4) % 2);
  p.layout = static_cast<KvLayout>((index / 8) % 3);
  if (p.mask == MaskKind::kWindow) p.window = r.Range(1, 40);
  p.q_lens.clear();
  p.kv_lens.clear();
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t kv = r.Bernoulli(0.1) ? r.Range(0, 1) : r.Range(0, 200);
    p.kv_lens.push_back(kv);
    p.q_lens.push_back(r.Bernoulli(0.4) ? std::min<int64_t>(kv, 1)
                                        : r.Range(0, kv));
  }
  return p;
}

struct Row {
  std::string backend;
  int cases = 0, failures = 0, skipped = 0;
  double worst_err = 0;
};

int Check(int argc, char** argv) {
  uint64_t seed = 1;
  int cases = 96;
  for (int i = 0; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--cases" && i + 1 < argc) {
      cases = std::atoi(argv[++i]);
    } else if (a == "--help") {
      std::printf("usage: attnkit check [--seed N] [--cases N]\n");
      return 0;
    } else {
      std::fprintf(stderr, "check: unknown argument '%s'\n", argv[i]);
      return 2;
    }
  }
  std::vector<Row> rows;
  for (const BackendInfo& info : RegisteredBackends()) {
    Row row{std::string(info.name)};
    auto backend = info.make();
    for (int c = 0; c < cases; ++c) {
      const AttentionProblem p = SweepCase(seed, static_cast<uint64_t>(c));
      if (!backend->Supports(p).ok()) {
        ++row.skipped;
        continue;
      }
      auto data = AttentionData::Create(p);
      if (!data.ok()) {
        std::fprintf(stderr, "%s\n", data.status().ToString().c_str());
        return 2;
      }
      Rng values(seed, 1000003 + static_cast<uint64_t>(c));
      data->Fill(p, values);
      std::vector<double> truth;
      const Status os = reference::OracleAttention(p, data->args(), &truth);
      const Status bs = backend->Attention(p, data->args());
      ++row.cases;
      double worst = 0;
      bool ok = os.ok() && bs.ok();
      const TensorView& o = data->args().out;
      for (int64_t b = 0; ok && b < p.batch; ++b)
        for (int64_t h = 0; h < p.q_heads; ++h)
          for (int64_t i = 0; i < p.q_lens[b]; ++i)
            for (int64_t e = 0; e < p.head_dim; ++e) {
              const double t =
                  truth[((b * p.q_heads + h) * p.max_q_len() + i) * p.head_dim +
                        e];
              const double g = o.Load(b, h, i, e);
              const double err = std::fabs(g - t) / std::max(1.0, std::fabs(t));
              if (std::isnan(g) != std::isnan(t)) ok = false;
              if (!std::isnan(err)) worst = std::max(worst, err);
            }
      // bf16 inputs are exact in the oracle too, so both dtypes share the f32
      // rounding bound: 1e-4 relative is 10x the reference's worst here.
      if (worst > 1e-4) ok = false;
      row.worst_err = std::max(row.worst_err, worst);
      if (!ok) {
        ++row.failures;
        std::printf("FAIL %s: ./attnkit check --repro '%s' (%s)\n",
                    row.backend.c_str(), p.ToString().c_str(),
                    bs.ok() ? "error beyond tolerance" : bs.ToString().c_str());
      }
    }
    rows.push_back(row);
  }
  std::printf("%-12s %8s %8s %8s %14s\n", "backend", "cases", "failures",
              "skipped", "worst rel err");
  int failures = 0;
  for (const Row& r : rows) {
    std::printf("%-12s %8d %8d %8d %14.3g\n", r.backend.c_str(), r.cases,
                r.failures, r.skipped, r.worst_err);
    failures += r.failures;
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace attnkit

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "help") == 0) {
    std::printf("usage: attnkit_cli check [flags]\n");
    return argc < 2 ? 2 : 0;
  }
  if (std::strcmp(argv[1], "check") == 0) {
    return attnkit::Check(argc - 2, argv + 2);
  }
  std::fprintf(stderr, "attnkit_cli: unknown command '%s'\n", argv[1]);
  return 2;
}
