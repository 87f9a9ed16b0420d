// attnkit_bench: Google Benchmark suites over every registered backend
// (backends/backends.inc) and every --plugin, plus the machine calibration
// the %peak figures divide by. A backend added to the registry is
// benchmarked at once; a plug-in's benchmarks are named like a built-in
// backend's (prefill/<its name>/...).
//
//   calibration/fma/threads:N       FP32 FMA peak (GFLOPS)
//   calibration/read_bw/threads:N   memory read bandwidth (GBps)
//   prefill/<backend>/S:../d:../causal:../hkv:..      (hq 32, batch 1)
//   prefill_paired/<backend>/S:2048/d:128/causal:../hkv:.. prefill vs an
//                                                      adjacent FMA loop,
//                                                      per round
//   decode/<backend>/kv_len:../bf16:../batch:..       (hq 32, hkv 8, d 128)
//   decode_paired/<backend>/kv_len:../bf16:../batch:.. decode vs an adjacent
//                                                      read pass, per round
//   decode_step/<backend>/len:../inplace:..           KV update + attention
//   first_call/<backend>/q:../kv_len:../d:..          first call vs warmed
//
// Flags (runtime/flags.h; everything else goes to Google Benchmark, which
// rejects what it does not know): --attnkit_quick selects the reduced grid
// `./attnkit bench --quick` runs; --plugin lib.so (repeatable) adds a kernel
// loaded through plugin/attnkit_plugin.h, resolved by the registry as check
// and decode do.
#include <benchmark/benchmark.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "backends/registry.h"
#include "bench/calibration.h"
#include "bench/decode_bandwidth.h"
#include "bench/output_check.h"
#include "bench/prefill_paired.h"
#include "bench/run_data.h"
#include "decode/step.h"
#include "reference/attention_block.h"
#include "reference/concat_kv.h"
#include "runtime/accounting.h"
#include "runtime/attention_block.h"
#include "runtime/flags.h"
#include "runtime/kv_cache.h"
#include "runtime/problem.h"
#include "runtime/random.h"
#include "runtime/stats.h"
#include "simd/attention_block.h"

