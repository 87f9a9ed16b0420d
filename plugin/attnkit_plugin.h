/* attnkit plug-in ABI, version 1: how a user's shared library exposes an
 * attention kernel to `./attnkit check --plugin lib.so`, which then runs the
 * same differential campaign against it as against the built-in backends.
 *
 * Plain C (C99) so any language with a C FFI can implement it. A plug-in
 * exports one function,
 *
 *     const attnkit_plugin_v1_table* attnkit_plugin_v1(void);
 *
 * returning a table that lives until the library is unloaded. The loader
 * checks table->abi_version == ATTNKIT_PLUGIN_ABI_VERSION and
 * table->struct_size >= ATTNKIT_PLUGIN_V1_BASE_SIZE (the table as first
 * published, through `attention`) before using it. A plug-in sets
 * struct_size = sizeof(attnkit_plugin_v1_table) of the header it was built
 * with. A future incompatible ABI exports attnkit_plugin_v2 (a library may
 * export both); compatible additions append fields and grow struct_size, and
 * the loader reads an appended field only when struct_size covers it: a
 * library built against an older header keeps working, its missing fields
 * taken as NULL. Fields added so far: append_kv (after attention);
 * supports_block and attention_block (after append_kv); kv_dtypes (after
 * attention_block). Argument structs the harness passes by pointer grow the
 * same way (the scales of a quantized K/V, appended to
 * attnkit_plugin_attention_args and attnkit_plugin_kv_append_args): a
 * plug-in reads only the fields its header has, and the harness fills the
 * new ones only for a plug-in whose table declares it understands them.
 *
 * Semantics are attnkit's (runtime/problem.h): logical shapes are
 * [batch, heads, seq, dim]; layouts are strides, in elements; query i of
 * sequence b sits at position kv_lens[b] - q_lens[b] + i; causal sees keys
 * j <= pos, window W sees pos - W < j <= pos, bias adds bias[b, h|0, i, j]
 * (-inf hides a key); query head h reads kv head h / (q_heads / kv_heads);
 * q is in `dtype`, k and v in `kv_dtype` (`dtype`, or int8 for a
 * quantized KV cache, below), bias and out are f32, math is f32; a row that
 * sees no key outputs zeros; only out rows i < q_lens[b] may be written.
 *
 * Ownership: every pointer the harness passes (problem, lengths,
 * positions, tensors, the error buffer) is owned by the harness and valid
 * only during the call; a plug-in must not keep it. The table, its `name` and
 * the instance from create() are owned by the plug-in; the harness calls
 * destroy() once per instance and never frees anything of the plug-in's.
 *
 * Errors: every call returns an attnkit_plugin_status. On anything but
 * ATTNKIT_PLUGIN_OK the plug-in writes a NUL-terminated message (truncated
 * to error_capacity bytes including the NUL) into `error`, naming the field
 * and value it rejects, e.g. "head_dim=300 exceeds 256". The harness shows
 * it with bytes outside printable ASCII escaped (\xNN), and reads at most
 * error_capacity bytes even when no NUL is among them. UNSUPPORTED from
 * supports() makes the harness skip the problem (never a failure); any error
 * from attention() or append_kv() on a problem that supports() accepted is a
 * failure; the same holds for supports_block() and attention_block().
 * Plug-ins must not throw across the ABI, print, or exit.
 *
 * Threads: one instance is called from one thread at a time; a plug-in may
 * use threads inside a call.
 *
 * KV cache: decode-loop cases append each step's new tokens to a
 * preallocated, capacity-sized cache with the plug-in's append_kv (when the
 * table has it) or else with attnkit's portable in-place append, check that
 * the whole cache then equals the naive concatenation bit for bit (nothing
 * but the new tokens' positions changed), and call attention() on the cache
 * prefix (capacity-sized k/v views).
 *
 * Quantized KV cache (kv_dtype == ATTNKIT_PLUGIN_I8): K and V are int8, one
 * row of head_dim values (one token of one kv head) with one f32 scale, the
 * value being int8 * scale; the scales come as k_scale/v_scale tensors
 * [batch, kv_heads, >= kv_len, 1] f32 with unit stride along the sequence
 * (element (b, h, j, 0) scales token j's row of kv head h). The harness's
 * f64 oracle works on those dequantized values, so the tolerance is that of
 * the kernel's own arithmetic. Only a plug-in whose table sets
 * ATTNKIT_PLUGIN_KV_I8 in kv_dtypes is handed such problems (and
 * appends); for any other table (kv_dtypes 0, or a struct_size that ends
 * before it: built against an older header, which would read int8 as f32)
 * they are skipped as UNIMPLEMENTED, never failed. q, bias, out and the new
 * tokens of an append stay f32 or bf16 (`dtype`).
 *
 * The one quantization rule (what append_kv must produce, bit for bit: the
 * harness compares every byte of the cache and of its scales), per row x[e],
 * e < head_dim, read as f32 (a bf16 value widened exactly):
 *   absmax = max_e |x[e]|
 *   scale  = absmax / 127.0f  (an f32 division), or 1.0f when that is not
 *            > 0 (an all-zero row, or absmax / 127 underflowing to 0)
 *   q[e]   = round-half-to-even(x[e] / scale) (an f32 division, not a
 *            multiplication by 1/scale), clamped to [-127, 127] (-128 is
 *            never produced)
 * In C: `nearbyintf(x / scale)` in the default rounding mode (to nearest,
 * ties to even; what cvtps2dq does), then the clamp. The values appended are
 * always finite (the harness refuses others before the call).
 *
 * Attention block: a plug-in with attention_block also gets the harness's
 * block cases (about one in ten): the Q/K/V projections of x, the new
 * tokens' K/V written into the cache slots, the attention over the cache
 * and the optional output projection in one call (see
 * attnkit_plugin_block_args below). Without it (NULL, or a table whose
 * struct_size ends before it) those cases are skipped, never failed.
 */
