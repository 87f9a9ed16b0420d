#include "decode/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string_view>

#include "backends/registry.h"
#include "reference/tolerance.h"
#include "runtime/accounting.h"
#include "runtime/flags.h"
#include "runtime/interrupt.h"
#include "runtime/limits.h"
#include "runtime/parse.h"
#include "runtime/report_file.h"
#include "runtime/stats.h"

namespace attnkit::decode {
namespace {

Status BadFlag(std::string_view flag, std::string_view value,
               std::string_view why) {
  return Status::InvalidArgument(std::string(flag) + "=" + std::string(value) +
                                 ": " + std::string(why));
}

DecodeReportRow Summarize(const DecodeSession& s, int64_t kv_len) {
  const auto rec = s.records();
  // Skip the first step when there are more: it may warm a backend up.
  const size_t first = rec.size() > 1 ? 1 : 0;
  DecodeReportRow row;
  row.backend = s.config().backend;
  row.mode = s.mode();
  row.kv_len = kv_len;
  row.new_token_bytes = s.config().NewTokenBytes();
  std::vector<double> append, attention, step;
  int64_t allocs = 0, allocated = 0, copied = 0;
  for (size_t i = first; i < rec.size(); ++i) {
    allocs += rec[i].allocs;
    allocated += rec[i].bytes_allocated;
    copied += rec[i].bytes_copied;
    append.push_back(rec[i].append_us);
    attention.push_back(rec[i].attention_us);
    step.push_back(rec[i].step_us);
  }
  // Integer sums, one division: a constant count stays exact.
  const double n = static_cast<double>(rec.size() - first);
  row.allocs_per_step = static_cast<double>(allocs) / n;
  row.bytes_allocated_per_step = static_cast<double>(allocated) / n;
  row.bytes_copied_per_step = static_cast<double>(copied) / n;
  row.append_us = Median(append);
  row.attention_us = Median(attention);
  row.step_us = Median(step);
  row.peak_bytes = s.peak_bytes();
  return row;
}

// Every output of every step and layer, flattened (the naive session is gone
// by the time the in-place one runs, so peaks do not overlap).
std::vector<float> AllOutputs(const DecodeSession& s) {
  std::vector<float> out;
  const DecodeConfig& c = s.config();
  for (int64_t st = 0; st < s.steps_done(); ++st) {
    for (int64_t l = 0; l < c.layers; ++l) {
      const TensorView o = s.output(st, l);
      for (int64_t b = 0; b < c.batch; ++b)
        for (int64_t h = 0; h < c.q_heads; ++h)
          for (int64_t d = 0; d < c.head_dim; ++d)
            out.push_back(o.Load(b, h, 0, d));
    }
  }
  return out;
}

// Sequence b's query and output of layer 0 at the last step, and the
// one-sequence problem over `len` keys they belong to.
struct LastStepRow {
  AttentionProblem p;
  TensorView q, out;
};
LastStepRow LastStep(const DecodeSession& s, int64_t b) {
  const DecodeConfig& c = s.config();
  LastStepRow r;
  r.p.q_heads = c.q_heads;
  r.p.kv_heads = c.kv_heads;
  r.p.head_dim = c.head_dim;
  r.p.dtype = c.dtype;
  r.p.kv_dtype = c.kv_dtype;
  r.p.q_lens = {1};
  r.p.kv_lens = {s.length(b)};
  auto row = [&](const TensorView& t) {
    return t.Slice({b, 0, 0, 0}, {1, c.q_heads, 1, c.head_dim});
  };
  r.q = row(s.query(0));
  r.out = row(s.output(s.steps_done() - 1, 0));
  return r;
}

// What the last step of layer 0 is held to, per sequence: the f64 oracle and
// the tolerance model's bounds (reference/tolerance.h), computed on the
// naive session's concatenated K/V -- reference code, so its context is
// right by construction; the in-place session, on the same seed, appends
// the same tokens and must produce the same answers.
StatusOr<std::vector<reference::Truth>> LastStepTruth(
    const DecodeSession& naive) {
  const DecodeConfig& c = naive.config();
  std::vector<reference::Truth> truths;
  Tensor scratch =
      Tensor::Contiguous(DType::kF32, {1, c.q_heads, 1, c.head_dim});
  for (int64_t b = 0; b < c.batch; ++b) {
    const LastStepRow r = LastStep(naive, b);
    const KvCache::View kv = naive.naive_sequence(0, b);
    const AttentionArgs args{r.q,          kv.k,       kv.v,      TensorView{},
                             scratch.view, kv.k_scale, kv.v_scale};
    ATTNKIT_ASSIGN_OR_RETURN(reference::Truth t,
                             reference::ComputeTruth(r.p, args));
    truths.push_back(std::move(t));
  }
  return truths;
}

// The largest max-error bound over the sequences.
double MaxBound(const std::vector<reference::Truth>& truths) {
  double m = 0;
  for (const reference::Truth& t : truths) m = std::max(m, t.bounds.max_abs);
  return m;
}

// Holds session s's last step of layer 0 to the truths: "" when within the
// bounds, else what is wrong with the first sequence that is not.
std::string CheckLastStep(const DecodeSession& s,
                          const std::vector<reference::Truth>& truths) {
  for (int64_t b = 0; b < s.config().batch; ++b) {
    const LastStepRow r = LastStep(s, b);
    const reference::Truth& t = truths[static_cast<size_t>(b)];
    const reference::ErrorStats e =
        reference::MeasureError(r.p, t.oracle, r.out, t.bounds.max_abs);
    if (e.nonfinite > 0) {
      return "last step, sequence " + std::to_string(b) + ": " +
             std::to_string(e.nonfinite) +
             " NaN/Inf output(s) where the f64 oracle is finite";
    }
    if (!reference::WithinTolerance(e, t.bounds)) {
      return "last step, sequence " + std::to_string(b) +
             ", differs from the f64 oracle: max |err| " +
             std::to_string(e.max_abs) + " (bound " +
             std::to_string(t.bounds.max_abs) + "), mean |err| " +
             std::to_string(e.mean_abs) + " (bound " +
             std::to_string(t.bounds.mean_abs) + ")";
    }
  }
  return "";
}

}  // namespace

DecodeReportOptions DefaultDecodeOptions() {
  DecodeReportOptions o;
  o.config.layers = 4;
  o.config.batch = 1;
  o.config.q_heads = 32;
  o.config.kv_heads = 32;
  o.config.head_dim = 128;
  o.config.steps = 8;
  o.config.backend = "reference";
  return o;
}

namespace {

// What the flags collect beyond DecodeReportOptions: the backends named by
// --backend, in order, and the --plugin paths.
struct DecodeFlagState {
  std::vector<std::string> selected, plugins;
  backends::ResolveOptions resolve;
};

FlagParser DecodeFlags(DecodeReportOptions& o, DecodeFlagState& st) {
  FlagParser p(
      "attnkit decode [flags]",
      "Runs the same decode steps with the naive concatenating KV update\n"
      "(naive_concat: allocate len+1, copy the context, append) and with the\n"
      "in-place KV cache (in_place), per context length, and prints "
      "allocations,\nbytes allocated and copied, append / attention / step "
      "time per step and the\npeak heap held. Exit 1 if the in-place path "
      "allocates after its first step,\ncopies anything but the new tokens, "
      "or disagrees with the naive path or the\nf64 oracle; 2 on bad usage.");
  constexpr int64_t kBig = int64_t{1} << 30;
  DecodeConfig& c = o.config;
  p.Int64("--layers", &c.layers, 1, 4096, "attention layers (default 4)")
      .Int64("--batch", &c.batch, 1, 4096, "sequences (default 1)")
      .Int64("--heads", &c.q_heads, 1, 4096, "query heads (default 32)")
      .Int64("--kv-heads", &c.kv_heads, 1, 4096,
             "K/V heads, divides --heads (default: --heads)")
      .Int64("--head-dim", &c.head_dim, 1, kMaxHeadDim, "(default 128)")
      .Int64("--steps", &c.steps, 1, kBig,
             "decode steps per context length (default 8)")
      .Custom("--start-len", "L,...",
              "context lengths before the first step\n"
              "(default 1024,4096,16384)",
              [&o](std::string_view value) -> std::string {
                std::vector<int64_t> lens;
                std::string_view rest = value;
                while (true) {
                  const size_t comma = rest.find(',');
                  const std::string_view item = rest.substr(0, comma);
                  const auto v = ParseInt64(item);
                  if (!v || *v < 0 || *v > kBig) {
                    return "'" + std::string(item) + "' is not a length in " +
                           IntegerRange(0, kBig) +
                           "; expected a comma-separated list such as "
                           "1024,4096";
                  }
                  lens.push_back(*v);
                  if (comma == std::string_view::npos) break;
                  rest = rest.substr(comma + 1);
                }
                o.start_lens = std::move(lens);
                return "";
              })
      .Enum("--dtype", &c.dtype, kFloatDTypeNames,
            "storage of q, k, v (default f32)")
      .Custom("--kv-dtype", "i8",
              "KV cache storage when not --dtype's: i8 (quantized, one f32\n"
              "scale per token and kv head; the report adds the end-to-end\n"
              "error against an unquantized cache)",
              [&c](std::string_view value) -> std::string {
                const auto d = ParseDType(value);
                if (!d) return "not one of " + kDTypeNames.Names();
                c.kv_dtype = *d;
                return "";
              })
      .Enum("--layout", &c.layout, kKvLayoutNames,
            "KV cache layout (default bhsd)")
      .Custom("--backend", "A,B|all",
              "registered backends, run in turn (default reference)",
              [&st](std::string_view value) -> std::string {
                const auto names = backends::RegisteredBackendNames();
                std::vector<std::string> chosen;
                if (value == "all") {
                  chosen = names;
                } else {
                  std::string_view rest = value;
                  while (true) {
                    const size_t comma = rest.find(',');
                    const std::string name(rest.substr(0, comma));
                    if (std::find(names.begin(), names.end(), name) ==
                        names.end()) {
                      std::string known;
                      for (const auto& n : names) {
                        known += (known.empty() ? "" : ", ") + n;
                      }
                      return "'" + name +
                             "' is not a registered backend (have: " + known +
                             ", or all)";
                    }
                    chosen.push_back(name);
                    if (comma == std::string_view::npos) break;
                    rest = rest.substr(comma + 1);
                  }
                }
                for (const std::string& name : chosen) {
                  if (std::find(st.selected.begin(), st.selected.end(), name) !=
                      st.selected.end()) {
                    return "backend '" + name + "' is already in the list";
                  }
                  st.selected.push_back(name);
                }
                return "";
              })
      .Strings("--plugin", &st.plugins, "LIB.so",
               "a kernel loaded through plugin/attnkit_plugin.h (its\n"
               "append_kv hook, if any, is the in-place KV update being\n"
               "metered); repeatable; alone, only the plug-ins run",
               "needs a file name")
      .Custom("--max-memory", "BYTES",
              "refuse a configuration whose estimated memory (KV cache\n"
              "or naive contexts, prefill staging, outputs) exceeds this;\n"
              "K, M, G, T suffixes (default: 80% of MemAvailable)",
              [&o](std::string_view value) -> std::string {
                const auto n = ParseByteSize(value);
                if (!n) return "not a byte count in [1, 2^62] (e.g. 512M, 4G)";
                o.max_memory_bytes = *n;
                return "";
              })
      .Uint64("--seed", &c.seed, "(default 1)");
  backends::AddIsolationFlags(p, &st.resolve);
  p.NonEmptyString("--json", &o.json_path, "FILE",
                   "also write the rows as JSON");
  return p;
}

}  // namespace

std::string DecodeUsage() {
  DecodeReportOptions o = DefaultDecodeOptions();
  DecodeFlagState st;
  return DecodeFlags(o, st).Usage();
}

StatusOr<DecodeReportOptions> ParseDecodeFlags(int argc, char** argv) {
  DecodeReportOptions o = DefaultDecodeOptions();
  DecodeFlagState st;
  FlagParser flags = DecodeFlags(o, st);
  ATTNKIT_RETURN_IF_ERROR(flags.Parse(argc, argv));
  o.help = flags.help();
  if (!flags.Seen("--max-memory")) o.max_memory_bytes = DefaultMaxMemory();
  // Every registered backend in a worker: the default one too.
  if (st.selected.empty() && st.plugins.empty() &&
      st.resolve.isolation == backends::Isolation::kProcess) {
    st.selected.push_back(o.config.backend);
  }
  if (!st.selected.empty() || !st.plugins.empty()) {
    // The registry resolves plug-ins for every tool; each is loaded once
    // there, so a bad library is a flag error, and every session then makes
    // its own instance.
    auto sources =
        backends::ResolveBackends(st.plugins, std::nullopt, st.resolve);
    if (!sources.ok()) {
      return Status::InvalidArgument("--" + sources.status().message());
    }
    const size_t registered = backends::RegisteredBackends().size();
    for (const std::string& name : st.selected) {
      for (size_t i = 0; i < registered; ++i) {
        if ((*sources)[i].name == name) o.backends.push_back((*sources)[i]);
      }
    }
    for (size_t i = registered; i < sources->size(); ++i) {
      o.backends.push_back((*sources)[i]);
    }
  }
  if (!o.backends.empty()) {
    o.config.backend = o.backends.front().name;
    o.config.make_backend = o.backends.front().make;
  }
  if (!flags.Seen("--kv-heads")) o.config.kv_heads = o.config.q_heads;
  // --kv-dtype equal to --dtype is no quantization at all.
  if (o.config.kv_dtype == o.config.dtype) o.config.kv_dtype.reset();
  if (o.config.kv_dtype && *o.config.kv_dtype != DType::kI8) {
    return BadFlag("--kv-dtype", DTypeName(*o.config.kv_dtype),
                   "the cache stores --dtype=" +
                       std::string(DTypeName(o.config.dtype)) + " or i8");
  }
  if (o.config.q_heads % o.config.kv_heads != 0) {
    return BadFlag(
        "--kv-heads", std::to_string(o.config.kv_heads),
        "does not divide --heads=" + std::to_string(o.config.q_heads));
  }
  return o;
}

MemoryEstimate DecodeReportMemory(const DecodeConfig& config) {
  MemoryEstimate naive = config.Memory(DecodeMode::kNaiveConcat);
  MemoryEstimate in_place = config.Memory(DecodeMode::kInPlace);
  // One session at a time; the report keeps the naive outputs and copies
  // the in-place ones to compare them.
  MemoryEstimate e = naive.total() >= in_place.total() ? std::move(naive)
                                                       : std::move(in_place);
  e.Add(
      "report's output copies (2 x " + std::to_string(config.steps) +
          " steps x " + std::to_string(config.layers) + " layers x " +
          std::to_string(config.batch) + " batch x " +
          std::to_string(config.q_heads) + " q_heads x " +
          std::to_string(config.head_dim) + " head_dim x f32)",
      {2, static_cast<double>(config.steps), static_cast<double>(config.layers),
       static_cast<double>(config.batch), static_cast<double>(config.q_heads),
       static_cast<double>(config.head_dim), 4});
  if (config.KvDType() == DType::kI8) {
    // The end-to-end error's unquantized twin runs while the in-place
    // session still holds its cache.
    DecodeConfig twin = config;
    twin.kv_dtype.reset();
    e.Add("unquantized twin (in place, for the i8 cache's end-to-end error)",
          {twin.Memory(DecodeMode::kInPlace).total()});
  }
  return e;
}

namespace {

// Whether `backend` supports both sessions of `c`: OK, or its reason
// (INTERNAL when it could not be made or Supports threw: a failure, not a
// skip).
Status BackendSupports(const DecodeBackend& backend, const DecodeConfig& c) {
  auto made =
      backend.make ? backend.make() : backends::MakeBackend(backend.name);
  if (!made.ok()) {
    return Status::Internal("cannot make the backend: " +
                            made.status().ToString());
  }
  for (DecodeMode mode : {DecodeMode::kNaiveConcat, DecodeMode::kInPlace}) {
    Status s;
    try {
      s = (*made)->Supports(c.LargestProblem(mode));
    } catch (const std::exception& e) {
      s = Status::Internal(std::string("Supports threw: ") + e.what());
    }
    if (!s.ok()) {
      return Status(s.code(),
                    std::string(DecodeModeName(mode)) + ": " + s.message());
    }
  }
  return Status::Ok();
}

// For an i8 configuration's in-place row: the same session with the cache
// unquantized (same backend, seed, prompt and tokens), every output
// against `quantized`'s, into row.kv_quant_*. For information: quantizing
// the cache moves the outputs by design, so nothing here fails the report
// but a run that cannot happen.
Status QuantizationError(DecodeConfig c, const std::vector<float>& quantized,
                         DecodeReportRow& row, DecodeReport& report,
                         const std::string& name, std::FILE* log) {
  c.kv_dtype.reset();
  c.audit_cache = false;
  if (log != nullptr) {
    std::fprintf(log, "decode: %sthe same with an unquantized cache ...\n",
                 name.c_str());
    std::fflush(log);
  }
  auto session = DecodeSession::Create(c, DecodeMode::kInPlace);
  Status ran = session.ok() ? (*session)->Run() : session.status();
  if (!ran.ok()) {
    report.failures.push_back(name + "unquantized twin: " + ran.ToString());
    return Status::Ok();
  }
  const std::vector<float> plain = AllOutputs(**session);
  double worst = 0, largest = 0;
  for (size_t i = 0; i < plain.size() && i < quantized.size(); ++i) {
    const double d = std::fabs(static_cast<double>(quantized[i]) - plain[i]);
    worst = std::isnan(d) ? std::numeric_limits<double>::infinity()
                          : std::max(worst, d);
    largest = std::max(largest, std::fabs(static_cast<double>(plain[i])));
  }
  row.kv_quant_max_err = worst;
  row.kv_quant_rel_err = largest > 0 ? worst / largest : worst;
  return Status::Ok();
}

// One configuration of a backend in both modes: the naive session, then the
// in-place one (its cache audited), held to the guarantees; failures go to
// the report, a row to its table when `table_row`.
Status RunConfiguration(DecodeConfig c, int64_t len, const std::string& where,
                        bool counting, bool table_row, DecodeReport& report,
                        std::FILE* log) {
  c.audit_cache = true;
  std::vector<float> naive_out;
  std::vector<reference::Truth> truths;
  for (DecodeMode mode : {DecodeMode::kNaiveConcat, DecodeMode::kInPlace}) {
    if (log != nullptr) {
      std::fprintf(log, "decode: %s %s ...\n", where.c_str(),
                   std::string(DecodeModeName(mode)).c_str());
      std::fflush(log);
    }
    const std::string name =
        where + " " + std::string(DecodeModeName(mode)) + ": ";
    // A backend that fails a step -- an error, or its worker dying
    // (backends/remote.h) -- fails this row; the other backends' rows
    // still run.
    auto session = DecodeSession::Create(c, mode);
    Status ran = session.ok() ? (*session)->Run() : session.status();
    if (!ran.ok()) {
      report.failures.push_back(name + ran.ToString());
      break;
    }
    if (table_row) report.rows.push_back(Summarize(**session, len));
    if (mode == DecodeMode::kNaiveConcat) {
      naive_out = AllOutputs(**session);
      ATTNKIT_ASSIGN_OR_RETURN(truths, LastStepTruth(**session));
      if (std::string bad = CheckLastStep(**session, truths); !bad.empty()) {
        report.failures.push_back(name + bad);
      }
      continue;
    }
    // The in-place guarantees, step by step: the cache's bytes after every
    // append (the audit), no allocation, exactly the new tokens copied.
    if (const std::string& fault = (*session)->cache_fault(); !fault.empty()) {
      report.failures.push_back(name + "KV cache: " + fault);
    }
    const auto rec = (*session)->records();
    for (size_t s = 0; s < rec.size(); ++s) {
      if (s > 0 && counting && rec[s].allocs != 0) {
        report.failures.push_back(
            name + "step " + std::to_string(s) + " made " +
            std::to_string(rec[s].allocs) + " allocation(s) of " +
            std::to_string(rec[s].bytes_allocated) + " bytes, " +
            std::to_string(rec[s].append_allocs) +
            " in the KV update, the rest in attention "
            "(expected 0 after the first step; a "
            "backend sizes its workspaces in "
            "Backend::ReserveWorkspace)");
        break;
      }
    }
    for (size_t s = 0; s < rec.size(); ++s) {
      if (rec[s].bytes_copied != c.NewTokenBytes()) {
        report.failures.push_back(
            name + "step " + std::to_string(s) + " copied " +
            std::to_string(rec[s].bytes_copied) + " bytes, expected " +
            "new_token_bytes=" + std::to_string(c.NewTokenBytes()));
        break;
      }
    }
    // Every step and layer, naive against in place: the same backend on
    // the same values, each output within the max-error bound of the
    // oracle, so the two differ by at most twice that. Every step's
    // context is a prefix of the last step's, its values drawn from the
    // same distributions, so the last step's bound holds for it too.
    const std::vector<float> out = AllOutputs(**session);
    const double tol = 2 * MaxBound(truths);
    double worst = 0;
    size_t worst_at = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      const double d = std::fabs(static_cast<double>(out[i]) - naive_out[i]);
      if (!(d <= worst)) {  // NaN counts as worst
        worst = std::isnan(d) ? std::numeric_limits<double>::infinity() : d;
        worst_at = i;
      }
    }
    if (out.size() != naive_out.size() || !(worst <= tol)) {
      const size_t per_step =
          static_cast<size_t>(c.layers * c.batch * c.q_heads * c.head_dim);
      report.failures.push_back(name + "output differs from naive_concat by " +
                                std::to_string(worst) + " > tolerance " +
                                std::to_string(tol) + " at step " +
                                std::to_string(worst_at / per_step));
    }
    if (std::string bad = CheckLastStep(**session, truths); !bad.empty()) {
      report.failures.push_back(name + bad);
    }
    if (table_row && c.KvDType() == DType::kI8) {
      ATTNKIT_RETURN_IF_ERROR(
          QuantizationError(c, out, report.rows.back(), report, name, log));
    }
  }
  return Status::Ok();
}

// The contract configuration of the report's stack in `layout`: one layer,
// a ragged batch of three (one sequence empty), 4 query heads on 2 kv heads
// of 64 (enough to index every head and sequence wrong), 4 steps.
DecodeConfig ContractConfig(const DecodeConfig& base, KvLayout layout) {
  DecodeConfig c;
  c.layers = 1;
  c.batch = 3;
  c.q_heads = 4;
  c.kv_heads = 2;
  c.head_dim = 64;
  c.dtype = base.dtype;
  c.kv_dtype = base.kv_dtype;
  c.layout = layout;
  c.start_lens = {37, 0, 129};
  c.steps = 4;
  c.seed = base.seed;
  return c;
}

}  // namespace

