// attnkit's Python front end, the extension module attnkit._attnkit (the
// package python/attnkit re-exports it):
//   Problem                        the attention problem (runtime/problem.h)
//   reference.attention(q, k, v)   the naive Eigen reference on NumPy arrays
//   oracle.attention(q, k, v)      the f64 oracle
//   check(fn, tier=, seed=, ...)   the differential campaign with a Python
//                                  callable as the backend under test
// Arrays are read in place when their dtype and strides allow (float32, or
// uint16 holding bf16 bits with dtype="bf16"; element-aligned, non-negative
// strides; the head dim unit-stride, or the sequence dim for a transposed
// V); otherwise copied once, exactly. Nothing is rounded silently: float64
// inputs are refused, not narrowed.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "harness/campaign.h"
#include "harness/report.h"
#include "harness/runner.h"
#include "reference/oracle.h"
#include "reference/reference.h"
#include "runtime/backend.h"
#include "runtime/limits.h"
#include "runtime/problem.h"

namespace py = pybind11;

namespace attnkit::python {
namespace {

// A Status error as the Python exception a caller expects: bad input is a
// ValueError naming the field (Validate's message), the rest RuntimeError.
[[noreturn]] void Raise(const Status& s) {
  if (s.code() == StatusCode::kInvalidArgument ||
      s.code() == StatusCode::kOutOfRange) {
    throw py::value_error(s.message());
  }
  throw std::runtime_error(s.ToString());
}

template <typename E>
E ParseOr(std::optional<E> e, const char* field, const std::string& value,
          const char* allowed) {
  if (!e) {
    throw py::value_error(std::string(field) + "=" + value + " is not " +
                          allowed);
  }
  return *e;
}

AttentionProblem MakeProblem(
    int64_t batch, int64_t q_heads, int64_t kv_heads, int64_t head_dim,
    std::optional<std::vector<int64_t>> q_lens,
    std::optional<std::vector<int64_t>> kv_lens, const std::string& mask,
    int64_t window, std::optional<float> scale, const std::string& dtype,
    const std::string& layout, std::optional<std::string> kv_dtype) {
  AttentionProblem p;
  p.batch = batch;
  p.q_heads = q_heads;
  p.kv_heads = kv_heads;
  p.head_dim = head_dim;
  const size_t n = batch > 0 ? static_cast<size_t>(batch) : 0;
  p.q_lens = q_lens ? *q_lens : std::vector<int64_t>(n, 1);
  p.kv_lens = kv_lens ? *kv_lens : std::vector<int64_t>(n, 1);
  p.mask =
      ParseOr(ParseMaskKind(mask), "mask", mask, "none|causal|window|bias");
  p.window = window;
  p.scale = scale;
  p.dtype = ParseOr(ParseDType(dtype), "dtype", dtype, "f32|bf16");
  p.layout = ParseOr(ParseKvLayout(layout), "layout", layout, "bhsd|bshd|tv");
  if (kv_dtype) {
    p.kv_dtype =
        ParseOr(ParseDType(*kv_dtype), "kv_dtype", *kv_dtype, "f32|bf16|i8");
  }
  if (Status s = p.Validate(); !s.ok()) Raise(s);
  return p;
}

// --- Arrays <-> tensor views ------------------------------------------------

py::array NumpyAsArray(py::handle obj) {
  return py::module_::import("numpy").attr("asarray")(obj);
}

// The element type a view of `dtype` is read as from NumPy.
py::dtype NumpyDTypeOf(DType dtype) {
  return dtype == DType::kF32 ? py::dtype::of<float>()
                              : py::dtype::of<uint16_t>();
}

std::string ShapeText(const py::array& a) {
  std::string s = "(";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) {
    s += (i ? ", " : "") + std::to_string(a.shape(i));
  }
  return s + (a.ndim() == 1 ? ",)" : ")");
}

// A [batch, heads, seq, dim] view of `obj` in `dtype`, in place when its
// strides allow, else of an exact contiguous copy kept in *keep.
// `unit_dim`: the dim that must be unit-stride (3, or 2 for a transposed V).
TensorView ViewOf(const char* name, py::handle obj, DType dtype, int unit_dim,
                  bool writable, py::array* keep) {
  py::array a = NumpyAsArray(obj);
  if (a.ndim() != 4) {
    throw py::value_error(std::string(name) + ": shape " + ShapeText(a) +
                          " has " + std::to_string(a.ndim()) +
                          " dimensions; attnkit takes [batch, heads, seq, "
                          "head_dim] (or [batch, heads|1, q, kv] for bias)");
  }
  if (!a.dtype().is(NumpyDTypeOf(dtype))) {
    throw py::type_error(
        std::string(name) + ": dtype " + std::string(py::str(a.dtype())) +
        "; expected " + std::string(py::str(NumpyDTypeOf(dtype))) +
        (dtype == DType::kF32
             ? " (convert explicitly, e.g. x.astype(np.float32): attnkit "
               "never narrows a value silently)"
             : " holding bf16 bits (dtype='bf16')"));
  }
  const py::ssize_t item = a.itemsize();
  bool in_place = a.attr("flags").attr("aligned").cast<bool>();
  for (int i = 0; i < 4; ++i) {
    if (a.strides(i) < 0 || a.strides(i) % item != 0) in_place = false;
  }
  if (a.shape(unit_dim) > 1 && a.strides(unit_dim) != item) in_place = false;
  if (writable && !a.writeable()) {
    throw py::value_error(std::string(name) + ": array is read-only");
  }
  if (!in_place) {
    if (writable) {
      throw py::value_error(std::string(name) +
                            ": must be written in place, but its strides "
                            "are not element strides with a unit-stride "
                            "head dim");
    }
    a = py::module_::import("numpy").attr("ascontiguousarray")(a);
  }
  TensorView t;
  t.data = a.mutable_data();
  t.dtype = dtype;
  for (int i = 0; i < 4; ++i) {
    t.shape[i] = a.shape(i);
    t.strides[i] = a.strides(i) / item;
  }
  *keep = std::move(a);
  return t;
}

// A NumPy view of `t` (no copy, valid while `t`'s memory is), in the
// dtype NumpyDTypeOf gives.
py::array ArrayOf(const TensorView& t, DType as) {
  std::vector<py::ssize_t> shape(t.shape.begin(), t.shape.end());
  std::vector<py::ssize_t> strides(4);
  const int64_t item = DTypeSize(as);
  for (int i = 0; i < 4; ++i) strides[i] = t.strides[i] * item;
  if (t.NumElements() == 0) return py::array(NumpyDTypeOf(as), shape);
  // A non-array base: the array does not own the memory and stays writable
  // (the runner's input guard, not NumPy, catches writes to inputs).
  return py::array(NumpyDTypeOf(as), shape, strides, t.data, py::none());
}

// An i8 K or V view dequantized into a new float32 [b, h, s, d] array:
// element e of row (b, h, j) is int8 * scales[b, h, j] rounded once to f32,
// as the reference backend dequantizes (the f64 oracle takes the exact
// product: they differ by at most 2^-24 relative, far inside every bound).
py::array Dequantized(const TensorView& t, const TensorView& scales) {
  py::array_t<float> a({t.shape[0], t.shape[1], t.shape[2], t.shape[3]});
  auto w = a.mutable_unchecked<4>();
  const auto* q = t.As<int8_t>();
  for (int64_t i0 = 0; i0 < t.shape[0]; ++i0) {
    for (int64_t i1 = 0; i1 < t.shape[1]; ++i1) {
      for (int64_t i2 = 0; i2 < t.shape[2]; ++i2) {
        const float s = scales.As<float>()[scales.Offset(i0, i1, i2, 0)];
        for (int64_t i3 = 0; i3 < t.shape[3]; ++i3) {
          w(i0, i1, i2, i3) =
              static_cast<float>(q[t.Offset(i0, i1, i2, i3)]) * s;
        }
      }
    }
  }
  return a;
}

// A bf16 view widened exactly to a new float32 [b, h, s, d] array.
py::array Widened(const TensorView& t) {
  py::array_t<float> a({t.shape[0], t.shape[1], t.shape[2], t.shape[3]});
  auto w = a.mutable_unchecked<4>();
  for (int64_t i0 = 0; i0 < t.shape[0]; ++i0) {
    for (int64_t i1 = 0; i1 < t.shape[1]; ++i1) {
      for (int64_t i2 = 0; i2 < t.shape[2]; ++i2) {
        for (int64_t i3 = 0; i3 < t.shape[3]; ++i3) {
          w(i0, i1, i2, i3) = t.Load(i0, i1, i2, i3);
        }
      }
    }
  }
  return a;
}

// The problem and views of a reference/oracle call on arrays. Shapes come
// from the arrays: q [b, hq, sq, d], k and v [b, hkv, skv, d] (v may be a
// transposed view: unit stride along the sequence), bias [b, hq|1, sq, skv];
// lengths default to the arrays' sequence extents.
struct ArrayCall {
  AttentionProblem problem;
  AttentionArgs args;
  py::array keep[4];
};

ArrayCall MakeArrayCall(py::handle q, py::handle k, py::handle v,
                        std::optional<std::vector<int64_t>> q_lens,
                        std::optional<std::vector<int64_t>> kv_lens,
                        const std::string& mask, int64_t window,
                        py::handle bias, std::optional<float> scale,
                        const std::string& dtype) {
  ArrayCall c;
  const DType dt = ParseOr(ParseDType(dtype), "dtype", dtype, "f32|bf16");
  c.args.q = ViewOf("q", q, dt, 3, false, &c.keep[0]);
  c.args.k = ViewOf("k", k, dt, 3, false, &c.keep[1]);
  // V as given when it is head-dim or sequence contiguous (a transposed-V
  // cache); otherwise copied head-dim contiguous.
  py::array va = NumpyAsArray(v);
  const bool tv = va.ndim() == 4 && va.shape(3) > 1 &&
                  va.strides(3) != va.itemsize() && va.shape(2) > 1 &&
                  va.strides(2) == va.itemsize();
  c.args.v = ViewOf("v", va, dt, tv ? 2 : 3, false, &c.keep[2]);
  const bool has_bias = !bias.is_none();
  if (has_bias) {
    c.args.bias = ViewOf("bias", bias, DType::kF32, 3, false, &c.keep[3]);
  }
  const std::string m = mask == "none" && has_bias ? "bias" : mask;
  const int64_t b = c.args.q.shape[0];
  c.problem =
      MakeProblem(b, c.args.q.shape[1], c.args.k.shape[1], c.args.q.shape[3],
                  q_lens.value_or(std::vector<int64_t>(static_cast<size_t>(b),
                                                       c.args.q.shape[2])),
                  kv_lens.value_or(std::vector<int64_t>(static_cast<size_t>(b),
                                                        c.args.k.shape[2])),
                  m, window, scale, dtype, tv ? "tv" : "bhsd", std::nullopt);
  return c;
}

py::array_t<float> ReferenceAttention(
    py::handle q, py::handle k, py::handle v,
    std::optional<std::vector<int64_t>> q_lens,
    std::optional<std::vector<int64_t>> kv_lens, const std::string& mask,
    int64_t window, py::handle bias, std::optional<float> scale,
    const std::string& dtype) {
  ArrayCall c = MakeArrayCall(q, k, v, std::move(q_lens), std::move(kv_lens),
                              mask, window, bias, scale, dtype);
  const TensorView& qv = c.args.q;
  py::array_t<float> out({qv.shape[0], qv.shape[1], qv.shape[2], qv.shape[3]});
  std::memset(out.mutable_data(), 0, static_cast<size_t>(out.nbytes()));
  c.args.out.data = out.mutable_data();
  c.args.out.shape = qv.shape;
  c.args.out.strides = ContiguousStrides(qv.shape);
  if (Status s = ValidateArgs(c.problem, c.args); !s.ok()) Raise(s);
  Status s;
  {
    py::gil_scoped_release release;
    s = reference::Attention(c.problem, c.args);
  }
  if (!s.ok()) Raise(s);
  return out;
}

py::array_t<double> OracleAttention(py::handle q, py::handle k, py::handle v,
                                    std::optional<std::vector<int64_t>> q_lens,
                                    std::optional<std::vector<int64_t>> kv_lens,
                                    const std::string& mask, int64_t window,
                                    py::handle bias, std::optional<float> scale,
                                    const std::string& dtype) {
  ArrayCall c = MakeArrayCall(q, k, v, std::move(q_lens), std::move(kv_lens),
                              mask, window, bias, scale, dtype);
  const TensorView& qv = c.args.q;
  // The oracle writes [b, hq, max_q_len, d]; the result keeps q's extent.
  const int64_t mq = c.problem.max_q_len();
  // The oracle validates the whole call, out included, but never touches
  // out: a view of the right shape over no element's worth of reads.
  py::array_t<float> unused(
      {qv.shape[0], qv.shape[1], qv.shape[2], qv.shape[3]});
  c.args.out.data = unused.mutable_data();
  c.args.out.shape = qv.shape;
  c.args.out.strides = ContiguousStrides(qv.shape);
  std::vector<double> dense;
  Status s;
  {
    py::gil_scoped_release release;
    s = reference::OracleAttention(c.problem, c.args, &dense);
  }
  if (!s.ok()) Raise(s);
  py::array_t<double> out({qv.shape[0], qv.shape[1], qv.shape[2], qv.shape[3]});
  std::memset(out.mutable_data(), 0, static_cast<size_t>(out.nbytes()));
  auto w = out.mutable_unchecked<4>();
  const int64_t d = qv.shape[3];
  for (int64_t b = 0; b < qv.shape[0]; ++b) {
    for (int64_t h = 0; h < qv.shape[1]; ++h) {
      for (int64_t i = 0; i < mq; ++i) {
        const double* row =
            &dense[static_cast<size_t>(((b * qv.shape[1] + h) * mq + i) * d)];
        for (int64_t e = 0; e < d; ++e) w(b, h, i, e) = row[e];
      }
    }
  }
  return out;
}

// --- The Python callable as a backend ---------------------------------------

// How bf16 problems reach the callable: NumPy has no bfloat16.
enum class Bf16Mode : uint8_t { kFloat32, kBits, kSkip };
// How i8 K/V (a quantized KV cache) reach it: dequantized float32 arrays
// (what the oracle computes on), or not at all.
enum class KvI8Mode : uint8_t { kDequantize, kSkip };

class PythonBackend final : public Backend {
 public:
  PythonBackend(py::object fn, py::object supports, std::string name,
                Bf16Mode bf16, KvI8Mode kv_i8, std::atomic<int>* stop)
      : fn_(std::move(fn)),
        supports_(std::move(supports)),
        name_(std::move(name)),
        bf16_(bf16),
        kv_i8_(kv_i8),
        stop_(stop) {}