namespace attnkit::bench {
namespace {

using backends::BackendSource;

bool g_quick = false;

// The backends benchmarked: backends::ResolveBackends(--plugin...), i.e.
// every registered one, then the plug-ins. Filled once in main, before
// RegisterAll; the benchmarks keep pointers into it.
std::vector<BackendSource>& Sources() {
  static std::vector<BackendSource> sources;
  return sources;
}

// A backend with the quadratic_prefill trait (the reference) materializes
// S = QK^T per head: at S 4096, hq 32 one call is ~275 GFLOP of
// single-threaded Eigen plus 512M exp()s -- tens of seconds a call on a
// 2-core AMD EPYC Zen 5 family 26, GCC 12.2, 2026-11-21. Above
// this length only the other backends run prefill; in the --quick grid above
// 512 (its S 2048 rows, f32 and bf16, took ~5 of a quick run's ~25 min;
// 2-core Intel Xeon under KVM, GCC 12.2, 2026-11-27).
constexpr int64_t kQuadraticPrefillMaxS = 2048;
constexpr int64_t kQuadraticPrefillQuickMaxS = 512;
int64_t QuadraticPrefillMaxS() {
  return g_quick ? kQuadraticPrefillQuickMaxS : kQuadraticPrefillMaxS;
}

std::vector<std::string>& SkipLog() {
  static std::vector<std::string> log;
  return log;
}

void Skip(const std::string& name, const std::string& why) {
  SkipLog().push_back(name + ": " + why);
}

// One instance per backend for the whole process: backends cache compiled
// kernels and workspaces per shape, as they would in a serving process.
// RegisterAll makes each first (and skips a backend whose factory fails), so
// the benchmarks always find theirs.
StatusOr<Backend*> MakeSharedBackend(const BackendSource& source) {
  static std::map<std::string, std::unique_ptr<Backend>, std::less<>> all;
  auto it = all.find(source.name);
  if (it == all.end()) {
    ATTNKIT_ASSIGN_OR_RETURN(std::unique_ptr<Backend> b, source.make());
    it = all.emplace(source.name, std::move(b)).first;
  }
  return it->second.get();
}
Backend& SharedBackend(const BackendSource& source) {
  return **MakeSharedBackend(source);
}

// The inputs of the problems benchmarked lately, most recently used first,
// within a memory budget. Random interleaving switches the problem on almost
// every run (and Google Benchmark calls a function several times per run to
// find the iteration count), so a cache of one problem rebuilt the inputs --
// up to 1 GiB of K/V for a decode -- nearly every time: in the quick grid's
// simd rows 11% of the process's samples were the kernel zeroing fresh pages
// for them. Kept, the quick grid's decode/ and decode_kv/ simd rows took
// 0.92x the wall time and 0.85x the user CPU time (4 interleaved runs each,
// medians 54.0 vs 58.4 s; 2-core Intel Xeon under KVM, GCC 12.2,
// 2026-11-28). Every user only reads them (a backend writes args.out only),
// so sharing is safe.
struct Inputs {
  std::string key;
  std::unique_ptr<AttentionData> data;
  size_t bytes = 0;
};

// A quarter of the physical memory, at most 4 GiB (the f32 decode at kv 32k,
// batch 4 alone has 1 GiB of K/V; the newest problem is kept even when it
// alone is more).
size_t InputCacheBudget() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  const size_t phys = pages > 0 && page > 0 ? static_cast<size_t>(pages) *
                                                  static_cast<size_t>(page)
                                            : size_t{0};
  return std::min(phys / 4, size_t{4} << 30);
}

StatusOr<const AttentionArgs*> InputsFor(const AttentionProblem& p) {
  static std::list<Inputs> cache;
  static size_t total = 0;
  static const size_t budget = InputCacheBudget();
  const std::string key = p.ToString();
  for (auto it = cache.begin(); it != cache.end(); ++it) {
    if (it->key == key) {
      cache.splice(cache.begin(), cache, it);
      return &cache.front().data->args();
    }
  }
  ATTNKIT_ASSIGN_OR_RETURN(AttentionData d, AttentionData::Create(p));
  Inputs in;
  in.key = key;
  in.data = std::make_unique<AttentionData>(std::move(d));
  const AttentionArgs& a = in.data->args();
  for (const TensorView* t :
       {&a.q, &a.k, &a.v, &a.out, &a.bias, &a.k_scale, &a.v_scale}) {
    in.bytes += SpanBytes(t->shape, t->strides, t->dtype);  // 0 when absent
  }
  // Free the least recently used before filling the new inputs.
  while (!cache.empty() && total + in.bytes > budget) {
    total -= cache.back().bytes;
    cache.pop_back();
  }
  FillFromPool(a.q, 1);
  if (p.quantized_kv()) {
    // The pool's values in f32, quantized into the i8 K/V and their
    // scales by the one rule (as an i8 cache's append stores them).
    for (const auto& [t, scales, salt] :
         {std::tuple{&a.k, &a.k_scale, 2}, std::tuple{&a.v, &a.v_scale, 3}}) {
      Tensor values = Tensor::Contiguous(DType::kF32, t->shape);
      FillFromPool(values.view, static_cast<uint64_t>(salt));
      QuantizeRows(values.view, *t, *scales);
    }
  } else {
    FillFromPool(a.k, 2);
    FillFromPool(a.v, 3);
  }
  total += in.bytes;
  cache.push_front(std::move(in));
  return &cache.front().data->args();
}

// The first run of each (benchmark, problem) calls the backend once untimed
// (warm-up: JIT compile, workspace sizing) and checks that output against the
// oracle; the verdict is remembered for later repetitions. args must be
// InputsFor(p)'s: the oracle's results are kept per problem (TruthCache) for
// the other backends and benchmarks of it.
Status WarmAndCheck(const std::string& id, Backend& backend,
                    const AttentionProblem& p, const AttentionArgs& args) {
  static std::map<std::string, Status> verdicts;
  static TruthCache truths;
  auto it = verdicts.find(id);
  if (it != verdicts.end()) return it->second;
  Status s = backend.Attention(p, args);
  if (s.ok()) s = CheckAgainstOracle(p, args, 4, kFullCheckWork, &truths);
  verdicts.emplace(id, s);
  return s;
}

void SetError(benchmark::State& state, const Status& s) {
  state.SkipWithError(s.ToString().c_str());
}

double PctOf(double rate, double peak) { return 100.0 * rate / peak; }

// ---------------------------------------------------------------- calibration

void BM_Fma(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  double flops = 0;
  // 2^20 rounds: ~2 ms a call (2-core AMD EPYC Zen 5 family 26, GCC 12.2,
  // 2026-11-21), long against an OpenMP wake-up.
  for (auto _ : state) flops += RunFmaChains(1 << 20, threads);
  state.counters["GFLOPS"] =
      benchmark::Counter(flops / 1e9, benchmark::Counter::kIsRate);
}

void BM_ReadBandwidth(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  size_t n = 0;
  const float* data = ReadBuffer(threads, &n);
  const size_t bytes = n * sizeof(float);
  for (auto _ : state) {
    benchmark::DoNotOptimize(SumFloats(data, n, threads));
  }
  state.counters["GBps"] =
      benchmark::Counter(static_cast<double>(bytes) *
                             static_cast<double>(state.iterations()) / 1e9,
                         benchmark::Counter::kIsRate);
}

// -------------------------------------------------------------------- kernels

// Bytes one decode call streams: K and V of every visible key (an i8
// cache's rows and their f32 scales: the bytes actually read), plus q and
// out (negligible).
double DecodeBytes(const AttentionProblem& p) {
  double bytes = 0;
  const double d = static_cast<double>(p.head_dim);
  const double esize = static_cast<double>(DTypeSize(p.dtype));
  const double kv_row = d * static_cast<double>(DTypeSize(p.KvDType())) +
                        (p.quantized_kv() ? 4.0 : 0.0);
  for (int64_t b = 0; b < p.batch; ++b) {
    bytes += 2.0 * static_cast<double>(p.kv_heads * p.kv_lens[b]) * kv_row +
             static_cast<double>(p.q_heads * p.q_lens[b]) * d * (esize + 4.0);
  }
  return bytes;
}

// A memory-bound benchmark's pct_peak divides by the read bandwidth, which
// main measures only when it selects such a benchmark (NeedsReadBandwidth):
// a benchmark it misjudged fails loudly instead of reporting NaN.
Status CheckReadCalibration(const Calibration& cal) {
  if (!std::isnan(cal.read_gbps_all)) return Status::Ok();
  return Status::Internal(
      "calib_read_gbps_all: not measured, but this benchmark is memory-bound "
      "(list its family in NeedsReadBandwidth)");
}

// Times backend.Attention on p; GFLOPS and %FMA-peak counters.
void RunAttention(benchmark::State& state, const std::string& id,
                  Backend& backend, const AttentionProblem& p,
                  bool memory_bound) {
  auto args = InputsFor(p);
  if (!args.ok()) return SetError(state, args.status());
  const Status verdict = WarmAndCheck(id, backend, p, **args);
  if (!verdict.ok()) return SetError(state, verdict);
  for (auto _ : state) {
    const Status s = backend.Attention(p, **args);
    if (!s.ok()) {
      SetError(state, s);
      break;
    }
    benchmark::ClobberMemory();
  }
  if (state.error_occurred()) return;
  const double calls = static_cast<double>(state.iterations());
  const Calibration& cal = MachineCalibration();
  const double flops = p.Flops() * calls;
  state.counters["GFLOPS"] =
      benchmark::Counter(flops / 1e9, benchmark::Counter::kIsRate);
  if (!memory_bound) {
    // kIsRate divides by the measured seconds: (FLOP / s) / peak * 100. The
    // larger of the two FMA figures: on a shared machine the all-threads one
    // can fall below one core's, and no kernel beats a single core's peak.
    const double peak = std::max(cal.fma_gflops_all, cal.fma_gflops_1t);
    state.counters["pct_peak"] = benchmark::Counter(
        PctOf(flops / 1e9, peak), benchmark::Counter::kIsRate);
    return;
  }
  if (Status s = CheckReadCalibration(cal); !s.ok()) return SetError(state, s);
  const double bytes = DecodeBytes(p);
  state.counters["GBps"] =
      benchmark::Counter(bytes * calls / 1e9, benchmark::Counter::kIsRate);
  state.counters["pct_peak"] =
      benchmark::Counter(PctOf(bytes * calls / 1e9, cal.read_gbps_all),
                         benchmark::Counter::kIsRate);
}

AttentionProblem PrefillProblem(int64_t s, int64_t d, bool causal,
                                int64_t hkv) {
  AttentionProblem p;
  p.batch = 1;
  p.q_heads = 32;
  p.kv_heads = hkv;
  p.head_dim = d;
  p.q_lens = {s};
  p.kv_lens = {s};
  p.mask = causal ? MaskKind::kCausal : MaskKind::kNone;
  return p;
}

AttentionProblem DecodeProblem(int64_t kv_len, DType dtype, int64_t batch) {
  AttentionProblem p;
  p.batch = batch;
  p.q_heads = 32;
  p.kv_heads = 8;
  p.head_dim = 128;
  p.q_lens.assign(static_cast<size_t>(batch), 1);
  p.kv_lens.assign(static_cast<size_t>(batch), kv_len);
  p.dtype = dtype;
  return p;
}

// The q dtype of the KV-storage families' "kv" argument: 0 f32 K/V (q
// f32), 1 bf16 (q bf16), 2 i8 with q f32, 3 i8 with q bf16.
DType KvBenchQDType(int64_t kvt) {
  return kvt == 1 || kvt == 3 ? DType::kBF16 : DType::kF32;
}

// ------------------------------------------------------------ paired figures

using Clock = std::chrono::steady_clock;
double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// A paired benchmark's inputs for p once its twin's verdict (family/, the
// same backend on the same problem; its untimed call warms the backend) is
// good; nullptr after SetError otherwise.
const AttentionArgs* PairedInputs(benchmark::State& state, Backend& backend,
                                  const std::string& family,
                                  const BackendSource& info,
                                  const AttentionProblem& p) {
  auto args = InputsFor(p);
  if (!args.ok()) {
    SetError(state, args.status());
    return nullptr;
  }
  const Status verdict =
      WarmAndCheck(family + "/" + std::string(info.name) + "/" + p.ToString(),
                   backend, p, **args);
  if (!verdict.ok()) {
    SetError(state, verdict);
    return nullptr;
  }
  return *args;
}

// ------------------------------------------------------------- decode paired

// decode/'s figure divided by calibration/read_bw's (pct_read_bw_same_run)
// compares medians taken at different moments of a run, while this host's
// read bandwidth swings 26..83 GB/s within minutes (all figures in this
// comment: 2-core AMD EPYC Zen 5 family 26, GCC 12.2, 2026-11-21). Here each
// iteration is one round (RunPairedRound, decode_bandwidth.h): one read pass
// over the read_bw buffer (all threads), which evicts the KV cache, then one
// decode call, which streams it from DRAM as a decode step does. The two
// halves of a round see the same tenant load, so
//   pct_read_bw_paired = median over rounds of
//                        100 * (decode GB/s) / (read GB/s)
// has quartiles within a few % where the same-run figure's inputs spread
// +-15% (scratch measurement, simd and compiled at kv 16k). It still moves
// with the host's state: at 45 GB/s both decode kernels are memory-bound,
// at 80 GB/s they are closer to compute-bound and read a smaller fraction.
// The iteration's (manual) time is the call's, so time and GBps compare with
// decode/'s (whose back-to-back calls may reread a K/V that the last-level
// cache holds); read_GBps is the median read pass. A fixed round count: the
// manual time (one call) is a fraction of a round's wall time, so min_time
// would run thousands.
constexpr int64_t kPairedRounds = 32;
void BM_DecodePaired(benchmark::State& state, const BackendSource* info,
                     const AttentionProblem& p) {
  Backend& backend = SharedBackend(*info);
  const AttentionArgs* args = PairedInputs(state, backend, "decode", *info, p);
  if (args == nullptr) return;
  const int threads = omp_get_max_threads();
  size_t n = 0;
  const float* buf = ReadBuffer(threads, &n);
  const double read_bytes = static_cast<double>(n * sizeof(float));
  const double call_bytes = DecodeBytes(p);
  std::vector<double> pct, read_gbps;
  pct.reserve(static_cast<size_t>(state.max_iterations));
  read_gbps.reserve(static_cast<size_t>(state.max_iterations));
  for (auto _ : state) {
    const StatusOr<PairedRound> round = RunPairedRound(
        [&] {
          benchmark::DoNotOptimize(SumFloats(buf, n, threads));
          return Status::Ok();
        },
        [&] {
          const Status s = backend.Attention(p, *args);
          benchmark::ClobberMemory();
          return s;
        });
    if (!round.ok()) return SetError(state, round.status());
    state.SetIterationTime(round->call_s);
    read_gbps.push_back(read_bytes / round->read_s / 1e9);
    pct.push_back(round->Pct(read_bytes, call_bytes));
  }
  // kIsRate divides by the summed iteration times: per-call seconds.
  state.counters["GBps"] = benchmark::Counter(
      call_bytes * static_cast<double>(state.iterations()) / 1e9,
      benchmark::Counter::kIsRate);
  state.counters["read_GBps"] = Median(read_gbps);
  state.counters[std::string(kPctReadBwPaired)] = Median(pct);
}

// ------------------------------------------------------------ prefill paired

// prefill/'s pct_peak divides the median call by the FMA peak measured at
// the start of the run; on a shared host the tenants take a different share
// of each (Intel Xeon under KVM, 2 cores, GCC 12.2, 2026-11-27: two-thread
// prefill rounds of one binary 0.56-1.60x apart), so that figure mostly
// says how loud the host was. Here each iteration is one round: the FMA
// chains of calibration/fma on all threads for as long as the last call
// took, then one call, so both halves see the same tenant load:
//   pct_fma_paired = median over rounds of
//                    100 * (prefill GFLOPS) / (FMA-loop GFLOPS of the round)
// The manual time is the call's, so time and GFLOPS compare with prefill/'s;
// fma_GFLOPS is the median FMA-loop figure.
// 4 rounds per repetition: a gated run's 9 repetitions give 36, and a row
// costs about 2 x 4 calls a repetition (2-4 s at S 2048 on 2 cores).
constexpr int64_t kPrefillPairedRounds = 4;
// FMA rounds per chunk of the paired loop: ~2 ms on 2 threads (as BM_Fma).
constexpr int64_t kFmaChunk = 1 << 20;
void BM_PrefillPaired(benchmark::State& state, const BackendSource* info,
                      const std::string& family, const AttentionProblem& p) {
  Backend& backend = SharedBackend(*info);
  const AttentionArgs* args = PairedInputs(state, backend, family, *info, p);
  if (args == nullptr) return;
  const int threads = omp_get_max_threads();
  // The first round's FMA loop runs as long as one untimed call.
  const Clock::time_point w0 = Clock::now();
  if (const Status s = backend.Attention(p, *args); !s.ok()) {
    return SetError(state, s);
  }
  double call_s = Seconds(Clock::now() - w0);
  std::vector<double> pct, fma_gflops;
  pct.reserve(static_cast<size_t>(state.max_iterations));
  fma_gflops.reserve(static_cast<size_t>(state.max_iterations));
  for (auto _ : state) {
    double fma_flops = 0, fma_s = 0;
    const Clock::time_point f0 = Clock::now();
    do {
      fma_flops += RunFmaChains(kFmaChunk, threads);
      fma_s = Seconds(Clock::now() - f0);
    } while (fma_s < call_s);
    const Clock::time_point c0 = Clock::now();
    const Status s = backend.Attention(p, *args);
    if (!s.ok()) return SetError(state, s);
    benchmark::ClobberMemory();
    call_s = Seconds(Clock::now() - c0);
    state.SetIterationTime(call_s);
    fma_gflops.push_back(fma_flops / fma_s / 1e9);
    pct.push_back(100.0 * (p.Flops() / call_s) / (fma_flops / fma_s));
  }
  state.counters["GFLOPS"] = benchmark::Counter(
      p.Flops() * static_cast<double>(state.iterations()) / 1e9,
      benchmark::Counter::kIsRate);
  state.counters["fma_GFLOPS"] = Median(fma_gflops);
  state.counters[std::string(kPctFmaPaired)] = Median(pct);
}

// ---------------------------------------------------------------- decode step

// One decode step at context length len: append one token's K and V, then
// attend over len + 1 keys, run by decode::Stepper -- the step the decode
// session (and the decode report's gate) and the tester's decode loops run,
// metered by the same meter. inplace=0: the naive concat (allocate len + 1,
// copy the context, append: reference::ConcatKv); inplace=1: the backend's
// AppendKv into a KvCache preallocated to capacity. Every timed step starts
// from the same len (the in-place cache is truncated back to len, the concat
// rebuilt untimed), so the per-step counts are exact constants the gate can
// compare exactly.
void BM_DecodeStep(benchmark::State& state, const BackendSource* info) {
  const int64_t len = state.range(0);
  const bool inplace = state.range(1) != 0;
  Backend& backend = SharedBackend(*info);
  const AttentionProblem p = DecodeProblem(len + 1, DType::kF32, 1);
  const int64_t hkv = p.kv_heads, d = p.head_dim;
  const int64_t token_bytes = 2 * hkv * d * DTypeSize(p.dtype);
  if (!accounting::AllocHooksInstalled()) {
    return SetError(state, Status::FailedPrecondition(
                               "allocation counts need attnkit_alloc_hooks "
                               "linked into the benchmark binary"));
  }

  Tensor context_k = Tensor::Contiguous(p.dtype, {1, hkv, len, d});
  Tensor context_v = Tensor::Contiguous(p.dtype, {1, hkv, len, d});
  Tensor token_k = Tensor::Contiguous(p.dtype, {1, hkv, 1, d});
  Tensor token_v = Tensor::Contiguous(p.dtype, {1, hkv, 1, d});
  Tensor q = Tensor::Contiguous(p.dtype, {1, p.q_heads, 1, d});
  Tensor out = Tensor::Contiguous(DType::kF32, {1, p.q_heads, 1, d});
  FillFromPool(context_k.view, 2);
  FillFromPool(context_v.view, 3);
  FillFromPool(token_k.view, 4);
  FillFromPool(token_v.view, 5);
  FillFromPool(q.view, 1);
  const std::vector<int64_t> one{1}, ctx_len{len};

  // In place: capacity for 256 more tokens past this step. Concat: one
  // ConcatKv, rebuilt to len tokens before every step.
  std::optional<KvCache> cache;
  std::vector<reference::ConcatKv> concat;
  std::optional<decode::Stepper> stepper;
  auto reset = [&]() -> Status {
    if (inplace) return cache->Truncate(ctx_len);
    concat[0] = reference::ConcatKv(1, hkv, d, p.dtype);
    return concat[0].Append(context_k.view, context_v.view, ctx_len).status();
  };
  if (inplace) {
    KvCacheConfig kc;
    kc.kv_heads = hkv;
    kc.head_dim = d;
    kc.capacity = len + 256;
    kc.dtype = p.dtype;
    auto created = KvCache::Create(kc);
    if (!created.ok()) return SetError(state, created.status());
    cache.emplace(std::move(created).value());
    const Status s = cache->Append(0, context_k.view, context_v.view, ctx_len);
    if (!s.ok()) return SetError(state, s);
    stepper.emplace(decode::Stepper::InPlace(backend, *cache));
  } else {
    concat.emplace_back(1, hkv, d, p.dtype);
    const Status s = reset();
    if (!s.ok()) return SetError(state, s);
    stepper.emplace(decode::Stepper::Naive(backend, concat, p));
  }
  const decode::LayerStep layer{q.view, token_k.view, token_v.view,
                                TensorView{}, out.view};
  AttentionProblem call = p;
  auto step = [&](decode::StepRecord* rec) {
    return stepper->Step(call, {&layer, 1}, one, rec);
  };

  // Warm-up step, then the checks: the meter saw exactly the bytes the KV
  // update must copy (the new token in place; the context and the token
  // naive), the context holds context + token bit-exactly, and the attention
  // output matches the oracle.
  {
    decode::StepRecord rec;
    const Status s = step(&rec);
    if (!s.ok()) return SetError(state, s);
    const int64_t want = inplace ? token_bytes : (len + 1) * token_bytes;
    if (rec.bytes_copied != want) {
      return SetError(
          state, Status::FailedPrecondition(
                     "the step copied " + std::to_string(rec.bytes_copied) +
                     " bytes, expected " + std::to_string(want)));
    }
    AttentionArgs a{q.view,
                    inplace ? cache->Prefix(0).k : concat[0].K(0),
                    inplace ? cache->Prefix(0).v : concat[0].V(0),
                    TensorView{},
                    out.view,
                    inplace ? cache->Prefix(0).k_scale : concat[0].KScale(0),
                    inplace ? cache->Prefix(0).v_scale : concat[0].VScale(0)};
    for (int which = 0; which < 2; ++which) {
      const TensorView& kv = which == 0 ? a.k : a.v;
      const TensorView& tok = which == 0 ? token_k.view : token_v.view;
      const TensorView& context = which == 0 ? context_k.view : context_v.view;
      const size_t row = static_cast<size_t>(d * DTypeSize(p.dtype));
      for (int64_t h = 0; h < hkv; ++h) {
        const char* base = static_cast<const char*>(kv.data);
        const char* ctx = static_cast<const char*>(context.data);
        const int64_t es = DTypeSize(p.dtype);
        if (std::memcmp(base + kv.Offset(0, h, 0, 0) * es,
                        ctx + context.Offset(0, h, 0, 0) * es,
                        row * static_cast<size_t>(len)) != 0 ||
            std::memcmp(base + kv.Offset(0, h, len, 0) * es,
                        static_cast<const char*>(tok.data) +
                            tok.Offset(0, h, 0, 0) * es,
                        row) != 0) {
          return SetError(state,
                          Status::FailedPrecondition(
                              std::string(which == 0 ? "K" : "V") +
                              " cache after the step differs from context + "
                              "token at kv head " +
                              std::to_string(h)));
        }
      }
    }
    const Status checked = CheckAgainstOracle(call, a);
    if (!checked.ok()) return SetError(state, checked);
  }

  // The in-place reset (Truncate: a few stores) stays inside the timing;
  // the concat rebuild (an allocation and a full-context copy) is paused.
  int64_t allocs = 0, alloc_bytes = 0, copied = 0;
  for (auto _ : state) {
    if (!inplace) state.PauseTiming();
    const Status r = reset();
    if (!inplace) state.ResumeTiming();
    decode::StepRecord rec;
    const Status s = r.ok() ? step(&rec) : r;
    if (!s.ok()) {
      SetError(state, s);
      break;
    }
    allocs += rec.allocs;
    alloc_bytes += rec.bytes_allocated;
    copied += rec.bytes_copied;
  }
  if (state.error_occurred()) return;
  using C = benchmark::Counter;
  state.counters["allocs_per_step"] =
      C(static_cast<double>(allocs), C::kAvgIterations);
  state.counters["alloc_bytes_per_step"] =
      C(static_cast<double>(alloc_bytes), C::kAvgIterations);
  state.counters["bytes_copied_per_step"] =
      C(static_cast<double>(copied), C::kAvgIterations);
}

// ----------------------------------------------------------------- first call

// The first Attention call of a fresh backend instance (JIT compile and
// workspace sizing, for backends that do either) against a warmed call of
// the same specialization. A backend that caches kernels process-wide pays
// the compile only in the very first iteration; the median then shows the
// cost of a cache hit.
void BM_FirstCall(benchmark::State& state, const BackendSource* info) {
  const int64_t q = state.range(0), kv = state.range(1), d = state.range(2);
  AttentionProblem p = PrefillProblem(kv, d, q > 1, 8);
  p.q_lens = {q};
  auto args = InputsFor(p);
  if (!args.ok()) return SetError(state, args.status());
  const std::string id = "first_call/" + p.ToString();
  double warm = 0;
  {
    auto made = info->make();
    if (!made.ok()) return SetError(state, made.status());
    std::unique_ptr<Backend> warmed = std::move(*made);
    const Status verdict = WarmAndCheck(id, *warmed, p, **args);
    if (!verdict.ok()) return SetError(state, verdict);
    std::vector<double> t;
    for (int i = 0; i < 5; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      const Status s = warmed->Attention(p, **args);
      t.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
              .count());
      if (!s.ok()) return SetError(state, s);
    }
    warm = Median(t);
  }
  double first_total = 0;
  for (auto _ : state) {
    state.PauseTiming();
    auto made = info->make();
    if (!made.ok()) {
      SetError(state, made.status());
      break;
    }
    std::unique_ptr<Backend> fresh = std::move(*made);
    state.ResumeTiming();
    const auto t0 = std::chrono::steady_clock::now();
    const Status s = fresh->Attention(p, **args);
    first_total +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    state.PauseTiming();
    fresh.reset();
    state.ResumeTiming();
    if (!s.ok()) {
      SetError(state, s);
      break;
    }
  }
  if (state.error_occurred()) return;
  state.counters["first_over_warm"] =
      first_total / static_cast<double>(state.iterations()) / warm;
  state.counters["warm_us"] = warm * 1e6;
}

