// Quick, non-gating timing of the compiled backend against the Eigen
// reference; the real benchmarks live in bench/.
//   compiled_perf [q_heads kv_heads head_dim kv_len mask(none|causal) dtype
//                  q_len reps]
// Compiled and reference runs are interleaved and reported as medians, both
// in wall time and in process CPU time: on this shared 2-core machine the
// wall time depends on the other engineers' load, the CPU time much less, so
// "GFLOP per CPU-second" over the per-core FMA peak (~117 GFLOP/s) is the
// load-independent efficiency figure.
#include "compiled/compiled_backend.h"
#include "reference/reference.h"
#include "runtime/backend.h"
#include "runtime/random.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

using namespace attnkit;

namespace {

double cpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct Timing {
  std::vector<double> wallMs, cpuMs;
  void add(double w, double c) {
    wallMs.push_back(w);
    cpuMs.push_back(c);
  }
  static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  }
  static double min(const std::vector<double> &v) {
    return *std::min_element(v.begin(), v.end());
  }
};

void timeOnce(Backend &b, const AttentionProblem &p, const AttentionArgs &a,
              Timing &t) {
  const double c0 = cpuSeconds();
  auto s = std::chrono::steady_clock::now();
  if (!b.Attention(p, a).ok())
    std::abort();
  const double wall = std::chrono::duration<double, std::milli>(
                          std::chrono::steady_clock::now() - s)
                          .count();
  t.add(wall, (cpuSeconds() - c0) * 1e3);
}

} // namespace

/// `compiled_perf jit N`: compiles N specializations at LLVM -O2 and -O3,
/// alternating, each in a fresh cache; prints median wall and CPU ms.
int jitMode(int n) {
  std::vector<double> wall[2], cpu[2];
  const MaskKind masks[] = {MaskKind::kNone, MaskKind::kCausal};
  for (int i = 0; i < n; ++i)
    for (int o = 0; o < 2; ++o) {
      compiled::CompileOptions opts;
      opts.llvmOptLevel = o == 0 ? 2 : 3;
      opts.useAot = false; // measure the JIT, also for the AOT'd specs
      compiled::KernelCache cache(opts);
      compiled::KernelSpec spec;
      spec.headDim = i % 2 ? 128 : 64;
      spec.mask = masks[(i / 2) % 2];
      spec.group = 4;
      spec.queryTile = (i / 4) % 2 ? 1 : 16;
      std::string err;
      const compiled::CompiledKernel *k = cache.get(spec, err);
      if (!k) {
        std::fprintf(stderr, "%s\n", err.c_str());
        return 1;
      }
      wall[o].push_back(k->compileMillis());
      cpu[o].push_back(k->phases().cpuMillis);
    }
  for (int o = 0; o < 2; ++o)
    std::printf("LLVM -O%d: JIT compile median %.0f ms wall, %.0f ms CPU "
                "(%d kernels)\n",
                o == 0 ? 2 : 3, Timing::median(wall[o]), Timing::median(cpu[o]),
                n);
  return 0;
}