  std::string_view name() const override { return name_; }
  bool interrupted_by_keyboard() const { return keyboard_interrupt_; }

  Status Supports(const AttentionProblem& p) const override {
    if (p.quantized_kv() && kv_i8_ == KvI8Mode::kSkip) {
      return Status::Unimplemented(
          "kv_dtype=i8 problems (check(kv_i8='skip'))");
    }
    if (p.dtype == DType::kBF16 && bf16_ == Bf16Mode::kSkip) {
      return Status::Unimplemented("bf16 problems (check(bf16='skip'))");
    }
    if (supports_.is_none()) return Status::Ok();
    py::gil_scoped_acquire gil;
    try {
      py::object r = supports_(p);
      if (r.is_none() || (py::isinstance<py::bool_>(r) && r.cast<bool>())) {
        return Status::Ok();
      }
      if (py::isinstance<py::str>(r)) {
        return Status::Unimplemented(r.cast<std::string>());
      }
      if (py::isinstance<py::bool_>(r)) {
        return Status::Unimplemented("supports() returned False");
      }
      // Neither a verdict nor a reason: the next call reports it.
      pending_ = "supports() returned " + std::string(py::repr(r)) +
                 "; expected True/None (run it), False or a reason (skip)";
    } catch (py::error_already_set& e) {
      Interrupted(e);
      pending_ = "supports() raised " + std::string(e.what());
    }
    // An exception in supports() is a finding, never a skip: the case runs
    // and its attention call returns the error.
    return Status::Ok();
  }