// --------------------------------------------------------------- registration

std::vector<int64_t> Grid(std::vector<int64_t> full,
                          std::vector<int64_t> quick) {
  return g_quick ? quick : full;
}

// ---- The attention block (Llama-2-7B: hidden 4096, 32 heads x 128, Wo;
// MHA and GQA 32/8): the backend's fused block against the unfused one
// (simd::UnfusedAttentionBlock: whole Q/K/V projections into transient
// buffers, the append's copy, the same backend's attention).

AttentionBlockProblem LlamaBlock(int64_t q, int64_t kv, int64_t hkv, DType w) {
  AttentionBlockProblem p;
  p.attention.q_heads = 32;
  p.attention.kv_heads = hkv;
  p.attention.head_dim = 128;
  p.attention.q_lens = {q};
  p.attention.kv_lens = {kv};
  p.attention.mask = MaskKind::kCausal;
  p.hidden = 4096;
  p.weight_dtype = w;
  p.output_projection = true;
  return p;
}

StatusOr<const AttentionBlockArgs*> BlockInputsFor(
    const AttentionBlockProblem& p) {
  static std::string key;
  static std::unique_ptr<AttentionBlockData> data;
  if (key != p.ToString()) {
    data.reset();  // free the previous problem's memory first
    ATTNKIT_ASSIGN_OR_RETURN(AttentionBlockData d,
                             AttentionBlockData::Create(p));
    data = std::make_unique<AttentionBlockData>(std::move(d));
    Rng rng(1);
    data->Fill(p, rng);
    key = p.ToString();
  }
  return &data->args();
}