StatusOr<DecodeReport> RunDecodeReport(const DecodeReportOptions& options,
                                       std::FILE* log) {
  DecodeReport report;
  // Every configuration is validated and its memory estimated before any
  // runs: a refusal costs nothing and names the sizes.
  for (const int64_t len : options.start_lens) {
    DecodeConfig c = options.config;
    c.start_len = len;
    c.start_lens.clear();
    ATTNKIT_RETURN_IF_ERROR(c.Validate());
    if (options.max_memory_bytes > 0) {
      ATTNKIT_RETURN_IF_ERROR(DecodeReportMemory(c).Check(
          options.max_memory_bytes,
          "decode configuration kv_len=" + std::to_string(len)));
    }
  }
  const bool counting = accounting::AllocHooksInstalled();
  if (!counting) {
    report.failures.push_back(
        "allocation hooks are not linked into this binary: allocations "
        "cannot be verified (link attnkit_alloc_hooks)");
  }
  std::vector<DecodeBackend> runs = options.backends;
  if (runs.empty()) {
    runs.push_back({options.config.backend,
                    backends::TraitsOf(options.config.backend),
                    options.config.make_backend});
  }
  for (const DecodeBackend& backend : runs) {
    for (const int64_t len : options.start_lens) {
      if (options.stop != nullptr && options.stop->load() != 0) {
        report.interrupted = true;
        return report;
      }
      DecodeConfig c = options.config;
      c.backend = backend.name;
      c.make_backend = backend.make;
      c.start_len = len;
      c.start_lens.clear();
      const std::string where =
          "kv_len=" + std::to_string(len) +
          " dtype=" + std::string(DTypeName(c.dtype)) +
          (c.kv_dtype ? " kv_dtype=" + std::string(DTypeName(*c.kv_dtype))
                      : std::string()) +
          " layout=" + std::string(KvLayoutName(c.layout)) +
          " backend=" + c.backend;
      SetActivity("running the decode report at " + where);
      // A backend that declines the configuration is skipped with its
      // reason, not failed.
      if (Status s = BackendSupports(backend, c); !s.ok()) {
        if (s.code() == StatusCode::kInternal) {  // could not even ask
          report.failures.push_back(where + ": " + s.ToString());
        } else {
          report.skipped.push_back(where + ": " + s.ToString());
        }
        continue;
      }
      ++report.compared;
      ATTNKIT_RETURN_IF_ERROR(
          RunConfiguration(c, len, where, counting, true, report, log));
    }
    // The cache contract beyond the table's shapes: a ragged batch of three
    // sequences (one empty) with grouped heads, in every layout, each
    // append audited byte for byte as the check's decode loops are.
    for (const KvLayout layout :
         {KvLayout::kBHSD, KvLayout::kBSHD, KvLayout::kTransposedV}) {
      DecodeConfig c = ContractConfig(options.config, layout);
      c.backend = backend.name;
      c.make_backend = backend.make;
      const std::string where =
          "cache contract (ragged batch, start_lens=37:0:129, layout=" +
          std::string(KvLayoutName(layout)) + ") backend=" + c.backend;
      if (Status s = BackendSupports(backend, c); !s.ok()) {
        (s.code() == StatusCode::kInternal ? report.failures : report.skipped)
            .push_back(where + ": " + s.ToString());
        continue;
      }
      ++report.contract_checked;
      ATTNKIT_RETURN_IF_ERROR(
          RunConfiguration(c, 0, where, counting, false, report, log));
    }
  }
  return report;
}