#ifndef ATTNKIT_RUNTIME_ATTNKIT_PLUGIN_H_
#define ATTNKIT_RUNTIME_ATTNKIT_PLUGIN_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ATTNKIT_PLUGIN_ABI_VERSION 1
#define ATTNKIT_PLUGIN_ENTRY_V1 "attnkit_plugin_v1"

typedef enum attnkit_plugin_status {
  ATTNKIT_PLUGIN_OK = 0,
  ATTNKIT_PLUGIN_UNSUPPORTED = 1,      /* supports(): skip this problem */
  ATTNKIT_PLUGIN_INVALID_ARGUMENT = 2, /* the input breaks the contract */
  ATTNKIT_PLUGIN_INTERNAL = 3          /* anything else (out of memory...) */
} attnkit_plugin_status;

/* Values of the enum fields below equal attnkit's C++ enums. */
typedef enum attnkit_plugin_dtype {
  ATTNKIT_PLUGIN_F32 = 0,
  ATTNKIT_PLUGIN_BF16 = 1, /* uint16_t: the top 16 bits of an IEEE f32 */
  ATTNKIT_PLUGIN_I8 = 2    /* int8_t with a per-row f32 scale (K/V only) */
} attnkit_plugin_dtype;

typedef enum attnkit_plugin_mask {
  ATTNKIT_PLUGIN_MASK_NONE = 0,
  ATTNKIT_PLUGIN_MASK_CAUSAL = 1,
  ATTNKIT_PLUGIN_MASK_WINDOW = 2,
  ATTNKIT_PLUGIN_MASK_BIAS = 3
} attnkit_plugin_mask;

typedef enum attnkit_plugin_layout {
  ATTNKIT_PLUGIN_LAYOUT_BHSD = 0,
  ATTNKIT_PLUGIN_LAYOUT_BSHD = 1,
  ATTNKIT_PLUGIN_LAYOUT_TRANSPOSED_V = 2
} attnkit_plugin_layout;

/* The problem, struct-of-arrays: per-sequence lengths are two arrays of
 * `batch` entries. */