// The block's bytes one call must move at least: every weight once, the
// cache prefix read, the new K/V written, x read and out written.
double BlockBytes(const AttentionBlockProblem& p) {
  const AttentionProblem& at = p.attention;
  const double w = static_cast<double>(DTypeSize(p.weight_dtype));
  const double h = static_cast<double>(p.hidden);
  double bytes = h * static_cast<double>(p.q_width() + 2 * p.kv_width()) * w +
                 static_cast<double>(p.q_width()) * h * w;
  const double q = static_cast<double>(at.q_lens[0]);
  bytes += 2.0 * static_cast<double>(at.kv_lens[0] * p.kv_width()) * 4.0;
  bytes += q * (h + static_cast<double>(p.out_width())) * 4.0;
  return bytes;
}

Status CallBlock(Backend& backend, simd::BlockWorkspace& ws, bool unfused,
                 const AttentionBlockProblem& p, const AttentionBlockArgs& a) {
  if (!unfused) return backend.AttentionBlock(p, a);
  return simd::UnfusedAttentionBlock(backend, ws, omp_get_max_threads(), p, a);
}

// Warm-up call, then its output against the naive reference block (which
// rewrites the same cache slots and out): within 1e-3 of 1 + |reference|,
// far above f32 reordering over 4096-long sums and far below any wrong
// head, weight slice or projection.
Status WarmAndCheckBlock(const std::string& id, Backend& backend,
                         simd::BlockWorkspace& ws, bool unfused,
                         const AttentionBlockProblem& p,
                         const AttentionBlockArgs& a) {
  static std::map<std::string, Status> verdicts;
  if (auto it = verdicts.find(id); it != verdicts.end()) return it->second;
  Status s = CallBlock(backend, ws, unfused, p, a);
  if (s.ok()) {
    const int64_t n = p.attention.q_lens[0], w = p.out_width();
    std::vector<float> got(static_cast<size_t>(n * w));
    for (int64_t t = 0; t < n; ++t)
      for (int64_t c = 0; c < w; ++c) got[t * w + c] = a.out.Load(0, 0, t, c);
    s = reference::AttentionBlock(p, a);
    for (int64_t t = 0; s.ok() && t < n; ++t)
      for (int64_t c = 0; c < w; ++c) {
        const float want = a.out.Load(0, 0, t, c), g = got[t * w + c];
        if (!(std::fabs(g - want) <= 1e-3f * (1 + std::fabs(want)))) {
          s = Status::Internal("block output [" + std::to_string(t) + "," +
                               std::to_string(c) + "] = " + std::to_string(g) +
                               ", the reference block has " +
                               std::to_string(want));
          break;
        }
      }
  }
  verdicts.emplace(id, s);
  return s;
}

