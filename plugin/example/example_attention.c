/* An example attnkit plug-in in plain C: single-pass (online-softmax)
 * attention over strided views, every mask, layout and dtype, a quantized
 * (int8) KV cache dequantized on the fly, its own in-place KV append (the
 * append_kv hook, quantizing into an int8 cache) and the attention block
 * (plain loops: the Q/K/V projections, K/V into the cache slots, the
 * attention over the cache, the output projection). It is what a user
 * copies to test their own kernel:
 *
 *   cc -O2 -shared -fPIC -I<attnkit> example_attention.c -o libexample.so -lm
 *   ./attnkit check --plugin ./libexample.so --backends example
 *
 * Built as test variants too: EXAMPLE_PLUGIN_ABI_VERSION overrides the
 * version it claims (the loader must refuse it), EXAMPLE_PLUGIN_HEAD_DIM_MAX
 * makes supports() and append_kv reject larger head dims (the harness must
 * skip them), EXAMPLE_PLUGIN_NO_ENTRY exports the table under another name,
 * EXAMPLE_PLUGIN_TABLE_END claims a table that ends before the field it
 * names (the loader must not read past it; EXAMPLE_PLUGIN_TABLE_SIZE claims
 * a size outright), EXAMPLE_PLUGIN_APPEND_BUG plants a bug in the append,
 * EXAMPLE_PLUGIN_BLOCK_BUG one in the block, EXAMPLE_PLUGIN_BLOCK_ENTRIES
 * leaves the block's entries NULL, EXAMPLE_PLUGIN_KV_DTYPES overrides the
 * K/V dtypes the table declares (0: no int8 K/V, the harness must skip
 * those problems; an unknown bit: the loader must refuse the table),
 * EXAMPLE_PLUGIN_UNTERMINATED_MESSAGE declines with a message that fills its
 * buffer without a NUL and starts with a terminal escape sequence, and
 * EXAMPLE_PLUGIN_MISBEHAVE builds the kernel that misbehaves as the
 * environment tells it (see misbehave() below): the isolation tests' crash,
 * abort, hang, exit and print in every entry point.
 */
#ifdef EXAMPLE_PLUGIN_MISBEHAVE
#define _POSIX_C_SOURCE 200809L /* pause() */
#endif
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plugin/attnkit_plugin.h"

#ifndef EXAMPLE_PLUGIN_ABI_VERSION
#define EXAMPLE_PLUGIN_ABI_VERSION ATTNKIT_PLUGIN_ABI_VERSION
#endif
#ifndef EXAMPLE_PLUGIN_NAME
#define EXAMPLE_PLUGIN_NAME "example"
#endif
#ifndef EXAMPLE_PLUGIN_HEAD_DIM_MAX
#define EXAMPLE_PLUGIN_HEAD_DIM_MAX 1024
#endif
#ifndef EXAMPLE_PLUGIN_TABLE_SIZE
#ifdef EXAMPLE_PLUGIN_TABLE_END
#define EXAMPLE_PLUGIN_TABLE_SIZE \
  offsetof(attnkit_plugin_v1_table, EXAMPLE_PLUGIN_TABLE_END)
#else
#define EXAMPLE_PLUGIN_TABLE_SIZE sizeof(attnkit_plugin_v1_table)
#endif
#endif
/* Whether the table this library claims holds `field`: an entry outside it
 * must never be called (the loader may not even read it). */
#define EXAMPLE_TABLE_HAS(field)              \
  (EXAMPLE_PLUGIN_TABLE_SIZE >=               \
   offsetof(attnkit_plugin_v1_table, field) + \
       sizeof(((attnkit_plugin_v1_table*)0)->field))

/* The bugs a hand-written KV append has; the harness must catch each. */
#define EXAMPLE_APPEND_CORRECT 0
#define EXAMPLE_APPEND_POSITION_OFF 1 /* token t lands at positions[b]+t+1 */
#define EXAMPLE_APPEND_PAST_END                                            \
  2                                 /* the last token is stored again, one \
                                       position past the new tokens */
#define EXAMPLE_APPEND_SKIPS_HEAD 3 /* the head loop stops one short */
#ifndef EXAMPLE_PLUGIN_APPEND_BUG
#define EXAMPLE_PLUGIN_APPEND_BUG EXAMPLE_APPEND_CORRECT
#endif

/* Bugs a hand-written attention block has; the harness must catch each. */
#define EXAMPLE_BLOCK_CORRECT 0
#define EXAMPLE_BLOCK_K_WITH_WV 1 /* K projected with Wv (and bv) */
#define EXAMPLE_BLOCK_Q_SLICE_OFF_BY_ONE \
  2 /* Q column c reads Wq's column c + 1 (wrapping) */
