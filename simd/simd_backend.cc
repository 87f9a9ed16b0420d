#include "simd/simd_backend.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/accounting.h"
#include "runtime/parallel.h"
#include "runtime/split_kv.h"
#include "simd/attention_block.h"
#include "simd/kernel.h"

namespace attnkit::simd {
namespace {

using internal::BlockJob;
using internal::KernelOps;

// Below ~1 MFLOP the OpenMP fork/join costs more than the work
// (simd/README.md, "OpenMP fork/join").
constexpr double kMinParallelFlops = 1e6;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// How one call is cut into work items. Item t (of total_base * kv.splits):
// split t % kv.splits of base item t / kv.splits; base items of sequence b
// start at item_begin[b] and enumerate (query block, kv head, head block)
// with the query blocks from last to first, so the costliest causal blocks
// are handed out first.
struct Plan {
  int64_t group_heads = 1;   // query heads per item (BlockJob::group_heads)
  int64_t group_blocks = 1;  // items per kv head's group of query heads
  int64_t queries = 1;       // queries per item (BlockJob::queries)
  int64_t kv_heads = 1;      // kv heads per item (BlockJob::kv_heads)
  KvSplitPlan kv;
  int64_t total_base = 0;
  bool kv_from_dram = false;  // BlockJob::kv_from_dram
  bool prefetch_keys = true;  // BlockJob::prefetch_keys
  bool stream_out = false;    // BlockJob::stream_out
};

class SimdBackend final : public Backend {
 public:
  explicit SimdBackend(const SimdOptions& o)
      : options_(o),
        prefill_tile_(o.prefill_tile_keys != 0
                          ? o.prefill_tile_keys
                          : internal::PrefillTileKeysFor(L1DataCacheBytes())) {
    ops_ = o.isa ? internal::OpsFor(*o.isa) : internal::BestOps();
  }

  std::string_view name() const override { return "simd"; }

  Status Supports(const AttentionProblem&) const override { return Usable(); }

  Status Attention(const AttentionProblem& p,
                   const AttentionArgs& args) override;
  Status AppendKv(const KvAppendArgs& a) override;

  Status SupportsBlock(const AttentionBlockProblem& p) const override {
    ATTNKIT_RETURN_IF_ERROR(Usable());
    return p.Validate();
  }
  Status AttentionBlock(const AttentionBlockProblem& p,
                        const AttentionBlockArgs& args) override {
    ATTNKIT_RETURN_IF_ERROR(Usable());
    const int threads =
        options_.num_threads > 0 ? options_.num_threads : MaxThreads();
    return simd::AttentionBlock(*this, block_, threads, p, args);
  }

 private:
  // Whether this backend can run anything: an ISA the CPU has, and options
  // in range.
  Status Usable() const {
    if (ops_ == nullptr) return Unavailable();
    if (prefill_tile_ < 1 || prefill_tile_ > internal::kMaxPrefillTileKeys) {
      return Status::InvalidArgument(
          "simd: prefill_tile_keys=" + std::to_string(prefill_tile_) +
          " is outside 1.." + std::to_string(internal::kMaxPrefillTileKeys) +
          " (0 decides from the L1 data cache)");
    }
    return Status::Ok();
  }
  Status Unavailable() const {
    return Status::FailedPrecondition(
        "simd: isa=" + std::string(IsaName(*options_.isa)) +
        " is not supported by this CPU");
  }
  Plan MakePlan(const AttentionProblem& p, int threads);
  void Merge(const AttentionProblem& p, const AttentionArgs& args,
             const Plan& plan, int threads);
  // Base item t -> its job (without the key range).
  BlockJob BaseJob(const AttentionProblem& p, const Plan& plan,
                   int64_t t) const;
  // The keys any row of `job` can see: [begin, end).
  static KeyRange ItemKeys(const AttentionProblem& p, const BlockJob& job);

