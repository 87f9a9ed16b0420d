#include "runtime/attention_block.h"

#include <string>
#include <vector>

#include "runtime/parse.h"

namespace attnkit {

namespace {

std::string Field(std::string_view name, int64_t v) {
  return std::string(name) + "=" + std::to_string(v);
}

}  // namespace

Status AttentionBlockProblem::Validate() const {
  ATTNKIT_RETURN_IF_ERROR(attention.Validate());
  auto bad = [](std::string m) {
    return Status::InvalidArgument("attention block: " + std::move(m));
  };
  if (hidden < 1 || hidden > kMaxHidden) {
    return bad(Field("hidden", hidden) + " is not in [1, " +
               std::to_string(kMaxHidden) + "]");
  }
  // The projections write K/V rows of f32 math into the cache; a bf16 cache
  // would round them, which the block's oracle does not model yet.
  if (attention.dtype != DType::kF32) {
    return bad("dtype=" + std::string(DTypeName(attention.dtype)) +
               ": the block's KV cache is f32 (weights may be bf16: w=bf16)");
  }
  if (attention.KvDType() != DType::kF32) {
    return bad("kv_dtype=" + std::string(DTypeName(attention.KvDType())) +
               ": the block's KV cache is f32 (a quantized cache would need "
               "the block to quantize its K/V projections)");
  }
  if (weight_dtype != DType::kF32 && weight_dtype != DType::kBF16) {
    return bad("w=" + std::string(DTypeName(weight_dtype)) +
               ": weights are f32 or bf16");
  }
  for (int64_t b = 0; b < attention.batch; ++b) {
    if (attention.kv_lens[b] < attention.q_lens[b]) {
      return bad("kv_lens[" + std::to_string(b) +
                 "]=" + std::to_string(attention.kv_lens[b]) +
                 " is shorter than q_lens[" + std::to_string(b) +
                 "]=" + std::to_string(attention.q_lens[b]) +
                 " (the context includes the block's new tokens)");
    }
  }
  return Status::Ok();
}

double AttentionBlockProblem::Flops() const {
  double tokens = 0;
  for (int64_t b = 0; b < attention.batch; ++b) {
    tokens += static_cast<double>(attention.q_lens[b]);
  }
  const double h = static_cast<double>(hidden);
  double macs =
      tokens * h * static_cast<double>(q_width() + 2 * kv_width());  // Wq,k,v
  if (output_projection) macs += tokens * static_cast<double>(q_width()) * h;
  return 2 * macs + attention.Flops();
}

std::string AttentionBlockProblem::ToString() const {
  return attention.ToString() + ",hidden=" + std::to_string(hidden) +
         ",w=" + std::string(DTypeName(weight_dtype)) +
         ",qkv_bias=" + (qkv_bias ? "1" : "0") +
         ",wo=" + (output_projection ? "1" : "0");
}

StatusOr<AttentionBlockProblem> ParseAttentionBlockProblem(
    std::string_view text) {
  AttentionBlockProblem p;
  auto bad = [&](std::string m) {
    return Status::InvalidArgument("attention block '" + std::string(text) +
                                   "': " + m);
  };
  auto flag = [&](std::string_view key, std::string_view val,
                  bool* dst) -> Status {
    if (val != "0" && val != "1") {
      return bad(std::string(key) + "=" + std::string(val) + " is not 0 or 1");
    }
    *dst = val == "1";
    return Status::Ok();
  };
  // The block's keys are taken out; the rest is the attention's.
  std::string rest;
  bool seen_hidden = false;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view item = text.substr(start, end - start);
    start = end + 1;
    const size_t eq = item.find('=');
    const std::string_view key = item.substr(0, eq);
    const std::string_view val =
        eq == std::string_view::npos ? std::string_view() : item.substr(eq + 1);
    if (key == "hidden") {
      auto n = ParseInt64(val);
      if (!n) return bad("hidden=" + std::string(val) + " is not an integer");
      p.hidden = *n;
      seen_hidden = true;
    } else if (key == "w") {
      auto d = ParseDType(val);
      if (!d) return bad(kDTypeNames.NotOneOf("w", std::string(val)));
      p.weight_dtype = *d;
    } else if (key == "qkv_bias") {
      ATTNKIT_RETURN_IF_ERROR(flag(key, val, &p.qkv_bias));
    } else if (key == "wo") {
      ATTNKIT_RETURN_IF_ERROR(flag(key, val, &p.output_projection));
    } else if (!item.empty()) {
      rest += (rest.empty() ? "" : ",") + std::string(item);
    }
  }
  if (!seen_hidden) return bad("missing hidden=<size>");
  StatusOr<AttentionProblem> attention = ParseProblem(rest);
  if (!attention.ok()) return attention.status();
  p.attention = std::move(attention).value();
  return p;
}