  Status Attention(const AttentionProblem& p,
                   const AttentionArgs& args) override {
    if (p.quantized_kv() && kv_i8_ == KvI8Mode::kSkip) return Supports(p);
    if (!pending_.empty()) {
      return Status::Internal(std::exchange(pending_, std::string()));
    }
    py::gil_scoped_acquire gil;
    // Ctrl-C while the harness ran: Python's handler only set a flag.
    if (PyErr_CheckSignals() != 0) {
      py::error_already_set e;
      Interrupted(e);
      return Status::Internal("interrupted: " + std::string(e.what()));
    }
    try {
      py::object bias = py::none();
      if (p.mask == MaskKind::kBias) bias = ArrayOf(args.bias, DType::kF32);
      // A quantized cache's K/V -- a decode loop's cache prefix included --
      // dequantized per call (a Python backend is not metered).
      py::object k = p.quantized_kv() ? Dequantized(args.k, args.k_scale)
                                      : Input(args.k, p.dtype);
      py::object v = p.quantized_kv() ? Dequantized(args.v, args.v_scale)
                                      : Input(args.v, p.dtype);
      py::object result = fn_(p, Input(args.q, p.dtype), k, v, bias);
      return CopyResult(p, result, args.out);
    } catch (py::error_already_set& e) {
      Interrupted(e);
      return Status::Internal(name_ + " raised " + e.what());
    }
  }