#ifndef EXAMPLE_PLUGIN_BLOCK_BUG
#define EXAMPLE_PLUGIN_BLOCK_BUG EXAMPLE_BLOCK_CORRECT
#endif
/* The block entries the table sets: 2 both, 1 supports_block alone (the
 * loader must refuse that table), 0 neither (the plug-in has no block). */
#ifndef EXAMPLE_PLUGIN_BLOCK_ENTRIES
#define EXAMPLE_PLUGIN_BLOCK_ENTRIES 2
#endif
/* The table's kv_dtypes: this kernel reads and appends int8 K/V. */
#ifndef EXAMPLE_PLUGIN_KV_DTYPES
#define EXAMPLE_PLUGIN_KV_DTYPES ATTNKIT_PLUGIN_KV_I8
#endif

/* Per-instance scratch: one query row and one accumulator row, and the
 * block's Q rows, attention rows and one token's K/V rows, grown on demand
 * (a real kernel sizes its workspace once per shape). */
typedef struct example_state {
  float* q;
  float* acc;
  int64_t capacity;
  float* block_q;
  int64_t block_q_capacity;
  float* block_a;
  int64_t block_a_capacity;
  float* block_kv;
  int64_t block_kv_capacity;
} example_state;

/* Grows *buf to at least n floats; 0 when out of memory. */
static int grow(float** buf, int64_t* capacity, int64_t n) {
  if (n <= *capacity) return 1;
  float* p = (float*)realloc(*buf, (size_t)n * sizeof(float));
  if (p == NULL) return 0;
  *buf = p;
  *capacity = n;
  return 1;
}

static float load(const attnkit_plugin_tensor* t, int64_t i0, int64_t i1,
                  int64_t i2, int64_t i3) {
  const int64_t off = i0 * t->strides[0] + i1 * t->strides[1] +
                      i2 * t->strides[2] + i3 * t->strides[3];
  if (t->dtype == ATTNKIT_PLUGIN_BF16) {
    const uint32_t bits = (uint32_t)((const uint16_t*)t->data)[off] << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
  }
  if (t->dtype == ATTNKIT_PLUGIN_I8) {
    /* The stored integer: the caller applies the row's scale. */
    return (float)((const int8_t*)t->data)[off];
  }
  return ((const float*)t->data)[off];
}

#ifdef EXAMPLE_PLUGIN_MISBEHAVE
#include <signal.h>
#include <unistd.h>

/* ATTNKIT_TEST_MISBEHAVE=ACTION@ENTRY[+N]: entry point ENTRY (create,
 * supports, attention, append_kv, supports_block, attention_block) behaves for
 * its first N calls (default 0) in this process, then does ACTION on every
 * call: segv (a write through a null pointer), abort, hang (never returns),
 * exit0 / exit3 (exit(0) / exit(3) in the middle of the call), or print (a line
 * to stdout and one to stderr, then the correct result). Unset: a correct
 * kernel. */
static void misbehave(const char* entry) {
  enum { kCount = 6 };
  static int calls[kCount];
  static const char* const kEntries[kCount] = {
      "create",    "supports",       "attention",
      "append_kv", "supports_block", "attention_block"};
  const char* spec = getenv("ATTNKIT_TEST_MISBEHAVE");
  const char* at = spec != NULL ? strchr(spec, '@') : NULL;
  if (at == NULL) return;
  const size_t action_len = (size_t)(at - spec);
  const char* plus = strchr(at, '+');
  const size_t entry_len =
      plus != NULL ? (size_t)(plus - at - 1) : strlen(at + 1);
  if (strlen(entry) != entry_len || strncmp(at + 1, entry, entry_len) != 0) {
    return;
  }
  int slot = 0;
  while (slot < kCount && strcmp(kEntries[slot], entry) != 0) ++slot;
  if (slot == kCount || calls[slot]++ < (plus != NULL ? atoi(plus + 1) : 0))
    return;
#define EXAMPLE_IS(word) \
  (action_len == strlen(word) && strncmp(spec, word, action_len) == 0)
  if (!EXAMPLE_IS("print")) {
    /* A last word, as a kernel's log would leave one. */
    fprintf(stderr, "example_misbehave: %s: %.*s now\n", entry, (int)action_len,
            spec);
  }
  if (EXAMPLE_IS("segv")) {
    /* A wild store, as a kernel's bad index makes: an unmapped page, not
     * NULL (a sanitizer build would report a null store itself and exit 1
     * before the fault). */
    volatile int* volatile nowhere = (volatile int*)(uintptr_t)64;
    *nowhere = 1;
  } else if (EXAMPLE_IS("abort")) {
    abort();
  } else if (EXAMPLE_IS("hang")) {
    for (;;) pause();
  } else if (EXAMPLE_IS("exit0")) {
    exit(0);
  } else if (EXAMPLE_IS("exit3")) {
    exit(3);
  } else if (EXAMPLE_IS("print")) {
    printf("example_misbehave: %s says hello on stdout\n", entry);
    fflush(stdout);
    fprintf(stderr, "example_misbehave: %s says hello on stderr\n", entry);
  }
#undef EXAMPLE_IS
}
#define MISBEHAVE(entry) misbehave(entry)
#else
#define MISBEHAVE(entry) ((void)0)
#endif