TensorView HeadsOfRows(float* data, int64_t batch, int64_t heads, int64_t max_q,
                       int64_t d, int64_t batch_stride, int64_t row_stride) {
  TensorView t;
  t.data = data;
  t.dtype = DType::kF32;
  t.shape = {batch, heads, max_q, d};
  t.strides = {batch_stride, d, row_stride, 1};
  return t;
}

Status ValidateBlockArgs(const AttentionBlockProblem& p,
                         const AttentionBlockArgs& a) {
  ATTNKIT_RETURN_IF_ERROR(p.Validate());
  const AttentionProblem& at = p.attention;
  const int64_t mq = at.max_q_len();
  const DType w = p.weight_dtype;
  ATTNKIT_RETURN_IF_ERROR(CheckTensorView(
      "x", a.x, DType::kF32, {at.batch, 1, mq, p.hidden}, true, p.hidden, 3));
  ATTNKIT_RETURN_IF_ERROR(CheckTensorView(
      "wq", a.wq, w, {1, 1, p.hidden, p.q_width()}, true, p.q_width(), 3));
  ATTNKIT_RETURN_IF_ERROR(CheckTensorView(
      "wk", a.wk, w, {1, 1, p.hidden, p.kv_width()}, true, p.kv_width(), 3));
  ATTNKIT_RETURN_IF_ERROR(CheckTensorView(
      "wv", a.wv, w, {1, 1, p.hidden, p.kv_width()}, true, p.kv_width(), 3));
  struct Optional {
    const char* name;
    const TensorView& view;
    bool wanted;
    const char* flag;
  };
  for (const Optional& o : {Optional{"bq", a.bq, p.qkv_bias, "qkv_bias"},
                            Optional{"bk", a.bk, p.qkv_bias, "qkv_bias"},
                            Optional{"bv", a.bv, p.qkv_bias, "qkv_bias"},
                            Optional{"wo", a.wo, p.output_projection, "wo"}}) {
    if (!o.wanted && !o.view.is_null()) {
      return Status::InvalidArgument(std::string(o.name) + ": given but " +
                                     o.flag + "=0");
    }
  }
  if (p.qkv_bias) {
    ATTNKIT_RETURN_IF_ERROR(CheckTensorView(
        "bq", a.bq, DType::kF32, {1, 1, 1, p.q_width()}, true, p.q_width(), 3));
    for (const auto& [name, view] :
         {std::pair<const char*, const TensorView&>{"bk", a.bk},
          std::pair<const char*, const TensorView&>{"bv", a.bv}}) {
      ATTNKIT_RETURN_IF_ERROR(CheckTensorView(name, view, DType::kF32,
                                              {1, 1, 1, p.kv_width()}, true,
                                              p.kv_width(), 3));
    }
  }
  if (p.output_projection) {
    ATTNKIT_RETURN_IF_ERROR(CheckTensorView(
        "wo", a.wo, w, {1, 1, p.q_width(), p.hidden}, true, p.hidden, 3));
  }
  ATTNKIT_RETURN_IF_ERROR(CheckTensorView("out", a.out, DType::kF32,
                                          {at.batch, 1, mq, p.out_width()},
                                          true, p.out_width(), 3));
  return CheckKvAndBias(at, {a.k_cache, a.v_cache, {}, {}}, a.bias, "k_cache",
                        "v_cache");
}

}  // namespace attnkit
