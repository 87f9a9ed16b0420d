// attnkit-vectorize-flash: the decode kernel (any other query tile: K and V
// rows streamed at full vector width; i8 rows converted in registers, their
// scales applied to the scores and to P).
#include "compiled/vector_emitter.h"

#include "compiled/passes.h"

#include <optional>

using namespace mlir;

namespace attnkit::compiled::vectorize {

/// Transposed V, decode kernel: acc[r][e] = acc * alpha +
/// sum_j P[r][j] * Vᵀ[e][j0+j]. That is QKᵀ's shape (P rows for the q rows,
/// Vᵀ rows along the keys for the K rows), so it runs like qkDecodeBlock:
/// blocks of rb rows x kb = 16 / rb dims e, each Vᵀ vector loaded (and
/// widened) once for the rb rows, the 16 (row, e) sums reduced together by
/// one transposeReduce -- not one horizontal reduction per row and e.
/// Dims past d repeat row d - 1 and land in acc_'s padding (its rows are
/// padded to whole vectors in the decode kernel).
void Emitter::pvTransposedDecode(Value j0, Value bk) {
  const int64_t d = f_.d;
  for (int64_t r0 = 0, rb = 8; r0 < rows_; r0 += rb) {
    while (rb > rows_ - r0)
      rb /= 2;
    const int64_t kb = kLanes / rb;
    loop(cI(0), cI(d), cI(kb), [&](Value e0) {
      SmallVector<Value> es;
      for (int64_t x = 0; x < kb; ++x)
        es.push_back(minI(add(e0, cI(x)), cI(d - 1)));
      // The next tile's part of these Vᵀ rows, into L2: d rows a tile apart
      // in memory are more streams than the hardware prefetchers follow.
      // f32: all of them at the start of the block. bf16 and int8 (four
      // times the keys per tile): spread over the key steps, at the 16 keys
      // from jc each row's line at jc of the next tile (a line spans several
      // steps: fetched at the first where jc's offset in 64 keys is known,
      // at each in the loop rolled by 16). kv 16k, 6-8 rounds, time spread / at
      // the start: bf16 Hkv 32 0.84-0.85x, decode_paired bf16 Hkv 8 0.92-0.96x;
      // f32 Hkv 32 1.055x (2-core AMD EPYC Zen 5, MLIR/LLVM 22, 2026-11-28;
      // README.md, the transposed V decode).
      const int64_t bits = elemOf(f_.v).getIntOrFloatBitWidth();
      const int64_t perLine = 512 / bits;
      const bool spread = bits < 32;
      Value vLast;
      if (r0 == 0)
        vLast = sub(memref::DimOp::create(b_, loc_, f_.v, 1), cI(1));
      auto fetch = [&](Value e, Value o) {
        memref::PrefetchOp::create(b_, loc_, f_.v,
                                   ValueRange{e, minI(add(j0, o), vLast)},
                                   /*isWrite=*/false, /*localityHint=*/2,
                                   /*isDataCache=*/true);
      };
      if (r0 == 0 && !spread)
        for (Value e : es)
          for (int64_t o = 0; o < f_.bk; o += perLine)
            fetch(e, cI(f_.bk + o));
      // One step of 16 keys from jc; `phase`: jc modulo 64 where it is known
      // (a constant jc, or a step of the loop rolled by 64 keys below), so
      // the spread prefetch issues each line once.
      auto stepAt = [&](Value jc, std::optional<int64_t> phase, ValueRange a) {
        if (r0 == 0 && spread && (!phase || *phase % perLine == 0))
          for (Value e : es)
            fetch(e, add(jc, cI(f_.bk)));
        SmallVector<Value> pv, out(a.begin(), a.end());
        for (int64_t y = 0; y < rb; ++y)
          pv.push_back(loadV(scores_, {cI(r0 + y), jc}, kLanes));
        for (int64_t x = 0; x < kb; ++x) {
          Value vt =
              loadMasked(f_.v, {es[x], add(j0, jc)}, kLanes, sub(bk, jc));
          for (int64_t y = 0; y < rb; ++y)
            out[y * kb + x] = fma(vt, pv[y], out[y * kb + x]);
        }
        return out;
      };
      // Over the tile's keys 16 at a time. With 8 or more Vᵀ rows per block
      // (G <= 2) a loop kept rolled: unrolled over the 64 keys, LLVM hoisted
      // the tile's Vᵀ loads ahead of the FMAs and spilled accumulators. With
      // 4 (G >= 4) the unrolled steps stay in registers and measured faster
      // (kv 16k Hkv 8 f32: the rolled loop 1.06-1.12x the time, 2 threads).
      // Tiles longer than 256 keys (bf16 and int8, kvTileFor) go 64 keys (4
      // steps) per iteration of a rolled loop: unrolled whole, their 32+
      // steps made a kernel body of thousands of instructions per block.
      SmallVector<Value> acc(kLanes, splatF(0.0f, kLanes));
      if (kb > 4) {
        acc = loop(
            cI(0), cI(f_.bk), cI(kLanes), acc,
            [&](Value jc, ValueRange a) { return stepAt(jc, std::nullopt, a); },
            /*rolled=*/true);
      } else if (f_.bk > 256 && f_.bk % (4 * kLanes) == 0) {
        acc = loop(
            cI(0), cI(f_.bk), cI(4 * kLanes), acc,
            [&](Value jo, ValueRange a) {
              SmallVector<Value> x(a.begin(), a.end());
              for (int64_t u = 0; u < 4; ++u)
                x = stepAt(add(jo, cI(u * kLanes)), u * kLanes, x);
              return x;
            },
            /*rolled=*/true);
      } else {
        for (int64_t jc = 0; jc < f_.bk; jc += kLanes)
          acc = stepAt(cI(jc), jc % (4 * kLanes), acc);
      }
      Value sums = transposeReduce(acc);
      for (int64_t y = 0; y < rb; ++y) {
        Value part = vector::ExtractStridedSliceOp::create(
            b_, loc_, sums, ArrayRef<int64_t>{y * kb}, ArrayRef<int64_t>{kb},
            ArrayRef<int64_t>{1});
        Value old = fmul(loadV(acc_, {cI(r0 + y), e0}, kb),
                         splat(loadS(alpha_, {cI(r0 + y)}), kb));
        storeV(fadd(old, part), acc_, {cI(r0 + y), e0});
      }
    });
  }
}

/// Reduces 16 vector<16xf32> to one vector whose lane l is the sum of the
/// lanes of acc[l] (a transposing reduction: 15 adds and 30 two-source
/// shuffles for 16 sums, against 16 x (4 shuffles + 4 adds) for 16 separate
/// horizontal reductions). Level h halves every vector's segments: the pair
/// (a, b) becomes t1 + t2 where t1 holds the first half of each segment of a
/// and of b, t2 the second halves.
Value Emitter::transposeReduce(SmallVector<Value> acc) {
  assert(acc.size() == kLanes && "16 accumulators");
  // owner[v][lane]: which accumulator's partial sum the lane holds.
  SmallVector<SmallVector<int64_t>> owner;
  for (int64_t a = 0; a < kLanes; ++a)
    owner.push_back(SmallVector<int64_t>(kLanes, a));
  for (int64_t h = kLanes / 2; h >= 1; h /= 2) {
    SmallVector<Value> next;
    SmallVector<SmallVector<int64_t>> nextOwner;
    for (size_t v = 0; v < acc.size(); v += 2) {
      SmallVector<int64_t> m1(kLanes), m2(kLanes), own(kLanes);
      for (int64_t seg = 0; seg < kLanes; seg += 2 * h)
        for (int64_t i = 0; i < h; ++i) {
          m1[seg + i] = seg + i;                  // a, first half
          m2[seg + i] = seg + h + i;              // a, second half
          m1[seg + h + i] = kLanes + seg + i;     // b, first half
          m2[seg + h + i] = kLanes + seg + h + i; // b, second half
          own[seg + i] = owner[v][seg + i];
          own[seg + h + i] = owner[v + 1][seg + i];
        }
      Value t1 = vector::ShuffleOp::create(b_, loc_, acc[v], acc[v + 1], m1);
      Value t2 = vector::ShuffleOp::create(b_, loc_, acc[v], acc[v + 1], m2);
      next.push_back(fadd(t1, t2));
      nextOwner.push_back(own);
    }
    acc = next;
    owner = nextOwner;
  }
  SmallVector<int64_t> perm(kLanes);
  for (int64_t lane = 0; lane < kLanes; ++lane)
    perm[owner[0][lane]] = lane;
  return vector::ShuffleOp::create(b_, loc_, acc[0], acc[0], perm);
}

/// Scores of rows [r0, r0 + rb) against the tile's keys [from, to), kb =
/// 16 / rb keys at a time (8 for one row, see below): each K vector is
/// loaded (and widened, for bf16) once for the rb rows, the 16 (row, key)
/// dot products accumulate in 16 vectors and one transposeReduce yields all
/// 16 scores. Keys past the tile
/// end repeat its last key (scores_ rows stay in bounds: kb divides the
/// tile and `from`; the softmax masks j >= bk).
void Emitter::qkDecodeBlock(Value j0, Value bk, int64_t r0, int64_t rb,
                            Value from, Value to) {
  // vdpbf16ps: 32 bf16 of the K row and of q per instruction, as stored.
  const int64_t lanes = qkLanes();
  const int64_t d = f_.d, full = d / lanes * lanes;
  // One row: 8 keys, each summed in 2 accumulators (even and odd vectors
  // along d), so that 8 K rows are live rather than 16 (with 16, LLVM made
  // the clamped key indices zmm integer math and spilled K vectors). kv 16k
  // Hq 32 / Hkv 32 BHSD, 6 rounds alternating per row, time against 16
  // keys: f32 0.91x (0.86-0.97), bf16 0.98x (0.97-1.07), transposed V bf16
  // 0.97x; simd control 0.98x.
  const int64_t parts = rb == 1 && full >= 2 * lanes ? 2 : 1;
  const int64_t kb = kLanes / (rb * parts);
  Value last = sub(bk, cI(1));
  loop(from, to, cI(kb), [&](Value jj0) {
    SmallVector<Value> keys;
    for (int64_t x = 0; x < kb; ++x)
      keys.push_back(add(j0, minI(add(jj0, cI(x)), last)));
    if (r0 == 0 && !readAhead_)
      for (Value key : keys)
        prefetchRow(f_.k, key);
    // Accumulator (y * kb + x) * parts + h: row y, key x, part h.
    auto step = [&](Value o, ValueRange a, bool tail, int64_t h) {
      SmallVector<Value> qv, out(a.begin(), a.end());
      for (int64_t y = 0; y < rb; ++y)
        qv.push_back(dot_ ? loadRaw(qpack_, {cI(r0 + y), o}, lanes)
                          : loadV(qpack_, {cI(r0 + y), o}, lanes));
      for (int64_t x = 0; x < kb; ++x) {
        Value kv = tail ? loadMaskedRaw(f_.k, {keys[x], o}, lanes, cI(d - full))
                        : loadRaw(f_.k, {keys[x], o}, lanes);
        for (int64_t y = 0; y < rb; ++y) {
          Value &acc = out[(y * kb + x) * parts + h];
          acc = dot_ ? dotBf16(kv, qv[y], acc) : fma(toF32(kv), qv[y], acc);
        }
      }
      return out;
    };
    SmallVector<Value> acc(kLanes, splatF(0.0f, kLanes));
    const int64_t paired = full / (parts * lanes) * (parts * lanes);
    if (paired)
      acc = loop(cI(0), cI(paired), cI(parts * lanes), acc,
                 [&](Value o, ValueRange a) {
                   SmallVector<Value> out(a.begin(), a.end());
                   for (int64_t h = 0; h < parts; ++h)
                     out = step(add(o, cI(h * lanes)), out, false, h);
                   return out;
                 });
    if (paired < full)
      acc = step(cI(paired), acc, false, 0);
    if (full < d)
      acc = step(cI(full), acc, true, parts - 1);
    Value sums = transposeReduce(acc);
    if (parts == 2) {
      SmallVector<int64_t> even, odd;
      for (int64_t l = 0; l < kLanes; l += 2) {
        even.push_back(l);
        odd.push_back(l + 1);
      }
      sums = fadd(vector::ShuffleOp::create(b_, loc_, sums, sums, even),
                  vector::ShuffleOp::create(b_, loc_, sums, sums, odd));
    }
    for (int64_t y = 0; y < rb; ++y) {
      Value part =
          kb * rb == cast<VectorType>(sums.getType()).getDimSize(0) && rb == 1
              ? sums
              : vector::ExtractStridedSliceOp::create(
                    b_, loc_, sums, ArrayRef<int64_t>{y * kb},
                    ArrayRef<int64_t>{kb}, ArrayRef<int64_t>{1})
                    .getResult();
      storeV(part, scores_, {cI(r0 + y), jj0});
    }
  });
}

/// Reads every line of the K (`keys`) or V rows [j0 + from, j0 + to) of
/// each head once (one element per 64-byte line), key by key and head by
/// head: in address order for a BSHD cache, whose heads of one key are
/// adjacent. The loads feed an empty inline asm with side effects, so they
/// stay; the block's compute then reads the rows, head by head, from the
/// caches. The compute's own order (each head's 16 rows, a position row
/// apart, then the next head's) streamed from DRAM at about two thirds of
/// an address-order pass, prefetched or not (simd/README.md, "BSHD decode
/// items": the simd kernel's ReadAhead, the same reads). A kernel of one
/// head (KernelSpec::readAhead) reads a whole tile's rows so: one run of
/// 64 rows, already in address order, that streams from DRAM faster than
/// the prefetch kept up with the compute (DecodeKvStreamsFromDram in
/// runtime/split_kv.h).
void Emitter::readAhead(bool keys, Value j0, Value from, Value to) {
  loop(from, to, cI(1), [&](Value j) {
    forEachHead([&] {
      Value mem = keys ? f_.k : f_.v;
      const int64_t perLine = 512 / elemOf(mem).getIntOrFloatBitWidth();
      for (int64_t o = 0; o < f_.d; o += perLine) {
        // One element per line, its bits into a general register ("r": a
        // vector operand needs a register class every ISA has for it).
        Value x = memref::LoadOp::create(b_, loc_, mem,
                                         ValueRange{add(j0, j), cI(o)});
        Value bits = arith::BitcastOp::create(
            b_, loc_, b_.getIntegerType(elemOf(mem).getIntOrFloatBitWidth()),
            x);
        LLVM::InlineAsmOp::create(b_, loc_, /*res=*/Type(), ValueRange{bits},
                                  "", "r", /*has_side_effects=*/true,
                                  /*is_align_stack=*/false,
                                  LLVM::tailcallkind::TailCallKind::None,
                                  LLVM::AsmDialectAttr(), ArrayAttr());
      }
    });
  });
}

void Emitter::emitDecode(Value i0, Value bq, Value lo, Value hi) {
  const int64_t d = f_.d, bkMax = f_.bk;
  const float negInf = -std::numeric_limits<float>::infinity();
  // q[r][:] in f32 (bf16 as stored, for vdpbf16ps), rows past bq repeat the
  // last row (never written out); zero past d up to a whole vector, so QKᵀ
  // needs no tail vectors.
  const int64_t qLanes = qkLanes();
  auto dch = chunks(d, qLanes);
  // A headed kernel (f_.heads): each step below runs for every head in
  // turn, on that head's slices -- the heads inside each KV tile, so a BSHD
  // cache's position rows are read whole within the tile.
  forEachHead([&] {
    loop(cI(0), cI(rows_), cI(1), [&](Value r) {
      Value g = arith::DivUIOp::create(b_, loc_, r, cI(f_.bq));
      Value i = arith::RemUIOp::create(b_, loc_, r, cI(f_.bq));
      Value row = add(i0, minI(i, sub(bq, cI(1))));
      for (auto [o, w] : dch) {
        Value x = w == qLanes
                      ? loadRaw(f_.q, {g, row, cI(o)}, w)
                      : loadMaskedRaw(f_.q, {g, row, cI(o)}, qLanes, cI(w));
        storeV(dot_ ? x : toF32(x), qpack_, {r, cI(o)});
      }
    });
    initTile(Value());
  });

  // Modifier + online softmax along keys, row by row.
  auto softmax = [&](Value j0, Value bk) {
    loop(cI(0), cI(rows_), cI(1), [&](Value r) {
      Value g = arith::DivUIOp::create(b_, loc_, r, cI(f_.bq));
      Value i = arith::RemUIOp::create(b_, loc_, r, cI(f_.bq));
      Value irow = minI(i, sub(bq, cI(1)));
      Value mt = splatF(negInf, kLanes);
      // An i8 K/V: the keys' and values' scales of 16 keys (0 past bk:
      // those lanes become -inf and P = 0 anyway).
      auto scales = [&](Value mem, int64_t jc) {
        return loadMasked(mem, {add(j0, cI(jc))}, kLanes, sub(bk, cI(jc)));
      };
      for (int64_t jc = 0; jc < bkMax; jc += kLanes) {
        Value jv = iota(cI(jc), kLanes);
        Value s = loadV(scores_, {r, cI(jc)}, kLanes);
        // The integer dot products times k_scale: the logits of the
        // dequantized keys, before the modifier scales them.
        if (f_.kScale)
          s = fmul(s, scales(f_.kScale, jc));
        Value bias;
        if (f_.bias)
          bias = loadMasked(f_.bias, {g, add(i0, irow), add(j0, cI(jc))},
                            kLanes, sub(bk, cI(jc)));
        Value s2 = modifier(s, bias, g, i, jv, i0, j0);
        Value valid = arith::CmpIOp::create(b_, loc_, arith::CmpIPredicate::slt,
                                            jv, splat(bk, kLanes));
        s2 = arith::SelectOp::create(b_, loc_, valid, s2,
                                     splatF(negInf, kLanes));
        storeV(s2, scores_, {r, cI(jc)});
        mt = fmax(mt, s2);
      }
      Value mOld = loadS(mrow_, {r});
      Value mn = fmax(mOld, hmax(mt));
      Value isNinf = arith::CmpFOp::create(b_, loc_, arith::CmpFPredicate::OEQ,
                                           mn, cF(negInf));
      Value ms = arith::SelectOp::create(b_, loc_, isNinf, cF(0.0f), mn);
      Value alpha = exp2(fsub(mOld, ms));
      Value sum = splatF(0.0f, kLanes);
      for (int64_t jc = 0; jc < bkMax; jc += kLanes) {
        Value p =
            exp2(fsub(loadV(scores_, {r, cI(jc)}, kLanes), splat(ms, kLanes)));
        sum = fadd(sum, p);
        // l sums P itself; P.V weighs the integer V rows by P * v_scale.
        storeV(f_.vScale ? fmul(p, scales(f_.vScale, jc)) : p, scores_,
               {r, cI(jc)});
      }
      Value lOld = loadS(lrow_, {r});
      storeS(fadd(fmul(lOld, alpha), reduce(vector::CombiningKind::ADD, sum)),
             lrow_, {r});
      storeS(mn, mrow_, {r});
      storeS(alpha, alpha_, {r});
    });
  };
  // S[r][j] = K[j0+j][:] . q[r][:] for keys [from, to) of the tile, in
  // blocks of rb rows x 16/rb keys (16 dot products, reduced together).
  auto qk = [&](Value j0, Value bk, Value from, Value to) {
    for (int64_t r0 = 0, rb = 8; r0 < rows_; r0 += rb) {
      while (rb > rows_ - r0)
        rb /= 2;
      qkDecodeBlock(j0, bk, r0, rb, from, to);
    }
  };
  // acc += P V over keys [from, from + n) of the tile (rescaled by alpha
  // first unless `rescale` is false: done already). pvRows' register
  // blocks span up to 16 / rows vectors of a row.
  const int64_t pvRowBlock = std::min<int64_t>(rows_, kLanes);
  const int64_t pvColumnBlocks = static_cast<int64_t>(chunks(d).size()) /
                                 std::max<int64_t>(1, kLanes / pvRowBlock);
  auto pv = [&](Value j0, Value from, Value n, bool rescale) {
    prefetchV_ = !readAhead_;
    const int64_t rb = pvRowBlock;
    for (int64_t r0 = 0; r0 < rows_; r0 += rb)
      pvRows(
          add(j0, from), n,
          [&](Value j, Value r) {
            return loadS(scores_, {r, add(from, j)});
          },
          cI(r0), std::min(rb, rows_ - r0), rescale);
  };

  // Read ahead when asked (KernelSpec::readAhead: the backend asks for K/V
  // larger than the last-level cache -- f32 for a kernel of one head, f32
  // or bf16 for a headed one), never over int8 rows or a transposed V; a
  // headed kernel 16 keys at a time, a kernel of one head each tile's K and
  // V rows before its QK^T. Otherwise the rows are prefetched. Headed bf16
  // read ahead, 6 interleaved rounds against prefetching, Zen 5:
  // decode_paired Hkv 8 0.78x the time, decode kv 16k Hkv 32 0.75x, kv 4k
  // Hkv 8 (16 MiB, L3-resident when called back to back) 1.12x. On a Xeon
  // the prefetch won from DRAM too (README.md, the compiled decode).
  readAhead_ = readAheadAsked_ && !f_.vTransposed &&
               !elemOf(f_.k).isInteger() && !elemOf(f_.v).isInteger();
  loop(lo, hi, cI(bkMax), [&](Value j0) {
    Value bk = minI(cI(bkMax), sub(hi, j0));
    // A headed kernel: K and V go 16 keys at a time with the heads inside,
    // so the tile's position rows are read whole, in address order (the
    // software prefetch of each head's slice ahead then covers whole rows).
    // One head: QK^T over the whole tile.
    if (f_.heads) {
      loop(cI(0), bk, cI(kLanes), [&](Value jb) {
        Value je = minI(add(jb, cI(kLanes)), bk);
        if (readAhead_)
          readAhead(/*keys=*/true, j0, jb, je);
        forEachHead([&] { qk(j0, bk, jb, je); });
      });
    } else {
      // One head: the tile's K rows, then its V rows, then QK^T over the
      // whole tile.
      if (readAhead_) {
        readAhead(/*keys=*/true, j0, cI(0), bk);
        readAhead(/*keys=*/false, j0, cI(0), bk);
      }
      qk(j0, bk, cI(0), bk);
    }
    forEachHead([&] { softmax(j0, bk); });
    if (f_.vTransposed) {
      forEachHead([&] { pvTransposedDecode(j0, bk); });
    } else if (f_.heads || pvColumnBlocks > 1) {
      // P.V 16 keys at a time too (8 KiB of f32 V at d 128), every head
      // and column block of them before the next 16, alpha applied once
      // per tile first. With one head it is for rows wider than a register
      // block (4+ rows of d 128): each block of columns run over the whole
      // tile would read part of every V row and come back for the rest,
      // which the prefetchers follow poorly. kv 16k Hq 32 / Hkv 8 BHSD, 10
      // interleaved rounds, time against whole-tile column blocks: bf16
      // 0.82x (quartiles 0.74-0.92), f32 1.01x (0.88-1.09); with one column
      // block (Hkv 32) 16-key blocks measured 1.13x (f32, 4 rounds).
      forEachHead([&] { rescaleAcc(); });
      loop(cI(0), bk, cI(kLanes), [&](Value jb) {
        Value n = minI(cI(kLanes), sub(bk, jb));
        if (readAhead_ && f_.heads)
          readAhead(/*keys=*/false, j0, jb, add(jb, n));
        forEachHead([&] { pv(j0, jb, n, /*rescale=*/false); });
      });
    } else {
      pv(j0, cI(0), bk, /*rescale=*/true);
    }
  });
  forEachHead([&] { epilogue(i0, bq); });
}

} // namespace attnkit::compiled::vectorize