 private:
  py::array Input(const TensorView& t, DType dtype) const {
    if (dtype == DType::kBF16 && bf16_ == Bf16Mode::kFloat32) {
      return Widened(t);
    }
    return ArrayOf(t, dtype);
  }

  void Interrupted(const py::error_already_set& e) const {
    if (e.matches(PyExc_KeyboardInterrupt)) {
      keyboard_interrupt_ = true;
      stop_->store(SIGINT);
    }
  }

  // The callable's result into out's rows i < q_lens[b]; rows past them are
  // the callable's to fill with anything (the contract's padding).
  Status CopyResult(const AttentionProblem& p, const py::object& result,
                    const TensorView& out) const {
    const std::string expected =
        "(" + std::to_string(p.batch) + ", " + std::to_string(p.q_heads) +
        ", >=" + std::to_string(p.max_q_len()) + ", " +
        std::to_string(p.head_dim) + ") [batch, q_heads, q_len, head_dim]";
    if (result.is_none()) {
      return Status::InvalidArgument(name_ + " returned None; expected " +
                                     "an array of shape " + expected);
    }
    py::array a;
    try {
      a = NumpyAsArray(result);
    } catch (py::error_already_set& e) {
      return Status::InvalidArgument(
          name_ + " returned " + std::string(py::repr(result.get_type())) +
          ", which numpy.asarray refused: " + e.what());
    }
    if (a.ndim() != 4 || a.shape(0) != p.batch || a.shape(1) != p.q_heads ||
        a.shape(2) < p.max_q_len() || a.shape(3) != p.head_dim) {
      return Status::InvalidArgument(name_ + " returned shape " + ShapeText(a) +
                                     "; expected " + expected);
    }
    if (a.dtype().kind() != 'f') {
      return Status::InvalidArgument(
          name_ + " returned dtype " + std::string(py::str(a.dtype())) +
          "; expected a floating-point array (float32, or wider: it is "
          "rounded to float32 as the output of a kernel would be)");
    }
    py::array_t<float> f = a.attr("astype")(py::dtype::of<float>());
    auto r = f.unchecked<4>();
    for (int64_t b = 0; b < p.batch; ++b) {
      for (int64_t h = 0; h < p.q_heads; ++h) {
        for (int64_t i = 0; i < p.q_lens[b]; ++i) {
          float* row = out.As<float>() + out.Offset(b, h, i, 0);
          for (int64_t e = 0; e < p.head_dim; ++e) row[e] = r(b, h, i, e);
        }
      }
    }
    return Status::Ok();
  }