// Times one block call; GFLOPS and % of the FMA peak for prefill, GB/s of
// BlockBytes and % of the read bandwidth for decode; allocations and bytes
// copied per call (the fused form copies nothing, the unfused one its K/V).
void RunBlock(benchmark::State& state, const std::string& id, Backend& backend,
              const AttentionBlockProblem& p, bool unfused, bool decode) {
  static simd::BlockWorkspace ws;
  auto args = BlockInputsFor(p);
  if (!args.ok()) return SetError(state, args.status());
  const Status verdict = WarmAndCheckBlock(id, backend, ws, unfused, p, **args);
  if (!verdict.ok()) return SetError(state, verdict);
  accounting::Meter meter;
  for (auto _ : state) {
    const Status s = CallBlock(backend, ws, unfused, p, **args);
    if (!s.ok()) {
      SetError(state, s);
      break;
    }
    benchmark::ClobberMemory();
  }
  if (state.error_occurred()) return;
  const accounting::Counts c = meter.Read();
  const double calls = static_cast<double>(state.iterations());
  const Calibration& cal = MachineCalibration();
  state.counters["allocs"] = benchmark::Counter(
      static_cast<double>(c.allocs), benchmark::Counter::kAvgIterations);
  state.counters["bytes_copied"] = benchmark::Counter(
      static_cast<double>(c.bytes_copied), benchmark::Counter::kAvgIterations);
  const double flops = p.Flops() * calls;
  state.counters["GFLOPS"] =
      benchmark::Counter(flops / 1e9, benchmark::Counter::kIsRate);
  if (!decode) {
    const double peak = std::max(cal.fma_gflops_all, cal.fma_gflops_1t);
    state.counters["pct_peak"] = benchmark::Counter(
        PctOf(flops / 1e9, peak), benchmark::Counter::kIsRate);
    return;
  }
  if (Status s = CheckReadCalibration(cal); !s.ok()) return SetError(state, s);
  const double bytes = BlockBytes(p) * calls;
  state.counters["GBps"] =
      benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsRate);
  state.counters["pct_peak"] = benchmark::Counter(
      PctOf(bytes / 1e9, cal.read_gbps_all), benchmark::Counter::kIsRate);
}

void RegisterBlock(const BackendSource* ip, Backend& backend,
                   const std::string& family, const AttentionBlockProblem& p,
                   std::vector<int64_t> args, bool decode) {
  const std::string name(ip->name);
  for (int64_t unfused : {0, 1}) {
    const std::string bm = family + (unfused ? "_unfused/" : "/") + name;
    if (Status sup = backend.SupportsBlock(p); !unfused && !sup.ok()) {
      Skip(bm + "/" + p.ToString(), sup.ToString());
      continue;
    }
    if (Status sup = backend.Supports(p.attention); !sup.ok()) {
      Skip(bm + "/" + p.ToString(), sup.ToString());
      continue;
    }
    benchmark::RegisterBenchmark(
        bm.c_str(),
        [ip, p, bm, unfused, decode](benchmark::State& st) {
          RunBlock(st, bm + "/" + p.ToString(), SharedBackend(*ip), p,
                   unfused != 0, decode);
        })
        ->ArgNames(decode ? std::vector<std::string>{"kv_len", "hkv", "bf16w"}
                          : std::vector<std::string>{"S", "hkv"})
        ->Args(args)
        ->UseRealTime()
        ->Unit(decode ? benchmark::kMicrosecond : benchmark::kMillisecond);
  }
}

