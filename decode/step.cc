#include "decode/step.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "reference/concat_kv.h"

namespace attnkit::decode {
namespace {

Status Mismatch(std::string_view field, int64_t got, std::string_view what,
                int64_t want) {
  return Status::InvalidArgument(
      "decode step: " + std::string(field) + "=" + std::to_string(got) +
      ", expected " + std::string(what) + "=" + std::to_string(want));
}

Status InLayer(int64_t layer, std::string_view phase, const Status& s) {
  if (s.ok()) return s;
  return Status(s.code(), "layer " + std::to_string(layer) + " " +
                              std::string(phase) + ": " + s.message());
}

}  // namespace

Stepper Stepper::InPlace(Backend& backend, KvCache& cache) {
  Stepper s(backend, cache.config().batch, cache.config().layers);
  s.cache_ = &cache;
  return s;
}

Stepper Stepper::Naive(Backend& backend, std::span<reference::ConcatKv> layers,
                       const AttentionProblem& shape) {
  Stepper s(backend, shape.batch, static_cast<int64_t>(layers.size()));
  s.concat_ = layers;
  // Capacity for every sequence's lengths: the per-sequence copies in Step
  // then reuse it.
  s.one_ = shape;
  return s;
}

int64_t Stepper::length(int64_t b) const {
  return cache_ != nullptr ? cache_->lengths(0)[b] : concat_[0].length(b);
}

Status Stepper::Step(AttentionProblem& problem,
                     std::span<const LayerStep> layers,
                     std::span<const int64_t> new_lens, StepRecord* record,
                     const accounting::Meter* since) {
  if (static_cast<int64_t>(layers.size()) != layers_) {
    return Mismatch("layers", static_cast<int64_t>(layers.size()),
                    "the model's layers", layers_);
  }
  if (problem.batch != batch_) {
    return Mismatch("problem.batch", problem.batch, "batch", batch_);
  }
  if (static_cast<int64_t>(new_lens.size()) != batch_) {
    return Mismatch("new_lens.size()", static_cast<int64_t>(new_lens.size()),
                    "batch", batch_);
  }
  if (static_cast<int64_t>(problem.q_lens.size()) != batch_ ||
      static_cast<int64_t>(problem.kv_lens.size()) != batch_) {
    return Mismatch("problem.q_lens.size()",
                    static_cast<int64_t>(problem.q_lens.size()), "batch",
                    batch_);
  }
  StepRecord rec;
  Status status;
  {
    accounting::Meter meter;
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t l = 0; l < layers_ && status.ok(); ++l) {
      status = StepLayer(problem, l, layers[static_cast<size_t>(l)], new_lens,
                         meter, rec);
    }
    rec.step_us = std::chrono::duration<double, std::micro>(
                      std::chrono::steady_clock::now() - t0)
                      .count();
    const accounting::Counts counts = meter.Read();
    rec.allocs = counts.allocs;
    rec.bytes_allocated = counts.bytes_allocated;
    rec.bytes_copied = counts.bytes_copied;
    rec.append_us = static_cast<double>(counts.append_ns) * 1e-3;
    rec.attention_us = static_cast<double>(counts.attention_ns) * 1e-3;
    // Live when the step began, counted from `since`, plus the step's own
    // high-water mark.
    const int64_t before =
        since != nullptr ? since->Read().live_bytes - counts.live_bytes : 0;
    rec.peak_bytes = before + counts.peak_live_bytes;
  }
  for (int64_t b = 0; b < batch_; ++b) {
    rec.kv_len = std::max(rec.kv_len, length(b));
  }
  if (record != nullptr) *record = rec;
  return status;
}

Status Stepper::StepLayer(AttentionProblem& problem, int64_t l,
                          const LayerStep& in,
                          std::span<const int64_t> new_lens,
                          const accounting::Meter& meter, StepRecord& rec) {
  const int64_t before = meter.Read().allocs;
  if (cache_ != nullptr) {
    {
      accounting::ScopedPhase phase(accounting::Phase::kAppend);
      const Status s =
          cache_->Append(l, in.new_k, in.new_v, new_lens, backend_);
      rec.append_allocs += meter.Read().allocs - before;
      ATTNKIT_RETURN_IF_ERROR(InLayer(l, "append", s));
    }
    accounting::ScopedPhase phase(accounting::Phase::kAttention);
    const KvCache::View kv = cache_->Prefix(l);
    const auto lens = cache_->lengths(l);
    std::copy(lens.begin(), lens.end(), problem.kv_lens.begin());
    problem.layout = cache_->config().layout;
    const AttentionArgs args{in.q,   kv.k,       kv.v,      in.bias,
                             in.out, kv.k_scale, kv.v_scale};
    return InLayer(l, "attention", backend_->Attention(problem, args));
  }

  reference::ConcatKv& kv = concat_[static_cast<size_t>(l)];
  {
    accounting::ScopedPhase phase(accounting::Phase::kAppend);
    const Status s = kv.Append(in.new_k, in.new_v, new_lens).status();
    rec.append_allocs += meter.Read().allocs - before;
    ATTNKIT_RETURN_IF_ERROR(InLayer(l, "append", s));
  }
  accounting::ScopedPhase phase(accounting::Phase::kAttention);
  for (int64_t b = 0; b < batch_; ++b) problem.kv_lens[b] = kv.length(b);
  problem.layout = KvLayout::kBHSD;
  for (int64_t b = 0; b < batch_; ++b) {
    one_ = problem;  // within the capacity reserved at Naive: no allocation
    one_.batch = 1;
    one_.q_lens.resize(1);
    one_.kv_lens.resize(1);
    one_.q_lens[0] = problem.q_lens[b];
    one_.kv_lens[0] = kv.length(b);
    auto row = [&](const TensorView& t) {
      if (t.data == nullptr) return t;
      return t.Slice({b, 0, 0, 0}, {1, t.shape[1], t.shape[2], t.shape[3]});
    };
    const AttentionArgs args{row(in.q),    kv.K(b),     kv.V(b),
                             row(in.bias), row(in.out), kv.KScale(b),
                             kv.VScale(b)};
    ATTNKIT_RETURN_IF_ERROR(
        InLayer(l, "attention", backend_->Attention(one_, args)));
  }
  return Status::Ok();
}

}  // namespace attnkit::decode