typedef struct attnkit_plugin_problem {
  int64_t batch;
  int64_t q_heads;
  int64_t kv_heads; /* divides q_heads */
  int64_t head_dim;
  const int64_t* q_lens;  /* [batch] */
  const int64_t* kv_lens; /* [batch] */
  int32_t mask;           /* attnkit_plugin_mask */
  int32_t dtype;          /* attnkit_plugin_dtype of q, k, v */
  int32_t layout;         /* attnkit_plugin_layout of k, v */
  int32_t reserved;       /* 0 */
  int64_t window;         /* mask == WINDOW only, else 0 */
  float scale;            /* already resolved: 1/sqrt(head_dim) by default */
  /* Appended in the struct's tail padding, so its size (80 bytes on LP64)
   * and every offset -- attnkit_plugin_block_problem embeds it -- stay
   * those of the first v1: the attnkit_plugin_dtype of k and v. Equal to
   * `dtype`, or ATTNKIT_PLUGIN_I8 (only for a table that declares
   * ATTNKIT_PLUGIN_KV_I8). To a harness older than the field these bytes
   * were padding (no i8 problem came from it): a plug-in that may meet one
   * reads args->k.dtype instead, which says the same and was always set. */
  int32_t kv_dtype;
} attnkit_plugin_problem;

/* A rank-4 strided view; extents may exceed the lengths (a cache prefix). */
typedef struct attnkit_plugin_tensor {
  void* data;
  int32_t dtype; /* attnkit_plugin_dtype */
  int32_t reserved;
  int64_t shape[4];
  int64_t strides[4]; /* in elements */
} attnkit_plugin_tensor;

typedef struct attnkit_plugin_attention_args {
  attnkit_plugin_tensor q;    /* [batch, q_heads, >= max q_len, head_dim] */
  attnkit_plugin_tensor k;    /* [batch, kv_heads, >= max kv_len, head_dim] */
  attnkit_plugin_tensor v;    /* same as k; strides per layout */
  attnkit_plugin_tensor bias; /* mask == BIAS: [batch, q_heads|1, .., ..] */
  attnkit_plugin_tensor out;  /* f32, shape of q */
  /* --- appended with kv_dtypes (filled for a table that declares it) */
  /* kv_dtype == I8: f32 [batch, kv_heads, >= max kv_len, 1], strides[2] ==
   * 1 (k's extent along the sequence); key j of kv head h of sequence b is
   * k[b, h, j, :] * k_scale[b, h, j, 0], value j likewise with v_scale.
   * Otherwise data NULL. */
  attnkit_plugin_tensor k_scale;
  attnkit_plugin_tensor v_scale;
} attnkit_plugin_attention_args;

/* One KV-cache append: sequence b's tokens t < new_lens[b] of new_k/new_v
 * go to position positions[b] + t of k_cache/v_cache, every kv head, every
 * element of head_dim. The caches' layout is in their strides (BHSD, BSHD,
 * or transposed V: v_cache.strides[2] == 1); a kernel specialised to one
 * layout declines the others in supports(), which sees problem->layout.
 * Before the call the harness has checked that all four tensors have one
 * dtype (but for an i8 cache, below), that batch, kv_heads and head_dim
 * agree, that new_lens[b] <= new_k.shape[2], and that positions[b] +
 * new_lens[b] <= capacity.
 *
 * An i8 cache (k_cache.dtype == ATTNKIT_PLUGIN_I8; only for a table that
 * declares ATTNKIT_PLUGIN_KV_I8): new_k and new_v are f32 or bf16 (one
 * dtype, finite values), and each new row is quantized by the one rule
 * (top of this file) into its slot of k_cache/v_cache, its scale into
 * element (b, h, positions[b] + t, 0) of k_scale/v_scale. Nothing else of
 * the caches or scales is written. */
typedef struct attnkit_plugin_kv_append_args {
  attnkit_plugin_tensor k_cache; /* [batch, kv_heads, capacity, head_dim] */
  attnkit_plugin_tensor v_cache; /* same shape; strides per layout */
  attnkit_plugin_tensor new_k;   /* [batch, kv_heads, >= max new_len, dim] */
  attnkit_plugin_tensor new_v;   /* same shape as new_k; any strides */
  const int64_t* positions;      /* [batch]: the sequence's current length */
  const int64_t* new_lens;       /* [batch]: tokens to append, may be 0 */
  /* --- appended with kv_dtypes (filled for a table that declares it) */
  /* An i8 cache's scales: f32 [batch, kv_heads, capacity, 1], strides[2]
   * == 1. Otherwise data NULL. */
  attnkit_plugin_tensor k_scale;
  attnkit_plugin_tensor v_scale;
} attnkit_plugin_kv_append_args;