void RegisterBlockFamilies(const BackendSource& info, Backend& backend) {
  for (int64_t s : Grid({512, 2048}, {512})) {
    for (int64_t hkv : {8, 32}) {
      if (info.traits.quadratic_prefill && s > QuadraticPrefillMaxS()) continue;
      RegisterBlock(&info, backend, "block_prefill",
                    LlamaBlock(s, s, hkv, DType::kF32), {s, hkv}, false);
    }
  }
  for (int64_t hkv : {8, 32}) {
    for (int64_t bf : Grid({0, 1}, {1})) {
      RegisterBlock(&info, backend, "block_decode",
                    LlamaBlock(1, 4096, hkv, bf ? DType::kBF16 : DType::kF32),
                    {4096, hkv, bf}, true);
    }
  }
}

void RegisterAll() {
  const int threads = omp_get_max_threads();
  benchmark::RegisterBenchmark("calibration/fma", BM_Fma)
      ->ArgNames({"threads"})
      ->Arg(1)
      ->Arg(threads)
      ->UseRealTime();
  benchmark::RegisterBenchmark("calibration/read_bw", BM_ReadBandwidth)
      ->ArgNames({"threads"})
      ->Arg(threads)
      ->UseRealTime();

  for (const BackendSource& info : Sources()) {
    const std::string name(info.name);
    const BackendSource* ip = &info;
    auto made = MakeSharedBackend(info);
    if (!made.ok()) {
      Skip(name + "/*", made.status().ToString());
      continue;
    }
    Backend& backend = **made;

    // Why the naive baseline gets no paired twin (BackendTraits::baseline).
    const std::string kNoBaselineTwin =
        "the naive baseline (timed for the speedups over it); no paired twin";

    // A memory-bound family's benchmark of p (RunAttention: GB/s and % of
    // the read bandwidth), or with `paired` its BM_DecodePaired twin's; or
    // the reason the backend does not run it.
    auto memory_bound = [&](const std::string& family,
                            const AttentionProblem& p,
                            std::vector<std::string> arg_names,
                            std::vector<int64_t> args, bool paired = false) {
      if (paired && info.traits.baseline) {
        Skip(family + "/" + name + "/" + p.ToString(), kNoBaselineTwin);
        return;
      }
      if (Status sup = backend.Supports(p); !sup.ok()) {
        Skip(family + "/" + name + "/" + p.ToString(), sup.ToString());
        return;
      }
      benchmark::internal::Benchmark* b = benchmark::RegisterBenchmark(
          (family + "/" + name).c_str(),
          [ip, family, p, paired](benchmark::State& st) {
            if (paired) return BM_DecodePaired(st, ip, p);
            RunAttention(
                st, family + "/" + std::string(ip->name) + "/" + p.ToString(),
                SharedBackend(*ip), p, true);
          });
      b->ArgNames(arg_names)->Args(args)->Unit(benchmark::kMicrosecond);
      if (paired) {
        // A fixed round count (see kPairedRounds).
        b->UseManualTime()->Iterations(kPairedRounds);
      } else {
        b->UseRealTime();
      }
    };

    // A compute-bound family's benchmark of p (RunAttention: GFLOPS and %
    // of the FMA peak), or with `paired` its BM_PrefillPaired twin's
    // (<family>_paired/: the FMA loop in the same rounds); or the reason
    // the backend does not run it. A backend that materializes S x S per
    // head (quadratic_prefill) stops at QuadraticPrefillMaxS(); the
    // baseline gets no paired twin.
    auto compute_bound = [&](const std::string& family,
                             const AttentionProblem& p,
                             std::vector<std::string> arg_names,
                             std::vector<int64_t> args, bool paired = false) {
      const std::string bench_family = paired ? family + "_paired" : family;
      const std::string bm = bench_family + "/" + name + "/" + p.ToString();
      if (paired && info.traits.baseline) {
        Skip(bm, kNoBaselineTwin);
        return;
      }
      if (info.traits.quadratic_prefill &&
          p.max_q_len() > QuadraticPrefillMaxS()) {
        Skip(bm,
             "the backend materializes S x S per head (quadratic_prefill); "
             "capped at S <= " +
                 std::to_string(QuadraticPrefillMaxS()) +
                 (g_quick ? " in the --quick grid" : ""));
        return;
      }
      if (Status sup = backend.Supports(p); !sup.ok()) {
        Skip(bm, sup.ToString());
        return;
      }
      benchmark::internal::Benchmark* b = benchmark::RegisterBenchmark(
          (bench_family + "/" + name).c_str(),
          [ip, family, p, paired](benchmark::State& st) {
            if (paired) return BM_PrefillPaired(st, ip, family, p);
            RunAttention(
                st, family + "/" + std::string(ip->name) + "/" + p.ToString(),
                SharedBackend(*ip), p, false);
          });
      b->ArgNames(arg_names)->Args(args)->Unit(benchmark::kMillisecond);
      if (paired) {
        // A fixed round count (see kPrefillPairedRounds).
        b->UseManualTime()->Iterations(kPrefillPairedRounds);
      } else {
        b->UseRealTime();
      }
    };

    // Prefill: hq 32, hkv 8 (GQA 4:1) and 32 (MHA).
    for (int64_t s :
         Grid({128, 256, 512, 1024, 2048, 4096}, {128, 512, 2048})) {
      for (int64_t d : {64, 128}) {
        for (int64_t causal : {0, 1}) {
          for (int64_t hkv : Grid({8, 32}, {8})) {
            compute_bound("prefill", PrefillProblem(s, d, causal != 0, hkv),
                          {"S", "d", "causal", "hkv"}, {s, d, causal, hkv});
          }
        }
      }
    }
    // ... paired with the FMA loop at the target point (S 2048, d 128).
    for (int64_t causal : {0, 1}) {
      for (int64_t hkv : Grid({8, 32}, {8})) {
        compute_bound("prefill", PrefillProblem(2048, 128, causal != 0, hkv),
                      {"S", "d", "causal", "hkv"}, {2048, 128, causal, hkv},
                      true);
      }
    }

    // Decode: one query per sequence over kv_len keys, Llama-like heads.
    for (int64_t kv : Grid({512, 1024, 2048, 4096, 8192, 16384, 32768},
                           {512, 4096, 32768})) {
      for (int64_t bf : {0, 1}) {
        for (int64_t batch : {1, 4}) {
          memory_bound(
              "decode",
              DecodeProblem(kv, bf ? DType::kBF16 : DType::kF32, batch),
              {"kv_len", "bf16", "batch"}, {kv, bf, batch});
        }
      }
    }

    // bf16 prefill (Llama-2-7B's heads, GQA 4:1), quoted against the f32
    // FMA peak like every prefill: QK^T on the bf16 dot instruction can
    // exceed it; S 2048 also paired with the FMA loop.
    for (int64_t s : Grid({512, 2048, 4096}, {2048})) {
      for (int64_t causal : {0, 1}) {
        AttentionProblem p = PrefillProblem(s, 128, causal != 0, 8);
        p.dtype = DType::kBF16;
        for (bool paired : {false, true}) {
          if (paired && s != 2048) continue;
          compute_bound("prefill_bf16", p, {"S", "causal"}, {s, causal},
                        paired);
        }
      }
    }

    // Decode in every K/V layout and with MHA (Llama-2-7B: 32 kv heads) as
    // well as GQA (Llama-3-8B-like: 8): named decode/ with hkv and layout
    // (0 bhsd, 1 bshd, 2 tv), so the summary quotes them against the
    // same run's read bandwidth like the rest. Hkv 8 in BHSD is the grid
    // above.
    for (int64_t kv : Grid({4096, 16384}, {16384})) {
      for (int64_t bf : Grid({0, 1}, {0})) {
        for (int64_t hkv : {8, 32}) {
          for (int64_t layout : {0, 1, 2}) {
            if (hkv == 8 && layout == 0) continue;
            AttentionProblem p =
                DecodeProblem(kv, bf ? DType::kBF16 : DType::kF32, 1);
            p.kv_heads = hkv;
            p.layout = static_cast<KvLayout>(layout);
            memory_bound("decode", p,
                         {"kv_len", "bf16", "batch", "hkv", "layout"},
                         {kv, bf, 1, hkv, layout});
          }
        }
      }
    }

    // The KV cache's storage side by side (issue 21): kv:0 f32, kv:1 bf16,
    // kv:2 i8 K/V with q f32, kv:3 i8 K/V with q bf16 (one f32 scale per
    // token and kv head) at Llama-like heads, GQA (hkv 8) and MHA (hkv 32).
    // Decode is memory-bound, so i8 reads about half of bf16's bytes and
    // should take about half the time; kv:3 is i8 against bf16 with the
    // same q (a bf16 model's), kv:2 its f32-q twin.
    for (int64_t kv : Grid({4096, 16384}, {16384})) {
      for (int64_t hkv : {8, 32}) {
        for (int64_t kvt : {0, 1, 2, 3}) {
          AttentionProblem p = DecodeProblem(kv, KvBenchQDType(kvt), 1);
          p.kv_heads = hkv;
          if (kvt >= 2) p.kv_dtype = DType::kI8;
          memory_bound("decode_kv", p, {"kv_len", "hkv", "kv"}, {kv, hkv, kvt});
        }
      }
    }
    // ... and the i8 cache in the other K/V layouts (1 bshd, 2 transposed V;
    // Hkv 8; the decode tiles of a transposed V depend on the KV dtype), with
    // their decode_paired_kv/ twins.
    for (int64_t layout : {1, 2}) {
      for (int64_t kvt : {2, 3}) {
        AttentionProblem p = DecodeProblem(16384, KvBenchQDType(kvt), 1);
        p.kv_dtype = DType::kI8;
        p.layout = static_cast<KvLayout>(layout);
        for (bool paired : {false, true}) {
          memory_bound(paired ? "decode_paired_kv" : "decode_kv", p,
                       {"kv_len", "hkv", "kv", "layout"},
                       {16384, p.kv_heads, kvt, layout}, paired);
        }
      }
    }

    // Decode with one KV head and one sequence (multi-query, hq 8): fewer
    // (sequence, KV head) items than threads, so the fast backends split the
    // keys across threads and merge the partial softmaxes -- the only
    // family that times that path.
    for (int64_t kv : Grid({4096, 16384, 65536}, {16384})) {
      AttentionProblem p = DecodeProblem(kv, DType::kF32, 1);
      p.q_heads = 8;
      p.kv_heads = 1;
      memory_bound("decode_split", p, {"kv_len"}, {kv});
    }

    // Decode paired with the read bandwidth: the target point (kv 16k).
    for (int64_t bf : Grid({0, 1}, {1})) {
      memory_bound("decode_paired",
                   DecodeProblem(16384, bf ? DType::kBF16 : DType::kF32, 1),
                   {"kv_len", "bf16", "batch"}, {16384, bf, 1}, true);
    }
    // ... in the other K/V layouts (1 bshd, 2 transposed V; Hkv 8), twins of
    // decode/'s layout grid (same shape, so the summary pairs them) ...
    for (int64_t bf : Grid({0, 1}, {0})) {
      for (int64_t layout : {1, 2}) {
        AttentionProblem p =
            DecodeProblem(16384, bf ? DType::kBF16 : DType::kF32, 1);
        p.layout = static_cast<KvLayout>(layout);
        memory_bound("decode_paired", p,
                     {"kv_len", "bf16", "batch", "hkv", "layout"},
                     {16384, bf, 1, p.kv_heads, layout}, true);
      }
    }
    // ... and the quantized cache against bf16 at GQA and MHA heads (kv: 1
    // bf16, 2 i8 with q f32, 3 i8 with q bf16), the issue-21 gate's figures.
    for (int64_t hkv : {8, 32}) {
      for (int64_t kvt : {1, 2, 3}) {
        AttentionProblem p = DecodeProblem(16384, KvBenchQDType(kvt), 1);
        p.kv_heads = hkv;
        if (kvt >= 2) p.kv_dtype = DType::kI8;
        memory_bound("decode_paired_kv", p, {"kv_len", "hkv", "kv"},
                     {16384, hkv, kvt}, true);
      }
    }

    // Decode step: KV update + attention, naive concat vs in place.
    for (int64_t len : Grid({512, 2048, 8192, 32768}, {512, 8192})) {
      if (Status sup = backend.Supports(DecodeProblem(len + 1, DType::kF32, 1));
          !sup.ok()) {
        Skip("decode_step/" + name + "/len:" + std::to_string(len),
             sup.ToString());
        continue;
      }
      for (int64_t inplace : {0, 1}) {
        benchmark::RegisterBenchmark(
            ("decode_step/" + name).c_str(),
            [ip](benchmark::State& st) { BM_DecodeStep(st, ip); })
            ->ArgNames({"len", "inplace"})
            ->Args({len, inplace})
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
      }
    }

    RegisterBlockFamilies(info, backend);

    // First call vs warmed: a prefill and a decode specialization.
    benchmark::RegisterBenchmark(
        ("first_call/" + name).c_str(),
        [ip](benchmark::State& st) { BM_FirstCall(st, ip); })
        ->ArgNames({"q", "kv_len", "d"})
        ->Args({256, 256, 64})
        ->Args({1, 1024, 128})
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
}

std::string FirstLineOf(const std::string& cmd) {
  std::string out;
  if (FILE* f = popen(cmd.c_str(), "r")) {
    char buf[512];
    while (std::fgets(buf, sizeof(buf), f) != nullptr) out += buf;
    pclose(f);
  }
  return out;
}

// "LLVM version 22.1.3" out of `mlir-opt --version`, or "unavailable".
std::string MlirVersion() {
  const std::string text =
      FirstLineOf("/usr/lib/llvm-22/bin/mlir-opt --version 2>/dev/null");
  const size_t at = text.find("version ");
  if (at == std::string::npos) return "unavailable";
  size_t end = text.find_first_of(" \n", at + 8);
  return text.substr(at + 8, end - at - 8);
}

std::string CpuModel() {
  const std::string text =
      FirstLineOf("grep -m1 'model name' /proc/cpuinfo 2>/dev/null");
  const size_t colon = text.find(':');
  if (colon == std::string::npos) return "unknown";
  std::string m = text.substr(colon + 1);
  m.erase(0, m.find_first_not_of(' '));
  while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
  return m;
}

// Whether a benchmark named `name` divides by the read-bandwidth
// calibration or sums ReadBuffer(): every family but the compute-bound ones
// (a family added later is memory-bound until listed here, which costs a
// calibration, never a figure).
bool NeedsReadBandwidth(std::string_view name) {
  for (std::string_view compute_bound :
       {"calibration/fma/", "prefill/", "prefill_bf16/", "prefill_paired/",
        "prefill_bf16_paired/", "block_prefill/", "block_prefill_unfused/"}) {
    if (name.substr(0, compute_bound.size()) == compute_bound) return false;
  }
  return true;
}

// Whether the benchmarks this run selects need the read-bandwidth
// calibration (most of a start-up's time: the 1 GiB buffer's first touch).
// The selection is Google Benchmark's own: a listing pass
// (--benchmark_list_tests) into a string, then the flag set back. Initialize
// re-adds --benchmark_context's entries on every call, so with that flag the
// answer is a conservative yes instead.
bool SelectionNeedsReadBandwidth(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]).substr(0, 20) == "--benchmark_context=") {
      return true;
    }
  }
  if (std::getenv("BENCHMARK_CONTEXT") != nullptr) return true;
  class Capture : public benchmark::BenchmarkReporter {
   public:
    bool ReportContext(const Context&) override { return true; }
    void ReportRuns(const std::vector<Run>&) override {}
  };
  auto set_listing = [&](const char* value) {
    std::string flag = std::string("--benchmark_list_tests=") + value;
    char* args[] = {argv[0], flag.data(), nullptr};
    int n = 2;
    benchmark::Initialize(&n, args);
  };
  std::ostringstream names, errors;
  Capture capture;
  capture.SetOutputStream(&names);
  capture.SetErrorStream(&errors);
  set_listing("true");
  benchmark::RunSpecifiedBenchmarks(&capture);
  set_listing("false");
  std::istringstream lines(names.str());
  for (std::string name; std::getline(lines, name);) {
    if (NeedsReadBandwidth(name)) return true;
  }
  return false;
}