static void* example_create(char* error, size_t error_capacity) {
  MISBEHAVE("create");
  example_state* s = (example_state*)calloc(1, sizeof(example_state));
  if (s == NULL) snprintf(error, error_capacity, "out of memory");
  return s;
}

static void example_destroy(void* instance) {
  example_state* s = (example_state*)instance;
  free(s->q);
  free(s->acc);
  free(s->block_q);
  free(s->block_a);
  free(s->block_kv);
  free(s);
}

/* What this build declines, for attention and block alike. */
static attnkit_plugin_status declines(const attnkit_plugin_problem* p,
                                      char* error, size_t error_capacity) {
  if (p->head_dim > EXAMPLE_PLUGIN_HEAD_DIM_MAX) {
#ifdef EXAMPLE_PLUGIN_UNTERMINATED_MESSAGE
    /* A hostile message: a terminal escape sequence, then every byte it was
     * given filled, no NUL. */
    static const char kRed[] = "\x1b[31mred";
    memset(error, 'A', error_capacity);
    memcpy(error, kRed, error_capacity < 8 ? error_capacity : 8);
#else
    snprintf(error, error_capacity, "head_dim=%lld exceeds %d",
             (long long)p->head_dim, EXAMPLE_PLUGIN_HEAD_DIM_MAX);
#endif
    return ATTNKIT_PLUGIN_UNSUPPORTED;
  }
  return ATTNKIT_PLUGIN_OK;
}

static attnkit_plugin_status example_supports(void* instance,
                                              const attnkit_plugin_problem* p,
                                              char* error,
                                              size_t error_capacity) {
  (void)instance;
  MISBEHAVE("supports");
  return declines(p, error, error_capacity);
}

/* The attention itself (attention() and the block's attention over the
 * cache both run it). */