  py::object fn_, supports_;
  std::string name_;
  Bf16Mode bf16_;
  KvI8Mode kv_i8_;
  std::atomic<int>* stop_;
  mutable std::string pending_;
  mutable bool keyboard_interrupt_ = false;
};

// --- check ------------------------------------------------------------------

struct Failure {
  std::string backend, outcome;
  std::string case_text;      // the (shrunk) case: what `repro=` replays
  std::string original_case;  // as the campaign drew it
  bool shrunk = false;
  int64_t step = -1;
  AttentionProblem problem;  // of the failing call
  double max_abs_error = 0, allowed_max_abs = 0;
  double mean_abs_error = 0, allowed_mean_abs = 0;
  std::string message;     // the backend's message (error, stray write...)
  std::string reproducer;  // a Python line that replays the case
  std::string text;        // the full report, as the CLI prints it
};

struct Report {
  std::string tier;
  uint64_t seed = 0;
  int64_t cases = 0, skipped = 0;
  double seconds = 0, cpu_seconds = 0;
  bool interrupted = false;
  int exit_code = 0;
  std::vector<std::string> why;  // one line per reason it did not pass
  std::string summary;
  std::vector<Failure> failures;
};

std::string PythonLiteral(const std::string& s) {
  return std::string(py::repr(py::str(s)));
}

Report MakeReport(const harness::CampaignResult& res, const std::string& tier,
                  uint64_t seed, const std::string& name,
                  const std::string& repro_args) {
  Report r;
  r.tier = tier;
  r.seed = seed;
  r.cases = res.cases;
  r.seconds = res.seconds;
  r.cpu_seconds = res.cpu_seconds;
  r.interrupted = res.interrupted;
  for (const harness::BackendSummary& b : res.backends) r.skipped += b.skipped;
  harness::JsonContext ctx;
  ctx.tier = tier;
  ctx.seed = seed;
  ctx.named_backends = {name};
  r.exit_code = harness::CheckVerdict(res, ctx, &r.why);
  r.summary = harness::FormatSummary(res);
  if (res.fatal) r.summary += "HARNESS ERROR: " + res.fatal_message + "\n";
  if (r.exit_code == kExitPass) {
    r.summary += "check: PASS\n";
  } else {
    for (const std::string& w : r.why) {
      r.summary +=
          (w.starts_with("NOTHING CHECKED") ? "check: " : "check: FAIL: ") + w +
          "\n";
    }
  }
  for (const harness::FailureReport& f : res.reports) {
    Failure x;
    x.backend = f.backend;
    x.outcome = std::string(harness::OutcomeName(f.result.outcome));
    x.case_text = f.shrunk.ToString();
    x.original_case = f.original.ToString();
    x.shrunk = f.was_shrunk;
    x.step = f.result.step;
    x.problem = f.result.problem;
    x.max_abs_error = f.result.error.max_abs;
    x.allowed_max_abs = f.result.bounds.max_abs;
    x.mean_abs_error = f.result.error.mean_abs;
    x.allowed_mean_abs = f.result.bounds.mean_abs;
    x.message = f.result.message;
    x.reproducer = "attnkit.check(" + name +
                   ", repro=" + PythonLiteral(x.case_text) + repro_args + ")";
    x.text = harness::FormatFailureWith(f, x.reproducer);
    r.failures.push_back(std::move(x));
  }
  return r;
}

Report Check(py::object fn, const std::string& tier_name, uint64_t seed,
             std::optional<int64_t> cases, double time_budget,
             std::optional<std::string> name, const std::string& bf16,
             const std::string& kv_i8, py::object supports,
             std::optional<std::string> repro,
             std::pair<int64_t, int64_t> shard, bool progress) {
  if (!PyCallable_Check(fn.ptr())) {
    throw py::type_error("check: fn is " + std::string(py::repr(fn)) +
                         ", not a callable");
  }
  if (!supports.is_none() && !PyCallable_Check(supports.ptr())) {
    throw py::type_error("check: supports is not a callable");
  }
  auto tier = harness::ParseTier(tier_name);
  if (!tier.ok()) Raise(tier.status());
  const Bf16Mode mode =
      bf16 == "float32" ? Bf16Mode::kFloat32
      : bf16 == "bits"  ? Bf16Mode::kBits
      : bf16 == "skip"
          ? Bf16Mode::kSkip
          : throw py::value_error("bf16=" + bf16 + " is not float32|bits|skip");
  const KvI8Mode kv_mode =
      kv_i8 == "dequantize" ? KvI8Mode::kDequantize
      : kv_i8 == "skip"
          ? KvI8Mode::kSkip
          : throw py::value_error("kv_i8=" + kv_i8 + " is not dequantize|skip");
  if (cases && *cases < 0) {
    throw py::value_error("cases=" + std::to_string(*cases) + " is negative");
  }
  if (time_budget < 0) {
    throw py::value_error("time_budget=" + std::to_string(time_budget) +
                          " is negative");
  }
  if (shard.second < 1 || shard.first < 0 || shard.first >= shard.second) {
    throw py::value_error("shard=(" + std::to_string(shard.first) + ", " +
                          std::to_string(shard.second) +
                          ") is not (i, n) with 0 <= i < n");
  }
  std::string label;
  if (name) {
    label = *name;
  } else if (py::hasattr(fn, "__name__")) {
    label = py::str(fn.attr("__name__"));
  } else {
    label = "python";
  }
  const std::string fn_text = py::hasattr(fn, "__name__") ? label : "fn";
  std::string repro_args;
  if (mode != Bf16Mode::kFloat32) repro_args += ", bf16=" + PythonLiteral(bf16);
  if (kv_mode != KvI8Mode::kDequantize) {
    repro_args += ", kv_i8=" + PythonLiteral(kv_i8);
  }
  if (!supports.is_none()) repro_args += ", supports=...";

  std::atomic<int> stop{0};
  PythonBackend backend(fn, supports, label, mode, kv_mode, &stop);
  Backend* backends[] = {&backend};
  harness::CampaignResult res;
  if (repro) {
    auto c = harness::ParseCase(*repro);
    if (!c.ok()) Raise(c.status());
    StatusOr<std::vector<harness::CheckResult>> results =
        Status::Internal("not run");
    {
      py::gil_scoped_release release;
      results = harness::RunCase(*c, backends);
    }
    if (!results.ok()) Raise(results.status());
    const harness::CheckResult& one = results->front();
    res.cases = 1;
    harness::BackendSummary s;
    s.name = label;
    s.skipped = one.outcome == harness::Outcome::kSkipped ? 1 : 0;
    s.cases = 1 - s.skipped;
    s.failures = one.failed() ? 1 : 0;
    s.worst_ratio = one.ratio;
    s.worst_case = c->ToString();
    s.seconds = one.seconds;
    res.seconds = one.seconds;
    res.backends.push_back(s);
    if (one.failed()) {
      res.failures = 1;
      res.reports.push_back({label, *c, *c, one});
    }
  } else {
    harness::CampaignOptions o;
    o.tier = *tier;
    o.seed = seed;
    o.cases = cases ? *cases : harness::DefaultCases(*tier);
    o.time_budget_s = time_budget;
    o.shard_index = shard.first;
    o.shard_count = shard.second;
    o.max_memory_bytes = DefaultMaxMemory();
    o.blocks = false;  // a callable is an attention, not a block
    o.progress = progress ? harness::Progress::kTty : harness::Progress::kOff;
    o.stop = &stop;
    py::gil_scoped_release release;
    res = harness::RunCampaign(o, backends);
  }
  if (backend.interrupted_by_keyboard()) {
    PyErr_SetNone(PyExc_KeyboardInterrupt);
    throw py::error_already_set();
  }
  return MakeReport(res, tier_name, seed, fn_text, repro_args);
}

std::string FailureRepr(const Failure& f) {
  return "<attnkit.Failure " + f.outcome + " [" + f.backend + "] " +
         f.case_text + ">";
}

}  // namespace
}  // namespace attnkit::python