void AddContext(const Calibration& cal, bool interleaved) {
  auto env = [](const char* name, const char* fallback) {
    const char* v = std::getenv(name);
    return std::string(v != nullptr && *v != '\0' ? v : fallback);
  };
  benchmark::AddCustomContext("git_sha", env("ATTNKIT_GIT_SHA", "unknown"));
  benchmark::AddCustomContext("git_dirty", env("ATTNKIT_GIT_DIRTY", "unknown"));
  benchmark::AddCustomContext("attnkit_quick", g_quick ? "1" : "0");
  // How decode_paired/ measures (bench compare does not compare its rows
  // across methods): one cold call per round (RunPairedRound).
  benchmark::AddCustomContext(std::string(kDecodePairedMethodKey),
                              std::string(kDecodePairedMethod));
  // pct_read_bw_same_run (bench/decode_bandwidth.h) assumes read_bw's
  // repetitions were spread over the run like the decode ones.
  benchmark::AddCustomContext("random_interleaving", interleaved ? "1" : "0");
#if defined(__clang__)
  benchmark::AddCustomContext("compiler", std::string("clang ") + __VERSION__);
#else
  benchmark::AddCustomContext("compiler", std::string("gcc ") + __VERSION__);
#endif
  benchmark::AddCustomContext("cpu_model", CpuModel());
  benchmark::AddCustomContext("mlir_version", MlirVersion());
  std::string backends;
  for (const BackendSource& b : Sources()) {
    backends += (backends.empty() ? "" : ",") + b.name;
  }
  benchmark::AddCustomContext("backends", backends);
  benchmark::AddCustomContext("omp_threads", std::to_string(cal.threads));
  benchmark::AddCustomContext("fma_isa", FmaIsaName());
  benchmark::AddCustomContext("calib_fma_gflops_1t",
                              std::to_string(cal.fma_gflops_1t));
  benchmark::AddCustomContext("calib_fma_gflops_all",
                              std::to_string(cal.fma_gflops_all));
  // Absent when not measured (no memory-bound benchmark selected).
  if (!std::isnan(cal.read_gbps_all)) {
    benchmark::AddCustomContext("calib_read_gbps_all",
                                std::to_string(cal.read_gbps_all));
  }
  benchmark::AddCustomContext("alloc_counter", accounting::AllocHooksInstalled()
                                                   ? "malloc+new"
                                                   : "none");
}

}  // namespace
}  // namespace attnkit::bench