  SimdOptions options_;
  int64_t prefill_tile_;  // BlockJob::prefill_tile
  const KernelOps* ops_ = nullptr;
  BlockWorkspace block_;
  // Grown, never shrunk: a call with the same or a smaller shape allocates
  // nothing (the decode path's contract).
  std::vector<AlignedBuffer> workspaces_;
  AlignedBuffer partials_;
  std::vector<int64_t> item_begin_;
};

Plan SimdBackend::MakePlan(const AttentionProblem& p, int threads) {
  Plan plan;
  const int64_t G = p.group_size();
  const int64_t max_rows = ops_->max_rows;
  plan.group_heads = std::min(G, max_rows);
  plan.group_blocks = CeilDiv(G, plan.group_heads);
  plan.queries = std::max<int64_t>(1, max_rows / plan.group_heads);
  // BSHD stores the K (and V) rows of all kv heads at one position next to
  // each other, so one item per kv head has each thread read 256 B of every
  // 2 KiB (Hkv 8, d 128, bf16) while the prefetchers pull in the
  // neighbours' lines, which are evicted long before their own head runs
  // (simd/README.md, "BSHD decode items"). Items of kv_heads adjacent kv
  // heads walk their tiles W keys at a time with the heads inner, so a
  // thread reads kv_heads rows contiguously per position. Only for few rows per
  // head (the decode path) and enough items left for the threads -- counting kv
  // splits: with fewer sequences than threads, keys enough for a split per
  // thread, and a thread's share of a position's row under a split by heads
  // shorter than a 4 KiB page -- or items that read their blocks ahead
  // (BshdItemReadsAhead), whatever the row -- an item takes as many kv heads
  // as its rows allow and the threads split its keys, so each reads whole
  // position rows (simd/README.md, "BSHD decode items").
  plan.kv_from_dram =
      DecodeKvStreamsFromDram(p, options_.read_ahead_above_bytes);
  plan.prefetch_keys =
      DecodePrefetchesKeys(p, options_.prefetch_keys_above_bytes);
  plan.stream_out =
      OutputStreamsPastCache(p, options_.stream_output_above_bytes);
  int64_t max_q = 0;
  for (const int64_t q : p.q_lens) max_q = std::max(max_q, q);
  const int64_t head_rows =
      std::min(plan.queries, std::max<int64_t>(max_q, 1)) * plan.group_heads;
  if (p.layout == KvLayout::kBSHD && plan.group_blocks == 1 &&
      head_rows < ops_->vector_floats) {
    constexpr int64_t kPageBytes = 4096;
    const int64_t most = std::min(p.kv_heads, max_rows / head_rows);
    const int64_t row_bytes = p.kv_heads * p.head_dim * DTypeSize(p.KvDType());
    const bool split_keys =
        p.batch < threads && p.max_kv_len() >= threads * kMinKeysPerSplit &&
        (row_bytes / threads < kPageBytes ||
         internal::BshdItemReadsAhead(p, most, ops_->vector_floats,
                                      plan.kv_from_dram));
    plan.kv_heads = split_keys ? most
                               : std::clamp<int64_t>(
                                     p.kv_heads * p.batch / threads, 1, most);
  }
  if (item_begin_.capacity() < static_cast<size_t>(p.batch + 1)) {
    item_begin_.reserve(static_cast<size_t>(p.batch + 1));
  }
  item_begin_.resize(static_cast<size_t>(p.batch + 1));
  int64_t total = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    item_begin_[b] = total;
    total += CeilDiv(p.q_lens[b], plan.queries) *
             CeilDiv(p.kv_heads, plan.kv_heads) * plan.group_blocks;
  }
  item_begin_[p.batch] = total;
  plan.total_base = total;
  plan.kv =
      PlanKvSplits(total, threads, p.max_kv_len(), options_.force_kv_splits);
  return plan;
}

BlockJob SimdBackend::BaseJob(const AttentionProblem& p, const Plan& plan,
                              int64_t t) const {
  int64_t b = 0;
  while (item_begin_[b + 1] <= t) ++b;
  const int64_t local = t - item_begin_[b];
  // Items of one kv head (and group block) are adjacent, its query blocks
  // costliest (last) first: the threads share that head's K/V tiles in the
  // caches while they work on it. With the query blocks outermost, every
  // head's K/V was in flight at once (Hkv 32, S 2048, d 128: 64 MiB, twice
  // the L3) and each item streamed its keys from DRAM (simd/README.md,
  // "Prefill item order").
  const int64_t qblocks = CeilDiv(p.q_lens[b], plan.queries);
  const int64_t head_block = local / qblocks;
  const int64_t qblk = qblocks - 1 - local % qblocks;
  BlockJob job;
  job.problem = &p;
  job.batch = b;
  job.kv_head = head_block / plan.group_blocks * plan.kv_heads;
  job.kv_heads = std::min(plan.kv_heads, p.kv_heads - job.kv_head);
  const int64_t gblk = head_block % plan.group_blocks;
  job.first_group_head = gblk * plan.group_heads;
  job.group_heads =
      std::min(plan.group_heads, p.group_size() - job.first_group_head);
  job.first_query = qblk * plan.queries;
  job.queries = std::min(plan.queries, p.q_lens[b] - job.first_query);
  job.kv_from_dram = plan.kv_from_dram;
  job.prefetch_keys = plan.prefetch_keys;
  job.stream_out = plan.stream_out;
  job.prefill_tile = prefill_tile_;
  return job;
}

KeyRange SimdBackend::ItemKeys(const AttentionProblem& p, const BlockJob& job) {
  // Visible ranges only move forward with the query index.
  const KeyRange first = VisibleKeys(p, job.batch, job.first_query);
  const KeyRange last =
      VisibleKeys(p, job.batch, job.first_query + job.queries - 1);
  return {first.begin, std::max(first.end, last.end)};
}

Status SimdBackend::Attention(const AttentionProblem& p,
                              const AttentionArgs& args) {
  ATTNKIT_RETURN_IF_ERROR(ValidateArgs(p, args));
  ATTNKIT_RETURN_IF_ERROR(Supports(p));
  const int max_threads =
      options_.num_threads > 0 ? options_.num_threads : MaxThreads();
  const Plan plan = MakePlan(p, max_threads);
  if (plan.total_base == 0) return Status::Ok();
  const int64_t splits = plan.kv.splits;
  const int64_t items = plan.total_base * splits;
  const int threads = static_cast<int>(std::min<int64_t>(
      p.Flops() < kMinParallelFlops ? 1 : max_threads, items));

  const internal::WorkspaceLayout layout = internal::ComputeLayout(p.head_dim);
  const size_t ws_bytes = layout.total * sizeof(float);
  if (workspaces_.size() < static_cast<size_t>(threads)) {
    workspaces_.resize(static_cast<size_t>(threads));
  }
  for (int t = 0; t < threads; ++t) {
    if (workspaces_[t].size() < ws_bytes) {
      workspaces_[t] = AlignedBuffer(ws_bytes);
    }
  }
  const size_t partial_floats = internal::PartialLayoutFor(p.head_dim).floats();
  if (splits > 1) {
    const size_t bytes =
        static_cast<size_t>(items) * partial_floats * sizeof(float);
    if (partials_.size() < bytes) partials_ = AlignedBuffer(bytes);
  }
  // Logits in log2 units: exp(s*scale - m) = exp2(s*c - m') with one constant.
  const float scale_log2e = p.EffectiveScale() * 1.4426950408889634f;
  float* partials = static_cast<float*>(partials_.data());

  ForEachItem(items, threads, [&](int64_t t, int thread) {
    BlockJob job = BaseJob(p, plan, t / splits);
    job.args = &args;
    job.scale_log2e = scale_log2e;
    KeyRange keys = ItemKeys(p, job);
    if (splits > 1) {
      keys = plan.kv.Range(keys, t % splits);
      job.partial = partials + static_cast<size_t>(t) * partial_floats;
    }
    job.kv_begin = keys.begin;
    job.kv_end = keys.end;
    ops_->run_block(job, static_cast<float*>(workspaces_[thread].data()));
  });
  if (splits > 1) Merge(p, args, plan, threads);
  return Status::Ok();
}

void SimdBackend::Merge(const AttentionProblem& p, const AttentionArgs& args,
                        const Plan& plan, int threads) {
  const PartialLayout layout = internal::PartialLayoutFor(p.head_dim);
  const float* partials = static_cast<const float*>(partials_.data());
  const int64_t splits = plan.kv.splits;
  ForEachItem(plan.total_base, threads, [&](int64_t t, int) {
    const BlockJob job = BaseJob(p, plan, t);
    const float* first =
        partials + static_cast<size_t>(t * splits) * layout.floats();
    // Row r in RunBlock's order: kv head, then query, then head.
    for (int64_t r = 0; r < job.rows(); ++r) {
      const int64_t k = r / (job.queries * job.group_heads),
                    ii = r / job.group_heads % job.queries,
                    gg = r % job.group_heads;
      const int64_t h =
          (job.kv_head + k) * p.group_size() + job.first_group_head + gg;
      float* out = args.out.As<float>() +
                   args.out.Offset(job.batch, h, job.first_query + ii, 0);
      MergePartialRow(layout, first, splits, r, p.head_dim, out);
    }
  });
}

// ---------------------------------------------------------------- append

// dst[pos + t][e] = src[t][e] for one (b, h) and n tokens, with the element
// type as the unit (bit copies: bf16 and f32 both exact).
template <typename T>
void CopyTokens(const TensorView& dst, const TensorView& src, int64_t b,
                int64_t h, int64_t pos, int64_t n) {
  const int64_t dim = dst.shape[3];
  if (n == 0 || dim == 0) return;
  T* d = static_cast<T*>(dst.data) + dst.Offset(b, h, pos, 0);
  const T* s = static_cast<const T*>(src.data) + src.Offset(b, h, 0, 0);
  const int64_t dt = dst.strides[2], de = dst.strides[3];
  const int64_t st = src.strides[2], se = src.strides[3];
  if (de == 1 && se == 1) {  // token rows are contiguous on both sides
    for (int64_t t = 0; t < n; ++t) {
      std::memcpy(d + t * dt, s + t * st, static_cast<size_t>(dim) * sizeof(T));
    }
  } else if (dt == 1 && st == 1) {  // both sequence-major (transposed V)
    for (int64_t e = 0; e < dim; ++e) {
      std::memcpy(d + e * de, s + e * se, static_cast<size_t>(n) * sizeof(T));
    }
  } else {
    // A transpose (token rows into a sequence-major cache, or back): 16 x 16
    // blocks so both the reads and the writes stay within a few cache lines;
    // the inner loop runs along the destination's unit-stride dim when it
    // has one, which the compiler vectorizes as strided loads + a packed
    // store.
    constexpr int64_t kB = 16;
    for (int64_t t0 = 0; t0 < n; t0 += kB) {
      const int64_t t1 = std::min(n, t0 + kB);
      for (int64_t e0 = 0; e0 < dim; e0 += kB) {
        const int64_t e1 = std::min(dim, e0 + kB);
        if (dt == 1) {
          for (int64_t e = e0; e < e1; ++e)
            for (int64_t t = t0; t < t1; ++t)
              d[e * de + t] = s[t * st + e * se];
        } else {
          for (int64_t t = t0; t < t1; ++t)
            for (int64_t e = e0; e < e1; ++e)
              d[t * dt + e * de] = s[t * st + e * se];
        }
      }
    }
  }
}

Status SimdBackend::AppendKv(const KvAppendArgs& a) {
  ATTNKIT_RETURN_IF_ERROR(ValidateAppend(a));
  // An i8 cache: the one quantization rule, row by row (a decode step's
  // rows are a few hundred bytes).
  if (a.k_cache.dtype == DType::kI8) {
    AppendKvStrided(a);
    return Status::Ok();
  }
  const int64_t batch = a.k_cache.shape[0], heads = a.k_cache.shape[1];
  const int64_t bytes = AppendedBytes(a);
  const bool f32 = a.k_cache.dtype == DType::kF32;
  auto copy_head = [&](int64_t b, int64_t h) {
    const int64_t pos = a.positions[b], n = a.new_lens[b];
    if (f32) {
      CopyTokens<uint32_t>(a.k_cache, a.new_k, b, h, pos, n);
      CopyTokens<uint32_t>(a.v_cache, a.new_v, b, h, pos, n);
    } else {
      CopyTokens<uint16_t>(a.k_cache, a.new_k, b, h, pos, n);
      CopyTokens<uint16_t>(a.v_cache, a.new_v, b, h, pos, n);
    }
  };
  // One decode token per head is a few hundred bytes: threads only pay for
  // prefill-sized appends (>= 4 MiB).
  const int threads = bytes < (int64_t{4} << 20) ? 1
                      : options_.num_threads > 0 ? options_.num_threads
                                                 : MaxThreads();
  ForEachItem(batch * heads, threads,
              [&](int64_t t, int) { copy_head(t / heads, t % heads); });
  accounting::RecordCopy(bytes);
  return Status::Ok();
}

}  // namespace

std::unique_ptr<Backend> MakeSimdBackend(const SimdOptions& options) {
  return std::make_unique<SimdBackend>(options);
}

std::unique_ptr<Backend> MakeSimdBackend() {
  return MakeSimdBackend(SimdOptions{});
}

}  // namespace attnkit::simd