static attnkit_plugin_status attend(example_state* s,
                                    const attnkit_plugin_problem* p,
                                    const attnkit_plugin_attention_args* a,
                                    char* error, size_t error_capacity) {
  const int64_t d = p->head_dim;
  if (p->kv_heads < 1 || p->q_heads % p->kv_heads != 0) {
    snprintf(error, error_capacity,
             "kv_heads=%lld does not divide q_heads=%lld",
             (long long)p->kv_heads, (long long)p->q_heads);
    return ATTNKIT_PLUGIN_INVALID_ARGUMENT;
  }
  if (d > s->capacity) {
    float* q = (float*)realloc(s->q, (size_t)d * sizeof(float));
    if (q != NULL) s->q = q;
    float* acc = (float*)realloc(s->acc, (size_t)d * sizeof(float));
    if (acc != NULL) s->acc = acc;
    if (q == NULL || acc == NULL) {
      snprintf(error, error_capacity, "out of memory for head_dim=%lld",
               (long long)d);
      return ATTNKIT_PLUGIN_INTERNAL;
    }
    s->capacity = d;
  }
  /* An int8 cache: key j is k[j, :] * k_scale[j], value j v[j, :] *
   * v_scale[j]. The scales are applied once per key -- to the dot product
   * and to the softmax weight -- never per element. Read from k's dtype, which
   * every harness has always set (problem->kv_dtype is new, see the header). */
  const int quantized = a->k.dtype == ATTNKIT_PLUGIN_I8;
  if (quantized && (!EXAMPLE_TABLE_HAS(kv_dtypes) ||
                    (EXAMPLE_PLUGIN_KV_DTYPES & ATTNKIT_PLUGIN_KV_I8) == 0)) {
    /* The test variants that do not declare int8 K/V: the loader must never
     * hand them one, so reaching here is its bug. */
    snprintf(error, error_capacity,
             "int8 K/V handed to a table that does not declare them "
             "(struct_size=%u, kv_dtypes=0x%x)",
             (unsigned)(EXAMPLE_PLUGIN_TABLE_SIZE),
             (unsigned)(EXAMPLE_PLUGIN_KV_DTYPES));
    return ATTNKIT_PLUGIN_INTERNAL;
  }
  if (quantized && (a->v.dtype != ATTNKIT_PLUGIN_I8 ||
                    a->k_scale.dtype != ATTNKIT_PLUGIN_F32 ||
                    a->v_scale.dtype != ATTNKIT_PLUGIN_F32)) {
    snprintf(error, error_capacity,
             "k.dtype=i8 with v.dtype=%d, k_scale.dtype=%d, v_scale.dtype=%d "
             "(expected i8, f32, f32)",
             (int)a->v.dtype, (int)a->k_scale.dtype, (int)a->v_scale.dtype);
    return ATTNKIT_PLUGIN_INVALID_ARGUMENT;
  }
  const int64_t group = p->q_heads / p->kv_heads;
  for (int64_t b = 0; b < p->batch; ++b) {
    const int64_t ql = p->q_lens[b], kl = p->kv_lens[b];
    if (quantized && kl > 0 &&
        (a->k_scale.data == NULL || a->v_scale.data == NULL)) {
      snprintf(error, error_capacity,
               "kv_lens[%lld]=%lld but k_scale.data or v_scale.data is NULL",
               (long long)b, (long long)kl);
      return ATTNKIT_PLUGIN_INVALID_ARGUMENT;
    }
    for (int64_t h = 0; h < p->q_heads; ++h) {
      const int64_t kh = h / group;
      for (int64_t i = 0; i < ql; ++i) {
        const int64_t pos = kl - ql + i;
        int64_t begin = 0, end = kl;
        if (p->mask == ATTNKIT_PLUGIN_MASK_CAUSAL ||
            p->mask == ATTNKIT_PLUGIN_MASK_WINDOW) {
          end = pos + 1 < kl ? pos + 1 : kl;
        }
        if (p->mask == ATTNKIT_PLUGIN_MASK_WINDOW && pos - p->window + 1 > 0) {
          begin = pos - p->window + 1;
        }
        for (int64_t e = 0; e < d; ++e) {
          s->q[e] = load(&a->q, b, h, i, e);
          s->acc[e] = 0.0f;
        }
        float m = -INFINITY, l = 0.0f;
        for (int64_t j = begin; j < end; ++j) {
          float dot = 0.0f;
          for (int64_t e = 0; e < d; ++e)
            dot += s->q[e] * load(&a->k, b, kh, j, e);
          if (quantized) dot *= load(&a->k_scale, b, kh, j, 0);
          float x = p->scale * dot;
          if (p->mask == ATTNKIT_PLUGIN_MASK_BIAS) {
            x += load(&a->bias, b, a->bias.shape[1] == 1 ? 0 : h, i, j);
          }
          if (x == -INFINITY) continue;
          if (x > m) { /* new running max: rescale what was summed */
            const float alpha = expf(m - x);
            l *= alpha;
            for (int64_t e = 0; e < d; ++e) s->acc[e] *= alpha;
            m = x;
          }
          const float w = expf(x - m);
          l += w;
          const float wv = quantized ? w * load(&a->v_scale, b, kh, j, 0) : w;
          for (int64_t e = 0; e < d; ++e)
            s->acc[e] += wv * load(&a->v, b, kh, j, e);
        }
        float* out = (float*)a->out.data;
        for (int64_t e = 0; e < d; ++e) {
          out[b * a->out.strides[0] + h * a->out.strides[1] +
              i * a->out.strides[2] + e * a->out.strides[3]] =
              l > 0.0f ? s->acc[e] / l : 0.0f;
        }
      }
    }
  }
  return ATTNKIT_PLUGIN_OK;
}

static attnkit_plugin_status example_attention(
    void* instance, const attnkit_plugin_problem* p,
    const attnkit_plugin_attention_args* a, char* error,
    size_t error_capacity) {
  MISBEHAVE("attention");
  return attend((example_state*)instance, p, a, error, error_capacity);
}

static size_t dtype_size(int32_t dtype) {
  return dtype == ATTNKIT_PLUGIN_BF16 ? sizeof(uint16_t)
         : dtype == ATTNKIT_PLUGIN_I8 ? sizeof(int8_t)
                                      : sizeof(float);
}

/* Quantizes token `from` of sequence b, kv head h, of src (f32 or bf16)
 * into position `to` of the int8 cache dst and its scale into scales, by
 * attnkit's one rule (attnkit_plugin.h): scale = absmax / 127 (1 when that
 * is not positive), q = round-half-even(x / scale) clamped to [-127, 127].
 * A division per element, not a multiplication by 1 / scale: the reciprocal
 * rounds differently on some values, and the harness compares every byte. */