int main(int argc, char** argv) {
  using namespace attnkit::bench;
  const bool interleaved = GoogleBenchmarkBoolFlag(
      argc, argv, "benchmark_enable_random_interleaving",
      std::getenv("BENCHMARK_ENABLE_RANDOM_INTERLEAVING"));
  const bool listing = GoogleBenchmarkBoolFlag(
      argc, argv, "benchmark_list_tests", std::getenv("BENCHMARK_LIST_TESTS"));
  // Our flags; the rest (argv[0] first) is Google Benchmark's.
  std::vector<std::string> plugins, rest{argv[0]};
  attnkit::FlagParser flags(
      "attnkit_bench [--attnkit_quick] [--plugin lib.so]... "
      "[--benchmark_*=...]",
      "Google Benchmark suites over every registered backend and plug-in.");
  flags
      .Bool("--attnkit_quick", &g_quick,
            "the reduced grid of `./attnkit bench --quick`")
      .Strings("--plugin", &plugins, "lib.so",
               "also benchmark a kernel loaded through\n"
               "plugin/attnkit_plugin.h (repeatable)",
               "needs a file name")
      .PassUnknown(&rest)
      .Positional(&rest);
  if (attnkit::Status s = flags.Parse(argc - 1, argv + 1); !s.ok()) {
    std::fprintf(stderr, "attnkit_bench: %s\n", s.message().c_str());
    return 2;
  }
  if (flags.help()) {
    // Ours, then Google Benchmark's (which exits).
    std::fputs(flags.Usage().c_str(), stdout);
    rest.push_back("--help");
  }
  // In this process: a worker's round trip (~30 us on the 2-core Zen 5 host,
  // 2026-11-23) would be timed with every call. Correctness gating (check,
  // decode) isolates plug-ins; benchmarks trust the kernels they time.
  attnkit::backends::ResolveOptions resolve;
  resolve.isolation = attnkit::backends::Isolation::kNone;
  auto sources =
      attnkit::backends::ResolveBackends(plugins, std::nullopt, resolve);
  if (!sources.ok()) {
    std::fprintf(stderr, "attnkit_bench: --%s\n",
                 sources.status().message().c_str());
    return 2;
  }
  Sources() = std::move(*sources);
  std::vector<char*> gb_argv;
  for (std::string& a : rest) gb_argv.push_back(a.data());
  int n = static_cast<int>(gb_argv.size());
  benchmark::Initialize(&n, gb_argv.data());
  if (benchmark::ReportUnrecognizedArguments(n, gb_argv.data())) return 2;
  RegisterAll();
  for (const std::string& s : SkipLog()) {
    std::fprintf(stderr, "attnkit_bench: not registered: %s\n", s.c_str());
  }
  if (!listing) {  // a listing runs nothing, so it calibrates nothing
    const Calibration& cal =
        MachineCalibration(SelectionNeedsReadBandwidth(argc, argv));
    std::fprintf(stderr, "attnkit_bench: %s\n",
                 CalibrationSummary(cal).c_str());
    AddContext(cal, interleaved);
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