/* The attention block (attnkit's runtime/attention_block.h): the
 * Megatron-style Q/K/V projections of x around an attention, then an
 * optional output projection. `attention` is the attention's problem as
 * above: heads, head_dim, mask, scale, and the KV cache's layout and dtype
 * (f32: the projections' f32 results are stored unrounded). Its
 * q_lens[b] are the new tokens of sequence b (x's rows), kv_lens[b] >=
 * q_lens[b] its context including them: prefill and decode are one
 * problem. */
typedef struct attnkit_plugin_block_problem {
  attnkit_plugin_problem attention;
  int64_t hidden;            /* x's width: 1 .. 65536 */
  int32_t weight_dtype;      /* attnkit_plugin_dtype of wq, wk, wv, wo */
  int32_t qkv_bias;          /* 1: bq, bk, bv are added after projecting */
  int32_t output_projection; /* 1: out = attention * wo, else attention */
  int32_t reserved;          /* 0 */
} attnkit_plugin_block_problem;

/* The tensors of one block call (rank 4 like every tensor here; f32 unless
 * stated; every matrix has unit stride along its last dimension; hq, hkv,
 * d are the problem's q_heads, kv_heads, head_dim):
 *   x        [batch, 1, >= max q_len, hidden]
 *   wq       [1, 1, hidden, hq*d] in weight_dtype; column h*d + e is head
 *            h's element e (the Megatron column split)
 *   wk, wv   [1, 1, hidden, hkv*d] in weight_dtype, columns as wq's
 *   bq       [1, 1, 1, hq*d]; bk, bv [1, 1, 1, hkv*d] (qkv_bias only, else
 *            data NULL)
 *   wo       [1, 1, hq*d, hidden] in weight_dtype (output_projection only,
 *            else data NULL): row h*d + e takes head h's element e
 *   bias     the attention's additive bias (mask == BIAS only, else data
 *            NULL), as attnkit_plugin_attention_args.bias
 *   k_cache, v_cache  [batch, kv_heads, >= max kv_len, head_dim] in the
 *            problem's layout (strides) and dtype: rows [0, kv_len - q_len)
 *            of sequence b hold its context
 *   out      [batch, 1, >= max q_len, hidden if output_projection else
 *            hq*d]: rows i < q_lens[b] written, nothing else
 * For token i < q_lens[b] of sequence b (x row i), with f32 math:
 *   q = x[b,0,i,:] wq (+ bq), k = x[b,0,i,:] wk (+ bk), v likewise;
 *   k and v (head h: columns h*d .. h*d + d-1) go to position
 *   kv_lens[b] - q_lens[b] + i of k_cache/v_cache, every kv head;
 *   a = the attention of q (query head h: columns h*d ..) over the cache
 *   rows [0, kv_len), with the problem's mask, scale, GQA and bias --
 *   query i at position kv_lens[b] - q_lens[b] + i as for attention();
 *   out[b,0,i,:] = a wo when output_projection, else a.
 * The block writes out's rows i < q_lens[b] and the cache's new slots
 * [kv_len - q_len, kv_len) of every sequence and kv head, and nothing else:
 * not x, the weights, the biases, not a cache row of the context or past
 * kv_len (the harness fills those with NaN and compares every byte). Before
 * the call the harness has checked every tensor's dtype, shape and unit
 * last stride against the problem. */
typedef struct attnkit_plugin_block_args {
  attnkit_plugin_tensor x;
  attnkit_plugin_tensor wq, wk, wv;
  attnkit_plugin_tensor bq, bk, bv;
  attnkit_plugin_tensor wo;
  attnkit_plugin_tensor bias;
  attnkit_plugin_tensor k_cache, v_cache;
  attnkit_plugin_tensor out;
} attnkit_plugin_block_args;