static void quantize_token(const attnkit_plugin_tensor* dst,
                           const attnkit_plugin_tensor* scales,
                           const attnkit_plugin_tensor* src, int64_t b,
                           int64_t h, int64_t from, int64_t to) {
  const int64_t dim = dst->shape[3];
  float absmax = 0.0f;
  for (int64_t e = 0; e < dim; ++e) {
    const float x = fabsf(load(src, b, h, from, e));
    if (x > absmax) absmax = x;
  }
  float scale = absmax / 127.0f;
  if (!(scale > 0.0f)) scale = 1.0f;
  int8_t* out = (int8_t*)dst->data;
  for (int64_t e = 0; e < dim; ++e) {
    /* nearbyintf: to nearest, ties to even (the default rounding mode). */
    float r = nearbyintf(load(src, b, h, from, e) / scale);
    if (r > 127.0f) r = 127.0f;
    if (r < -127.0f) r = -127.0f;
    out[b * dst->strides[0] + h * dst->strides[1] + to * dst->strides[2] +
        e * dst->strides[3]] = (int8_t)r;
  }
  ((float*)scales->data)[b * scales->strides[0] + h * scales->strides[1] +
                         to * scales->strides[2]] = scale;
}

/* Copies token `from` of sequence b, kv head h, of src to position `to` of
 * dst: one memcpy when both rows are contiguous in head_dim (BHSD/BSHD
 * keys), else element by element (transposed V: consecutive elements of a
 * token are a capacity apart). */
static void copy_token(const attnkit_plugin_tensor* dst,
                       const attnkit_plugin_tensor* src, int64_t b, int64_t h,
                       int64_t from, int64_t to, size_t esize) {
  char* d =
      (char*)dst->data + (size_t)(b * dst->strides[0] + h * dst->strides[1] +
                                  to * dst->strides[2]) *
                             esize;
  const char* s = (const char*)src->data +
                  (size_t)(b * src->strides[0] + h * src->strides[1] +
                           from * src->strides[2]) *
                      esize;
  const int64_t dim = dst->shape[3];
  if (dst->strides[3] == 1 && src->strides[3] == 1) {
    memcpy(d, s, (size_t)dim * esize);
    return;
  }
  for (int64_t e = 0; e < dim; ++e) {
    memcpy(d + (size_t)(e * dst->strides[3]) * esize,
           s + (size_t)(e * src->strides[3]) * esize, esize);
  }
}

/* Token `from` of new_k/new_v to position `to` of the caches: copied, or
 * quantized into an int8 cache. */
static void put_token(const attnkit_plugin_kv_append_args* a, int quantized,
                      int64_t b, int64_t h, int64_t from, int64_t to,
                      size_t esize) {
  if (quantized) {
    quantize_token(&a->k_cache, &a->k_scale, &a->new_k, b, h, from, to);
    quantize_token(&a->v_cache, &a->v_scale, &a->new_v, b, h, from, to);
    return;
  }
  copy_token(&a->k_cache, &a->new_k, b, h, from, to, esize);
  copy_token(&a->v_cache, &a->new_v, b, h, from, to, esize);
}

/* The in-place append: token t of sequence b goes to positions[b] + t, for
 * K and V, every kv head; nothing else of the cache is written. */