PYBIND11_MODULE(_attnkit, m) {
  using namespace attnkit;
  using namespace attnkit::python;
  m.doc() =
      "attnkit: the naive reference, the f64 oracle and the "
      "differential check of attention kernels";
  m.attr("__version__") = ATTNKIT_VERSION;

  py::class_<AttentionProblem>(m, "Problem", R"(An attention problem.

Shapes: q and out [batch, q_heads, q_len, head_dim], k and v [batch, kv_heads,
kv_len, head_dim] (GQA: q_heads % kv_heads == 0), sequence b has q_lens[b]
queries and kv_lens[b] keys (ragged batches), the query block aligned to the
end of its context. mask: none | causal | window (the last `window` keys up to
and including the query's position) | bias (an additive f32 [batch, q_heads
or 1, q_len, kv_len] tensor, -inf hides a key). A row that sees no key is
zeros. scale defaults to 1/sqrt(head_dim). dtype: storage of q, k, v (f32 or
bf16; math is f32). kv_dtype: the storage of k and v when it differs: i8 (a
quantized KV cache, one f32 scale per token and kv head; the property reads
dtype when unset). layout: how K/V lie in memory (bhsd, bshd, tv: V
transposed). A bad field raises ValueError naming it.)")
      .def(py::init(&MakeProblem), py::arg("batch") = 1, py::arg("q_heads") = 1,
           py::arg("kv_heads") = 1, py::arg("head_dim") = 64,
           py::arg("q_lens") = py::none(), py::arg("kv_lens") = py::none(),
           py::arg("mask") = "none", py::arg("window") = 0,
           py::arg("scale") = py::none(), py::arg("dtype") = "f32",
           py::arg("layout") = "bhsd", py::arg("kv_dtype") = py::none())
      .def_static(
          "parse",
          [](const std::string& text) {
            auto p = ParseProblem(text);
            if (!p.ok()) Raise(p.status());
            return *p;
          },
          py::arg("text"), "The problem of its one-line form (str(problem)).")
      .def_readonly("batch", &AttentionProblem::batch)
      .def_readonly("q_heads", &AttentionProblem::q_heads)
      .def_readonly("kv_heads", &AttentionProblem::kv_heads)
      .def_readonly("head_dim", &AttentionProblem::head_dim)
      .def_readonly("q_lens", &AttentionProblem::q_lens)
      .def_readonly("kv_lens", &AttentionProblem::kv_lens)
      .def_readonly("window", &AttentionProblem::window)
      .def_property_readonly("mask",
                             [](const AttentionProblem& p) {
                               return std::string(MaskKindName(p.mask));
                             })
      .def_property_readonly("dtype",
                             [](const AttentionProblem& p) {
                               return std::string(DTypeName(p.dtype));
                             })
      .def_property_readonly(
          "kv_dtype",
          [](const AttentionProblem& p) {
            return std::string(DTypeName(p.KvDType()));
          },
          "The storage of k and v: dtype's, or 'i8' (a quantized KV cache; "
          "check() hands fn the dequantized values as float32).")
      .def_property_readonly("quantized_kv", &AttentionProblem::quantized_kv)
      .def_property_readonly("layout",
                             [](const AttentionProblem& p) {
                               return std::string(KvLayoutName(p.layout));
                             })
      .def_property_readonly("scale", &AttentionProblem::EffectiveScale,
                             "The scale in effect (1/sqrt(head_dim) unless "
                             "given).")
      .def_property_readonly("group_size", &AttentionProblem::group_size,
                             "Query heads per kv head: query head h reads kv "
                             "head h // group_size.")
      .def_property_readonly("max_q_len", &AttentionProblem::max_q_len)
      .def_property_readonly("max_kv_len", &AttentionProblem::max_kv_len)
      .def_property_readonly("flops", &AttentionProblem::Flops)
      .def(
          "visible",
          [](const AttentionProblem& p, int64_t b) {
            if (b < 0 || b >= p.batch) {
              throw py::index_error("b=" + std::to_string(b) +
                                    " is not a sequence of batch " +
                                    std::to_string(p.batch));
            }
            const int64_t nq = p.q_lens[b], nk = p.kv_lens[b];
            py::array_t<bool> a({nq, nk});
            auto w = a.mutable_unchecked<2>();
            for (int64_t i = 0; i < nq; ++i) {
              const KeyRange r = VisibleKeys(p, b, i);
              for (int64_t j = 0; j < nk; ++j) {
                w(i, j) = j >= r.begin && j < r.end;
              }
            }
            return a;
          },
          py::arg("b"),
          "Which keys each query of sequence b sees under the mask's "
          "structure: bool [q_lens[b], kv_lens[b]] (a bias's -inf entries "
          "hide more).")
      .def("__str__", &AttentionProblem::ToString)
      .def("__repr__", [](const AttentionProblem& p) {
        return "attnkit.Problem.parse('" + p.ToString() + "')";
      });

  const char* kArrayDoc = R"(Attention on NumPy arrays.