std::string FormatDecodeTable(const DecodeReport& report,
                              const DecodeReportOptions& options) {
  const DecodeConfig& c = options.config;
  std::ostringstream os;
  char line[512];
  // One block per backend, in the order they ran.
  std::vector<std::string> order;
  for (const DecodeReportRow& r : report.rows) {
    if (std::find(order.begin(), order.end(), r.backend) == order.end()) {
      order.push_back(r.backend);
    }
  }
  // No row (every configuration skipped or failed): the configuration's
  // header once, naming the backends asked for (not the default backend
  // when others were).
  if (order.empty()) {
    std::string names;
    for (const DecodeBackend& b : options.backends) {
      names += (names.empty() ? "" : ",") + b.name;
    }
    order.push_back(names.empty() ? c.backend : names);
  }
  for (const std::string& backend : order) {
    std::snprintf(
        line, sizeof(line),
        "decode: backend=%s layers=%lld batch=%lld heads=%lld "
        "kv_heads=%lld head_dim=%lld dtype=%s kv_dtype=%s layout=%s "
        "steps=%lld\n",
        backend.c_str(), static_cast<long long>(c.layers),
        static_cast<long long>(c.batch), static_cast<long long>(c.q_heads),
        static_cast<long long>(c.kv_heads), static_cast<long long>(c.head_dim),
        std::string(DTypeName(c.dtype)).c_str(),
        std::string(DTypeName(c.KvDType())).c_str(),
        std::string(KvLayoutName(c.layout)).c_str(),
        static_cast<long long>(c.steps));
    os << line;
    os << "per step, over steps 2.." << c.steps
       << " (counts: mean, times: median); peak: most heap bytes the session "
          "held (cache, inputs, transients)\n";
    std::snprintf(line, sizeof(line),
                  "%8s %-12s %11s %11s %11s %11s %11s %11s %11s\n", "kv_len",
                  "mode", "allocs", "allocated", "copied", "append_us",
                  "attn_us", "step_us", "peak");
    os << line;
    for (const DecodeReportRow& r : report.rows) {
      if (r.backend != backend) continue;
      std::snprintf(line, sizeof(line),
                    "%8lld %-12s %11.1f %11s %11s %11.1f %11.1f %11.1f %11s\n",
                    static_cast<long long>(r.kv_len),
                    std::string(DecodeModeName(r.mode)).c_str(),
                    r.allocs_per_step,
                    HumanBytes(r.bytes_allocated_per_step).c_str(),
                    HumanBytes(r.bytes_copied_per_step).c_str(), r.append_us,
                    r.attention_us, r.step_us,
                    HumanBytes(static_cast<double>(r.peak_bytes)).c_str());
      os << line;
      if (r.mode != DecodeMode::kInPlace) continue;
      // The ratio line for this kv_len: naive over in place.
      for (const DecodeReportRow& n : report.rows) {
        if (n.mode != DecodeMode::kNaiveConcat || n.kv_len != r.kv_len ||
            n.backend != backend) {
          continue;
        }
        std::snprintf(
            line, sizeof(line),
            "%8s naive/in_place: copied x%.0f (in place = new_token_bytes "
            "%s: %s), append x%.1f, step x%.2f\n",
            "",
            n.bytes_copied_per_step / std::max(r.bytes_copied_per_step, 1.0),
            HumanBytes(static_cast<double>(r.new_token_bytes)).c_str(),
            r.bytes_copied_per_step == static_cast<double>(r.new_token_bytes)
                ? "exact"
                : "MISMATCH",
            n.append_us / std::max(r.append_us, 1e-3),
            n.step_us / std::max(r.step_us, 1e-3));
        os << line;
      }
      if (!std::isnan(r.kv_quant_max_err)) {
        std::snprintf(line, sizeof(line),
                      "%8s i8 cache vs unquantized, end to end (information, "
                      "not a gate): max |out diff| %.3g = %.3g of max "
                      "|out|\n",
                      "", r.kv_quant_max_err, r.kv_quant_rel_err);
        os << line;
      }
    }
  }
  for (const std::string& f : report.failures) {
    os << "decode: FAIL " << f << "\n";
  }
  for (const std::string& s : report.skipped) {
    os << "decode: SKIP " << s << "\n";
  }
  if (report.interrupted) {
    os << "decode: INTERRUPTED before every row ran (no verdict on the "
          "rest)\n";
  } else if (report.failures.empty() && report.nothing_compared()) {
    os << "decode: NOTHING COMPARED (every configuration was skipped; exit "
       << kExitNothingChecked << ")\n";
  } else if (report.failures.empty()) {
    os << "decode: PASS (in place: 0 allocations after the first step, "
          "exactly new_token_bytes copied per step, the cache's bytes exact "
          "after every append, outputs match naive and the f64 oracle; "
       << report.contract_checked
       << " ragged cache-contract configuration(s) too)\n";
  }
  return os.str();
}