static attnkit_plugin_status example_append_kv(
    void* instance, const attnkit_plugin_kv_append_args* a, char* error,
    size_t error_capacity) {
  (void)instance;
  MISBEHAVE("append_kv");
  if (!EXAMPLE_TABLE_HAS(append_kv)) {
    /* The test variant whose table claims to end before append_kv: the
     * loader must not even read the field, so reaching here is its bug. */
    snprintf(error, error_capacity,
             "append_kv called although struct_size=%u ends before it",
             (unsigned)(EXAMPLE_PLUGIN_TABLE_SIZE));
    return ATTNKIT_PLUGIN_INTERNAL;
  }
  const int64_t batch = a->k_cache.shape[0], heads = a->k_cache.shape[1];
  const int64_t capacity = a->k_cache.shape[2];
  if (a->k_cache.shape[3] > EXAMPLE_PLUGIN_HEAD_DIM_MAX) {
    snprintf(error, error_capacity, "head_dim=%lld exceeds %d",
             (long long)a->k_cache.shape[3], EXAMPLE_PLUGIN_HEAD_DIM_MAX);
    return ATTNKIT_PLUGIN_INVALID_ARGUMENT;
  }
  const size_t esize = dtype_size(a->k_cache.dtype);
  /* An int8 cache takes f32/bf16 tokens, quantized into their slots. */
  const int quantized = a->k_cache.dtype == ATTNKIT_PLUGIN_I8;
  if (quantized && (!EXAMPLE_TABLE_HAS(kv_dtypes) ||
                    (EXAMPLE_PLUGIN_KV_DTYPES & ATTNKIT_PLUGIN_KV_I8) == 0)) {
    snprintf(error, error_capacity,
             "an int8 cache handed to a table that does not declare it "
             "(struct_size=%u, kv_dtypes=0x%x)",
             (unsigned)(EXAMPLE_PLUGIN_TABLE_SIZE),
             (unsigned)(EXAMPLE_PLUGIN_KV_DTYPES));
    return ATTNKIT_PLUGIN_INTERNAL;
  }
  if (quantized && (a->k_scale.data == NULL || a->v_scale.data == NULL)) {
    snprintf(error, error_capacity,
             "k_cache.dtype=i8 but k_scale.data or v_scale.data is NULL");
    return ATTNKIT_PLUGIN_INVALID_ARGUMENT;
  }
  int64_t head_end = heads;
  if (EXAMPLE_PLUGIN_APPEND_BUG == EXAMPLE_APPEND_SKIPS_HEAD) head_end -= 1;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t pos = a->positions[b], n = a->new_lens[b];
    for (int64_t h = 0; h < head_end; ++h) {
      for (int64_t t = 0; t < n; ++t) {
        int64_t to = pos + t;
        if (EXAMPLE_PLUGIN_APPEND_BUG == EXAMPLE_APPEND_POSITION_OFF) {
          if (to + 1 >= capacity) continue; /* stays inside the view */
          to += 1;
        }
        put_token(a, quantized, b, h, t, to, esize);
      }
      if (EXAMPLE_PLUGIN_APPEND_BUG == EXAMPLE_APPEND_PAST_END && n > 0 &&
          pos + n < capacity) {
        put_token(a, quantized, b, h, n - 1, pos + n, esize);
      }
    }
  }
  return ATTNKIT_PLUGIN_OK;
}

/* The block's entries must not be reached through a table that claims to
 * end before them (the loader's bug if they are). */
static attnkit_plugin_status outside_the_table(const char* entry, char* error,
                                               size_t error_capacity) {
  snprintf(error, error_capacity,
           "%s called although struct_size=%u ends before it", entry,
           (unsigned)(EXAMPLE_PLUGIN_TABLE_SIZE));
  return ATTNKIT_PLUGIN_INTERNAL;
}

static attnkit_plugin_status example_supports_block(
    void* instance, const attnkit_plugin_block_problem* p, char* error,
    size_t error_capacity) {
  (void)instance;
  MISBEHAVE("supports_block");
  if (!EXAMPLE_TABLE_HAS(supports_block)) {
    return outside_the_table("supports_block", error, error_capacity);
  }
  if (p->attention.dtype != ATTNKIT_PLUGIN_F32) {
    snprintf(error, error_capacity,
             "attention.dtype=%d: this block writes an f32 cache",
             (int)p->attention.dtype);
    return ATTNKIT_PLUGIN_UNSUPPORTED;
  }
  return declines(&p->attention, error, error_capacity);
}

/* x[b, 0, i, :] times the columns [0, width) of w (+ bias), into row[width]:
 * f32, summed over hidden in order; bf16 weights widened as they are read. */
static void project(const attnkit_plugin_tensor* x,
                    const attnkit_plugin_tensor* w,
                    const attnkit_plugin_tensor* bias, int64_t b, int64_t i,
                    int64_t hidden, int64_t width, int64_t column_shift,
                    float* row) {
  for (int64_t c = 0; c < width; ++c) {
    row[c] = 0.0f;
  }
  for (int64_t r = 0; r < hidden; ++r) {
    const float xr = load(x, b, 0, i, r);
    for (int64_t c = 0; c < width; ++c) {
      int64_t col = c + column_shift;
      if (col >= width) col -= width;
      row[c] += xr * load(w, 0, 0, r, col);
    }
  }
  if (bias->data != NULL) {
    for (int64_t c = 0; c < width; ++c) row[c] += load(bias, 0, 0, 0, c);
  }
}

/* Stores row[h * d + e] at cache[b, h, pos, e] (f32; any layout). */
static void store_heads(const attnkit_plugin_tensor* cache, const float* row,
                        int64_t b, int64_t pos, int64_t heads, int64_t d) {
  float* base = (float*)cache->data;
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t e = 0; e < d; ++e) {
      base[b * cache->strides[0] + h * cache->strides[1] +
           pos * cache->strides[2] + e * cache->strides[3]] = row[h * d + e];
    }
  }
}