typedef struct attnkit_plugin_v1_table {
  uint32_t abi_version; /* ATTNKIT_PLUGIN_ABI_VERSION */
  uint32_t struct_size; /* sizeof(attnkit_plugin_v1_table) */
  const char* name;     /* shown in reports; [a-z0-9_]+ */

  /* A new instance, or NULL (message in `error`). */
  void* (*create)(char* error, size_t error_capacity);
  void (*destroy)(void* instance);

  /* OK when the plug-in can run `problem`, else UNSUPPORTED (or
   * INVALID_ARGUMENT) with the reason. May be NULL: everything supported. */
  attnkit_plugin_status (*supports)(void* instance,
                                    const attnkit_plugin_problem* problem,
                                    char* error, size_t error_capacity);

  /* out = softmax(scale * q k^T + mask) v, for rows i < q_lens[b]. */
  attnkit_plugin_status (*attention)(void* instance,
                                     const attnkit_plugin_problem* problem,
                                     const attnkit_plugin_attention_args* args,
                                     char* error, size_t error_capacity);

  /* --- appended after the first v1 (read only when struct_size covers it) */

  /* The plug-in's own in-place KV append (e.g. fused into a transposed-V or
   * quantization-friendly layout). May be NULL: the harness appends with its
   * portable strided copy. It writes the new tokens' positions of k_cache
   * and v_cache -- [positions[b], positions[b] + new_lens[b]) of every kv
   * head, every element of head_dim, bit-exact copies of new_k/new_v -- and
   * nothing else: not the positions before or after them (not even zeros),
   * not other sequences, no byte outside the views' elements, not new_k or
   * new_v (which it only reads; their rows past new_lens[b] are padding
   * whose values mean nothing). The harness fills the cache's unused positions
   * and that padding with nonzero patterns and, after every append, compares
   * every byte of the capacity-sized caches; it counts the new tokens'
   * bytes as the append's copy. Any error (message naming the field and
   * value, e.g. "k_cache.strides[3]=2 is not 1") fails the case: a problem
   * the hook cannot append is declined in supports(). */
  attnkit_plugin_status (*append_kv)(void* instance,
                                     const attnkit_plugin_kv_append_args* args,
                                     char* error, size_t error_capacity);

  /* --- appended after append_kv (read only when struct_size covers them) */

  /* OK when the plug-in can run the attention block `problem`, else
   * UNSUPPORTED (or INVALID_ARGUMENT) with the reason: the harness skips
   * that block case. May be NULL: every block supported (when
   * attention_block is set). Set without attention_block, the loader
   * refuses the table. */
  attnkit_plugin_status (*supports_block)(
      void* instance, const attnkit_plugin_block_problem* problem, char* error,
      size_t error_capacity);

  /* The attention block (attnkit_plugin_block_args above). May be NULL: the
   * plug-in has no block, and the harness skips its block cases. Any error
   * (message naming the field and value, e.g. "hidden=70000 exceeds 65536")
   * on a block supports_block accepted fails the case. */
  attnkit_plugin_status (*attention_block)(
      void* instance, const attnkit_plugin_block_problem* problem,
      const attnkit_plugin_block_args* args, char* error,
      size_t error_capacity);

  /* --- appended after attention_block (read only when struct_size covers
   * it) */

  /* The K/V storage dtypes, beyond q's, that this plug-in understands: a
   * bitmask of (1u << attnkit_plugin_dtype); today only ATTNKIT_PLUGIN_KV_I8
   * (a quantized KV cache: problem->kv_dtype, the k_scale/v_scale tensors
   * of the attention and append arguments; see the top of this file). 0:
   * none, and the harness skips those problems. Setting it promises that
   * attention() reads the scales and that append_kv (when set) quantizes
   * by the one rule; supports() may still decline any one problem. The
   * loader refuses a table with a bit it does not know. */
  uint32_t kv_dtypes;
  uint32_t reserved; /* 0 */
} attnkit_plugin_v1_table;

/* kv_dtypes' bit for int8 K/V with per-row f32 scales. */
#define ATTNKIT_PLUGIN_KV_I8 (1u << ATTNKIT_PLUGIN_I8)

/* The smallest struct_size the loader accepts: the table through
 * `attention`, as v1 was first published (with no append_kv). */
#define ATTNKIT_PLUGIN_V1_BASE_SIZE offsetof(attnkit_plugin_v1_table, append_kv)
/* The table as it was with append_kv and before the block entries. */
#define ATTNKIT_PLUGIN_V1_APPEND_KV_SIZE \
  offsetof(attnkit_plugin_v1_table, supports_block)
/* The table as it was with the block entries and before kv_dtypes (a
 * plug-in built against that header never gets a quantized K/V). */
#define ATTNKIT_PLUGIN_V1_BLOCK_SIZE \
  offsetof(attnkit_plugin_v1_table, kv_dtypes)

/* The one symbol a plug-in exports. */
typedef const attnkit_plugin_v1_table* (*attnkit_plugin_v1_fn)(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ATTNKIT_RUNTIME_ATTNKIT_PLUGIN_H_ */