q [batch, q_heads, q_len, head_dim], k and v [batch, kv_heads, kv_len,
head_dim] (v may be a transposed view, unit-stride along the sequence),
float32 -- or uint16 arrays of bf16 bits with dtype='bf16'. Read in place
where the strides allow, else copied exactly; float64 is refused (never
narrowed silently). q_lens/kv_lens default to the arrays' sequence extents;
bias (float32 [batch, q_heads or 1, q_len, kv_len]) implies mask='bias'.
Rows past q_lens[b] of the result are zeros.)";
  // reference.attention and oracle.attention: one signature.
  auto def_attention = [&](const char* name, const char* doc, auto fn) {
    m.def_submodule(name, doc).def(
        "attention", fn, kArrayDoc, py::arg("q"), py::arg("k"), py::arg("v"),
        py::kw_only(), py::arg("q_lens") = py::none(),
        py::arg("kv_lens") = py::none(), py::arg("mask") = "none",
        py::arg("window") = 0, py::arg("bias") = py::none(),
        py::arg("scale") = py::none(), py::arg("dtype") = "f32");
  };
  def_attention("reference", "The naive Eigen reference.", &ReferenceAttention);
  def_attention("oracle", "The f64 oracle every backend is measured against.",
                &OracleAttention);

  py::class_<Failure>(m, "Failure", "One failing case, shrunk.")
      .def_readonly("backend", &Failure::backend)
      .def_readonly("outcome", &Failure::outcome,
                    "mismatch, nonfinite, kv_cache, stray_write, "
                    "input_write or error")
      .def_readonly("case", &Failure::case_text,
                    "The (shrunk) case: check(fn, repro=case) replays it.")
      .def_readonly("original_case", &Failure::original_case)
      .def_readonly("shrunk", &Failure::shrunk)
      .def_readonly("step", &Failure::step,
                    "The decode step of the failure (-1: a plain case).")
      .def_readonly("problem", &Failure::problem)
      .def_readonly("max_abs_error", &Failure::max_abs_error)
      .def_readonly("allowed_max_abs", &Failure::allowed_max_abs)
      .def_readonly("mean_abs_error", &Failure::mean_abs_error)
      .def_readonly("allowed_mean_abs", &Failure::allowed_mean_abs)
      .def_readonly("message", &Failure::message)
      .def_readonly("reproducer", &Failure::reproducer)
      .def_readonly("text", &Failure::text)
      .def("__str__", [](const Failure& f) { return f.text; })
      .def("__repr__", &FailureRepr);

  py::class_<Report>(m, "CheckReport", "The verdict of a check.")
      .def_readonly("tier", &Report::tier)
      .def_readonly("seed", &Report::seed)
      .def_readonly("cases", &Report::cases)
      .def_readonly("skipped", &Report::skipped)
      .def_readonly("seconds", &Report::seconds)
      .def_readonly("cpu_seconds", &Report::cpu_seconds)
      .def_readonly("interrupted", &Report::interrupted)
      .def_readonly("exit_code", &Report::exit_code,
                    "As the CLI's: 0 pass, 1 a finding, 4 nothing checked.")
      .def_readonly("why", &Report::why)
      .def_readonly("summary", &Report::summary)
      .def_readonly("failures", &Report::failures)
      .def_property_readonly(
          "passed", [](const Report& r) { return r.exit_code == kExitPass; })
      .def("__str__",
           [](const Report& r) {
             std::string s;
             for (const Failure& f : r.failures) s += f.text + "\n";
             return s + r.summary;
           })
      .def("__repr__", [](const Report& r) {
        return "<attnkit.CheckReport " +
               std::string(r.exit_code == kExitPass ? "PASS" : "FAIL") + ": " +
               std::to_string(r.cases) + " cases, " +
               std::to_string(r.failures.size()) + " failure(s)>";
      });

  m.def("check", &Check, R"(The differential check with `fn` as the backend.

fn(problem, q, k, v, bias) -> out is called once per attention call of the
campaign (tier, seed: the same cases the CLI draws): problem is an
attnkit.Problem; q [batch, q_heads, >=q_len, head_dim], k and v [batch,
kv_heads, >=kv_len, head_dim] are NumPy views of the harness's buffers in the
case's layout and strides (valid during the call only; writing them is an
input_write failure); bias is None or float32 [batch, q_heads or 1, q, kv].
bf16 problems: bf16='float32' passes float32 arrays holding the bf16 values
exactly, 'bits' uint16 views of the stored bits, 'skip' skips them.
Quantized KV problems (problem.kv_dtype == 'i8': int8 K/V with one f32
scale per token and kv head): kv_i8='dequantize' passes k and v as new
float32 arrays of int8 * scale (what the oracle computes on), 'skip' skips
them. out: any
array-like numpy.asarray takes (a CPU torch tensor too) of shape [batch,
q_heads, >=max_q_len, head_dim]; rows i < q_lens[b] are compared with the
f64 oracle under the CLI's tolerance model. supports(problem) -> True/None
(run), False or a reason (skip). Failures are shrunk and carry a reproducer:
check(fn, repro=failure.case) replays one case.)",
        py::arg("fn"), py::kw_only(), py::arg("tier") = "default",
        py::arg("seed") = 1, py::arg("cases") = py::none(),
        py::arg("time_budget") = 0.0, py::arg("name") = py::none(),
        py::arg("bf16") = "float32", py::arg("kv_i8") = "dequantize",
        py::arg("supports") = py::none(), py::arg("repro") = py::none(),
        py::arg("shard") = std::pair<int64_t, int64_t>{0, 1},
        py::arg("progress") = false);
}