/* The attention block in three passes: every new token's Q into a scratch
 * of Q rows and its K/V straight into the cache slots, then the attention
 * of those Q rows over the cache (attend()), then Wo (or a copy) into out. */
static attnkit_plugin_status example_attention_block(
    void* instance, const attnkit_plugin_block_problem* bp,
    const attnkit_plugin_block_args* a, char* error, size_t error_capacity) {
  example_state* s = (example_state*)instance;
  const attnkit_plugin_problem* p = &bp->attention;
  MISBEHAVE("attention_block");
  if (!EXAMPLE_TABLE_HAS(attention_block)) {
    return outside_the_table("attention_block", error, error_capacity);
  }
  /* The harness checked all of this; a kernel that trusts nobody names
   * what it rejects all the same. */
  if (bp->hidden < 1) {
    snprintf(error, error_capacity, "hidden=%lld is not positive",
             (long long)bp->hidden);
    return ATTNKIT_PLUGIN_INVALID_ARGUMENT;
  }
  if (bp->weight_dtype != ATTNKIT_PLUGIN_F32 &&
      bp->weight_dtype != ATTNKIT_PLUGIN_BF16) {
    snprintf(error, error_capacity,
             "weight_dtype=%d is neither f32 (%d) nor bf16 (%d)",
             (int)bp->weight_dtype, ATTNKIT_PLUGIN_F32, ATTNKIT_PLUGIN_BF16);
    return ATTNKIT_PLUGIN_INVALID_ARGUMENT;
  }
  if (a->k_cache.dtype != ATTNKIT_PLUGIN_F32 ||
      a->v_cache.dtype != ATTNKIT_PLUGIN_F32) {
    snprintf(error, error_capacity,
             "k_cache.dtype=%d, v_cache.dtype=%d: this block writes an f32 "
             "cache",
             (int)a->k_cache.dtype, (int)a->v_cache.dtype);
    return ATTNKIT_PLUGIN_INVALID_ARGUMENT;
  }
  if (p->kv_heads < 1 || p->q_heads % p->kv_heads != 0) {
    snprintf(error, error_capacity,
             "kv_heads=%lld does not divide q_heads=%lld",
             (long long)p->kv_heads, (long long)p->q_heads);
    return ATTNKIT_PLUGIN_INVALID_ARGUMENT;
  }
  if (p->head_dim > EXAMPLE_PLUGIN_HEAD_DIM_MAX) {
    /* What supports_block declines, refused when called anyway. */
    snprintf(error, error_capacity, "head_dim=%lld exceeds %d",
             (long long)p->head_dim, EXAMPLE_PLUGIN_HEAD_DIM_MAX);
    return ATTNKIT_PLUGIN_INVALID_ARGUMENT;
  }
  {
    /* A tensor with elements must have data (one without, e.g. x of a
     * batch with no new token, may be NULL). */
    const attnkit_plugin_tensor* const needed[] = {
        &a->x,       &a->wq,
        &a->wk,      &a->wv,
        &a->k_cache, &a->v_cache,
        &a->out,     bp->output_projection ? &a->wo : NULL};
    static const char* const kNames[] = {"x",       "wq",      "wk",  "wv",
                                         "k_cache", "v_cache", "out", "wo"};
    for (int t = 0; t < 8; ++t) {
      if (needed[t] != NULL && needed[t]->data == NULL &&
          needed[t]->shape[0] * needed[t]->shape[1] * needed[t]->shape[2] *
                  needed[t]->shape[3] >
              0) {
        snprintf(error, error_capacity, "%s.data is NULL", kNames[t]);
        return ATTNKIT_PLUGIN_INVALID_ARGUMENT;
      }
    }
  }
  const int64_t d = p->head_dim, hidden = bp->hidden;
  const int64_t q_width = p->q_heads * d, kv_width = p->kv_heads * d;
  int64_t max_q = 0;
  for (int64_t b = 0; b < p->batch; ++b) {
    if (p->q_lens[b] > max_q) max_q = p->q_lens[b];
  }
  const int64_t rows = p->batch * max_q;
  if (!grow(&s->block_q, &s->block_q_capacity, rows * q_width) ||
      !grow(&s->block_a, &s->block_a_capacity, rows * q_width) ||
      !grow(&s->block_kv, &s->block_kv_capacity, kv_width)) {
    snprintf(error, error_capacity,
             "out of memory for %lld rows of q_width=%lld", (long long)rows,
             (long long)q_width);
    return ATTNKIT_PLUGIN_INTERNAL;
  }
  const int64_t q_shift =
      EXAMPLE_PLUGIN_BLOCK_BUG == EXAMPLE_BLOCK_Q_SLICE_OFF_BY_ONE ? 1 : 0;
  const int k_with_wv = EXAMPLE_PLUGIN_BLOCK_BUG == EXAMPLE_BLOCK_K_WITH_WV;
  for (int64_t b = 0; b < p->batch; ++b) {
    const int64_t ql = p->q_lens[b], first = p->kv_lens[b] - ql;
    for (int64_t i = 0; i < ql; ++i) {
      project(&a->x, &a->wq, &a->bq, b, i, hidden, q_width, q_shift,
              s->block_q + (b * max_q + i) * q_width);
      project(&a->x, k_with_wv ? &a->wv : &a->wk, k_with_wv ? &a->bv : &a->bk,
              b, i, hidden, kv_width, 0, s->block_kv);
      store_heads(&a->k_cache, s->block_kv, b, first + i, p->kv_heads, d);
      project(&a->x, &a->wv, &a->bv, b, i, hidden, kv_width, 0, s->block_kv);
      store_heads(&a->v_cache, s->block_kv, b, first + i, p->kv_heads, d);
    }
  }
  /* The Q rows and the attention's rows as [batch, q_heads, max_q, d]
   * views: head h of token i is columns [h * d, h * d + d) of row i. */
  attnkit_plugin_tensor q = {0}, att = {0};
  q.data = s->block_q;
  att.data = s->block_a;
  q.dtype = att.dtype = ATTNKIT_PLUGIN_F32;
  q.shape[0] = att.shape[0] = p->batch;
  q.shape[1] = att.shape[1] = p->q_heads;
  q.shape[2] = att.shape[2] = max_q;
  q.shape[3] = att.shape[3] = d;
  q.strides[0] = att.strides[0] = max_q * q_width;
  q.strides[1] = att.strides[1] = d;
  q.strides[2] = att.strides[2] = q_width;
  q.strides[3] = att.strides[3] = 1;
  /* The block's cache is f32: no scales. */
  const attnkit_plugin_tensor no_scales = {0};
  const attnkit_plugin_attention_args args = {
      q, a->k_cache, a->v_cache, a->bias, att, no_scales, no_scales};
  const attnkit_plugin_status st = attend(s, p, &args, error, error_capacity);
  if (st != ATTNKIT_PLUGIN_OK) return st;
  float* out = (float*)a->out.data;
  const int64_t out_width = bp->output_projection ? hidden : q_width;
  for (int64_t b = 0; b < p->batch; ++b) {
    for (int64_t i = 0; i < p->q_lens[b]; ++i) {
      const float* row = s->block_a + (b * max_q + i) * q_width;
      float* o = out + b * a->out.strides[0] + i * a->out.strides[2];
      for (int64_t c = 0; c < out_width; ++c) o[c * a->out.strides[3]] = 0.0f;
      if (!bp->output_projection) {
        for (int64_t c = 0; c < q_width; ++c) o[c * a->out.strides[3]] = row[c];
        continue;
      }
      for (int64_t r = 0; r < q_width; ++r) {
        for (int64_t c = 0; c < hidden; ++c) {
          o[c * a->out.strides[3]] += row[r] * load(&a->wo, 0, 0, r, c);
        }
      }
    }
  }
  return ATTNKIT_PLUGIN_OK;
}

static const attnkit_plugin_v1_table kTable = {
    EXAMPLE_PLUGIN_ABI_VERSION,
    (uint32_t)(EXAMPLE_PLUGIN_TABLE_SIZE),
    EXAMPLE_PLUGIN_NAME,
    example_create,
    example_destroy,
    example_supports,
    example_attention,
    example_append_kv,
    EXAMPLE_PLUGIN_BLOCK_ENTRIES >= 1 ? example_supports_block : NULL,
    EXAMPLE_PLUGIN_BLOCK_ENTRIES >= 2 ? example_attention_block : NULL,
    EXAMPLE_PLUGIN_KV_DTYPES,
    0,
};

/* EXAMPLE_PLUGIN_NO_ENTRY builds a library whose only export has the wrong
 * name (the loader must say it is not a plug-in). */
#ifdef EXAMPLE_PLUGIN_NO_ENTRY
#define EXAMPLE_ENTRY attnkit_plugin_v0
#else
#define EXAMPLE_ENTRY attnkit_plugin_v1
#endif

#if defined(__GNUC__)
__attribute__((visibility("default")))
#endif
const attnkit_plugin_v1_table*
EXAMPLE_ENTRY(void) {
  return &kTable;
}