std::string DecodeReportJson(const DecodeReport& report,
                             const DecodeReportOptions& options) {
  const DecodeConfig& c = options.config;
  // Several backends: their names joined by commas (each row names its own).
  std::string backends;
  for (const DecodeBackend& b : options.backends) {
    backends += (backends.empty() ? "" : ",") + b.name;
  }
  if (backends.empty()) backends = c.backend;
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const DecodeReportRow& r : report.rows) {
    nlohmann::ordered_json row = {
        {"backend", r.backend},
        {"mode", DecodeModeName(r.mode)},
        {"kv_len", r.kv_len},
        {"allocs_per_step", r.allocs_per_step},
        {"bytes_allocated_per_step", r.bytes_allocated_per_step},
        {"bytes_copied_per_step", r.bytes_copied_per_step},
        {"new_token_bytes", r.new_token_bytes},
        {"append_us", r.append_us},
        {"attention_us", r.attention_us},
        {"step_us", r.step_us},
        {"peak_bytes", r.peak_bytes}};
    if (!std::isnan(r.kv_quant_max_err)) {  // an i8 cache's in-place row
      row["kv_quant_max_err"] = r.kv_quant_max_err;
      row["kv_quant_rel_err"] = r.kv_quant_rel_err;
    }
    rows.push_back(std::move(row));
  }
  const nlohmann::ordered_json doc = {
      {"schema", "attnkit.decode.v1"},
      {"config",
       {{"backend", backends},
        {"layers", c.layers},
        {"batch", c.batch},
        {"heads", c.q_heads},
        {"kv_heads", c.kv_heads},
        {"head_dim", c.head_dim},
        {"dtype", DTypeName(c.dtype)},
        {"kv_dtype", DTypeName(c.KvDType())},
        {"layout", KvLayoutName(c.layout)},
        {"steps", c.steps},
        {"seed", c.seed}}},
      {"interrupted", report.interrupted},
      {"rows", rows},
      {"contract_checked", report.contract_checked},
      {"failures", report.failures},
      {"skipped", report.skipped}};
  // dump() writes a non-finite number (a median of no steps) as null.
  return doc.dump(2) + "\n";
}