/// `compiled_perf append LAYOUT DTYPE TOKENS`: one KV append into a
/// 8-head, head_dim-128 cache of capacity 16384, compiled vs the portable
/// AppendKvStrided (interleaved medians of 21).
int appendMode(KvLayout layout, DType dtype, int64_t tokens) {
  const std::array<int64_t, 4> cache{1, 8, 16384, 128},
      fresh{1, 8, tokens, 128};
  Tensor kc = Tensor::Allocate(dtype, cache, KvStrides(layout, false, cache));
  Tensor vc = Tensor::Allocate(dtype, cache, KvStrides(layout, true, cache));
  Tensor nk = Tensor::Contiguous(dtype, fresh),
         nv = Tensor::Contiguous(dtype, fresh);
  Rng rng(3);
  FillNormal(nk.view, rng);
  FillNormal(nv.view, rng);
  const std::vector<int64_t> pos{4096}, lens{tokens};
  KvAppendArgs a{kc.view, vc.view, nk.view, nv.view, pos, lens};
  auto backend = compiled::MakeCompiledBackend();
  if (!backend->AppendKv(a).ok())
    return 1;
  std::vector<double> c, r;
  for (int i = 0; i < 21; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    if (!backend->AppendKv(a).ok())
      return 1;
    auto t1 = std::chrono::steady_clock::now();
    AppendKvStrided(a);
    auto t2 = std::chrono::steady_clock::now();
    c.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    r.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
  }
  std::printf("append %s %s %lld token(s): compiled %.1f us, "
              "AppendKvStrided %.1f us (medians of 21, interleaved): %.2fx\n",
              std::string(KvLayoutName(layout)).c_str(),
              std::string(DTypeName(dtype)).c_str(),
              static_cast<long long>(tokens), Timing::median(c),
              Timing::median(r), Timing::median(r) / Timing::median(c));
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 4 && std::string(argv[1]) == "append")
    return appendMode(*ParseKvLayout(argv[2]),
                      std::string(argv[3]) == "bf16" ? DType::kBF16
                                                     : DType::kF32,
                      std::atoi(argv[4]));
  if (argc > 1 && std::string(argv[1]) == "jit")
    return jitMode(argc > 2 ? std::atoi(argv[2]) : 8);
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
  const int reps = argc > 8 ? std::atoi(argv[8]) : 5;
  p.q_lens = {q};
  p.kv_lens = {s};
  auto data = AttentionData::Create(p);
  Rng rng(1);
  data->Fill(p, rng);
  auto compiled = compiled::MakeCompiledBackend();
  auto ref = reference::MakeReferenceBackend();
  auto t0 = std::chrono::steady_clock::now();
  if (!compiled->Attention(p, data->args()).ok())
    return 1;
  const double firstMs = std::chrono::duration<double, std::milli>(
                             std::chrono::steady_clock::now() - t0)
                             .count();
  Timing c, r;
  for (int i = 0; i < reps; ++i) {
    timeOnce(*compiled, p, data->args(), c);
    timeOnce(*ref, p, data->args(), r);
  }
  const double cw = Timing::median(c.wallMs), cc = Timing::median(c.cpuMs);
  const double rw = Timing::median(r.wallMs), rc = Timing::median(r.cpuMs);
  const double gflop = p.Flops() / 1e9;
  const double kvBytes = static_cast<double>(p.batch) * p.kv_heads * s *
                         p.head_dim * 2 * DTypeSize(p.dtype);
  std::printf("%s  threads=%d\n", p.ToString().c_str(), omp_get_max_threads());
  std::printf("  first call (incl. JIT) %.0f ms\n", firstMs);
  {
    std::string err;
    const compiled::CompiledKernel *k =
        compiled::globalKernelCache().get(compiled::specFor(p), err);
    if (k)
      std::printf("  JIT %s: %.0f ms wall, %.0f ms CPU (wall: build %.0f, "
                  "MLIR passes %.0f, LLVM %.0f of which opt+codegen %.0f)\n",
                  k->spec().key().c_str(), k->compileMillis(),
                  k->phases().cpuMillis, k->phases().buildMillis,
                  k->phases().mlirMillis, k->phases().llvmMillis,
                  k->phases().codegenMillis);
  }
  std::printf("  compiled  wall %8.2f ms  cpu %8.2f ms  %6.1f GFLOP/s wall  "
              "%6.1f GFLOP/cpu-s  K+V %5.1f GB/s wall\n",
              cw, cc, gflop / cw * 1e3, gflop / cc * 1e3, kvBytes / cw / 1e6);
  // Best of the runs: the least-disturbed one, the closest to what the kernel
  // does on an idle machine (bandwidth-bound decode is hit hardest by load).
  const double cMin = Timing::min(c.wallMs), rMin = Timing::min(r.wallMs);
  std::printf("  compiled  best wall %8.2f ms  %6.1f GFLOP/s  K+V %5.1f GB/s\n",
              cMin, gflop / cMin * 1e3, kvBytes / cMin / 1e6);
  std::printf("  reference wall %8.2f ms  cpu %8.2f ms  best wall %8.2f ms\n",
              rw, rc, rMin);
  std::printf("  speedup vs reference: wall %.2fx  cpu %.2fx  (medians of %d, "
              "interleaved)\n",
              rw / cw, rc / cc, reps);
  std::printf("  speedup vs reference, best runs: %.2fx\n", rMin / cMin);
  return 0;
}