namespace {

int DecodeMainImpl(int argc, char** argv) {
  SetActivity("parsing the flags");
  auto options = ParseDecodeFlags(argc, argv);
  if (!options.ok()) {
    std::fprintf(stderr, "decode: %s\n", options.status().message().c_str());
    return 2;
  }
  if (options->help) {
    std::fputs(DecodeUsage().c_str(), stdout);
    return 0;
  }
  // The JSON path is checked (and a previous report removed) before the
  // run, and written whole at the end, interrupted or not.
  std::optional<ReportFile> json;
  if (!options->json_path.empty()) {
    auto f = ReportFile::Open(options->json_path, "--json");
    if (!f.ok()) {
      std::fprintf(stderr, "decode: %s\n", f.status().message().c_str());
      return 2;
    }
    json.emplace(std::move(f).value());
  }
  InstallStopHandlers();
  options->stop = &StopSignal();
  auto report = RunDecodeReport(*options, stderr);
  if (!report.ok()) {
    std::fprintf(stderr, "decode: %s\n", report.status().ToString().c_str());
    // A configuration the limits refuse is the flags' to change.
    const StatusCode code = report.status().code();
    return code == StatusCode::kResourceExhausted ||
                   code == StatusCode::kInvalidArgument
               ? kExitUsage
               : kExitFinding;
  }
  std::fputs(FormatDecodeTable(*report, *options).c_str(), stdout);
  if (json) {
    if (Status s = json->Commit(DecodeReportJson(*report, *options)); !s.ok()) {
      std::fprintf(stderr, "decode: %s\n", s.message().c_str());
      return 1;
    }
  }
  if (report->interrupted) {
    const int sig = StopSignal().load();
    std::fprintf(stderr,
                 "decode: interrupted by signal %d; the report "
                 "covers the rows that ran\n",
                 sig);
    return ExitStatusForSignal(sig);
  }
  if (!report->failures.empty()) return kExitFinding;
  return report->nothing_compared() ? kExitNothingChecked : kExitPass;
}

}  // namespace

int DecodeMain(int argc, char** argv) {
  // The last resort: every size is estimated and checked before it is
  // allocated, so this is an allocation the estimates missed.
  try {
    return DecodeMainImpl(argc, argv);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "decode: out of memory (std::bad_alloc) while %s; lower the "
                 "sizes or --max-memory\n",
                 Activity().c_str());
    return kExitFinding;
  }
}

}  // namespace attnkit::decode
