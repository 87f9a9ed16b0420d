// attnkit-vectorize-flash: the prefill micro-kernel (query tile a multiple
// of 16; see vectorize_flash_pass.cc for the register blocking).
#include "compiled/vector_emitter.h"

#include "compiled/passes.h"

using namespace mlir;

namespace attnkit::compiled::vectorize {

/// P·V into the transposed accumulator: accᵀ[d][r-vector] = accᵀ * alpha +
/// sum_j V(j0+j, d) (broadcast from `v`: V or Vᵀ as stored, or the tile's
/// f32 copy with j0 = 0, see emitPrefill) * Pᵀ[j][r-vector];
/// blocks of 4 d x 4 vectors. With `keyEnd` (a causal tile's diagonal, see
/// emitPrefill) vector v takes the keys [0, keyEnd[v]) only: the keys
/// [keyEnd[s-1], keyEnd[s]) in a loop that updates vectors s.. .
/// For V[j][d] too: against acc[R][D] += P (broadcast) x V rows (bf16 rows
/// widened at every load), `./attnkit bench ab`, 8 rounds, time after /
/// before: bf16 prefill S 512 / 2048 0.97-0.98x (0-1 of 8 rounds slower),
/// f32 S 2048 0.99-1.00x, causal S 256-512 0.97-1.02x (Zen 4 EPYC, GCC 12.2,
/// LLVM 22, 2026-11-26). Summing every key of a diagonal tile instead of
/// keyEnd's (P zeroed past them) cost causal MHA S 256 1.13x.
void Emitter::pvTransposedPrefill(Value v, Value j0, Value bk,
                                  ArrayRef<Value> keyEnd) {
  const int64_t rv = rows_ / kLanes, rvb = std::min<int64_t>(rv, 4);
  // (first key, end key, first vector updated)
  SmallVector<std::tuple<Value, Value, int64_t>> runs;
  if (keyEnd.empty()) {
    runs.push_back({cI(0), bk, 0});
  } else {
    Value k0 = cI(0);
    for (int64_t s = 0; s < rv; ++s) {
      runs.push_back({k0, keyEnd[s], s});
      k0 = keyEnd[s];
    }
  }
  auto block = [&](Value d0, int64_t db) {
    for (int64_t v0 = 0; v0 < rv; v0 += rvb) {
      const int64_t nv = std::min(rvb, rv - v0);
      SmallVector<Value> dIdx, res;
      for (int64_t x = 0; x < db; ++x)
        dIdx.push_back(add(d0, cI(x)));
      for (int64_t x = 0; x < db; ++x)
        for (int64_t y = 0; y < nv; ++y) {
          Value col = cI((v0 + y) * kLanes);
          res.push_back(fmul(loadV(acc_, {dIdx[x], col}, kLanes),
                             loadV(alpha_, {col}, kLanes)));
        }
      for (auto [from, to, first] : runs) {
        if (first >= v0 + nv)
          continue; // no vector of this block sees these keys
        const int64_t y0 = std::max<int64_t>(first - v0, 0);
        res = loop(from, to, cI(1), res, [&](Value j, ValueRange a) {
          SmallVector<Value> pv(nv), out(a.begin(), a.end());
          for (int64_t y = y0; y < nv; ++y)
            pv[y] = loadV(scores_, {j, cI((v0 + y) * kLanes)}, kLanes);
          Value key = add(j0, j);
          for (int64_t x = 0; x < db; ++x) {
            Value vt = splat(f_.vTransposed ? loadS(v, {dIdx[x], key})
                                            : loadS(v, {key, dIdx[x]}),
                             kLanes);
            for (int64_t y = y0; y < nv; ++y)
              out[x * nv + y] = fma(vt, pv[y], a[x * nv + y]);
          }
          return out;
        });
      }
      for (int64_t x = 0; x < db; ++x)
        for (int64_t y = 0; y < nv; ++y)
          storeV(res[x * nv + y], acc_, {dIdx[x], cI((v0 + y) * kLanes)});
    }
  };
  const int64_t full = f_.d / 4 * 4;
  if (full)
    loop(cI(0), cI(full), cI(4), [&](Value d0) { block(d0, 4); });
  if (full < f_.d)
    block(cI(full), f_.d - full);
}

void Emitter::emitPrefill(Value i0, Value bq, Value lo, Value hi,
                          ArrayRef<Value> vectorHi) {
  const int64_t d = f_.d, bkMax = f_.bk, rv = rows_ / kLanes;
  const float negInf = -std::numeric_limits<float>::infinity();
  // Qᵀ[d][r], rows past bq zero (their results are never written). For
  // vdpbf16ps the bf16 Q as it is, in pairs of dims: [d/2][r][2]. (LLVM
  // makes the copy strided stores; 16x16 vector.transpose blocks measured
  // slower, twice: simd/README.md, "Q^T and O^T through register
  // transposes".)
  loop(cI(0), cI(rows_), cI(1), [&](Value r) {
    Value g = arith::DivUIOp::create(b_, loc_, r, cI(f_.bq));
    Value i = arith::RemUIOp::create(b_, loc_, r, cI(f_.bq));
    Value valid =
        arith::CmpIOp::create(b_, loc_, arith::CmpIPredicate::ult, i, bq);
    Value row = add(i0, minI(i, sub(bq, cI(1))));
    if (!dot_) {
      loop(cI(0), cI(d), cI(1), [&](Value dd) {
        Value x = loadS(f_.q, {g, row, dd});
        storeS(arith::SelectOp::create(b_, loc_, valid, x, cF(0.0f)), qpack_,
               {dd, r});
      });
      return;
    }
    Value zero = arith::ConstantOp::create(
        b_, loc_, b_.getFloatAttr(b_.getBF16Type(), 0.0));
    Value r2 = mul(r, cI(2));
    auto put = [&](Value x, Value p, int64_t half) {
      storeS(arith::SelectOp::create(b_, loc_, valid, x, zero), qpack_,
             {p, add(r2, cI(half))});
    };
    loop(cI(0), cI(d / 2), cI(1), [&](Value p) {
      Value dd = mul(p, cI(2));
      put(memref::LoadOp::create(b_, loc_, f_.q, ValueRange{g, row, dd}), p, 0);
      put(memref::LoadOp::create(b_, loc_, f_.q,
                                 ValueRange{g, row, add(dd, cI(1))}),
          p, 1);
    });
    if (d % 2) {
      put(memref::LoadOp::create(b_, loc_, f_.q, ValueRange{g, row, cI(d - 1)}),
          cI(d / 2), 0);
      storeS(zero, qpack_, {cI(d / 2), add(r2, cI(1))});
    }
  });
  initTile(Value());
  // A bf16 or int8 K (QKᵀ not on vdpbf16ps) and V: each tile widened to f32
  // once, into kTile / vTile, so that the FMAs take their broadcast element
  // from memory (vfmadd231ps m32{1to16}) as they do for f32. Broadcast from
  // the cache, each element cost a scalar load, a shift and a vpbroadcastd
  // per 4 FMAs (the broadcast on the FMA port 5): bf16 prefill ran at 62%
  // of the FMA peak against f32's 78% (S 2048, 2 threads, 2-core Xeon
  // family 6 model 207, GCC 12.2 with MLIR/LLVM 22, 2026-11-27).
  const bool widenK = !dot_ && !elemOf(f_.k).isF32();
  const bool widenV = !elemOf(f_.v).isF32();
  Value kTile = widenK ? tileBuffer({bkMax, d}) : Value();
  Value vTile = !widenV          ? Value()
                : f_.vTransposed ? tileBuffer({d, bkMax})
                                 : tileBuffer({bkMax, d});

  loop(lo, hi, cI(bkMax), [&](Value j0) {
    Value bk = minI(cI(bkMax), sub(hi, j0));
    // Rows [0, bk) of the tile (Vᵀ: its columns, the masked loads reading
    // none past bk).
    auto widenRows = [&](Value from, Value to) {
      loop(cI(0), bk, cI(1), [&](Value j) {
        for (auto [o, w] : chunks(d))
          storeV(loadV(from, {add(j0, j), cI(o)}, w), to, {j, cI(o)});
      });
    };
    if (widenK)
      widenRows(f_.k, kTile);
    // K's rows as QKᵀ reads them: the tile's copy from 0, or the cache's
    // from j0.
    Value kSrc = widenK ? kTile : f_.k, kBase = widenK ? cI(0) : j0;
    // Sᵀ[j][r] = sum_d K[j0+j][d] * Qᵀ[d][r] for the keys [k0, k1) and the
    // row vectors [v0, v0 + nv) (nv <= 4): blocks of jb keys x nv vectors.
    auto qkBlocks = [&](int64_t v0, int64_t nv, int64_t jb, Value k0,
                        Value k1) {
      Value last = sub(k1, cI(1));
      loop(k0, k1, cI(jb), [&](Value jj0) {
        SmallVector<Value> keys;
        for (int64_t x = 0; x < jb; ++x)
          keys.push_back(add(kBase, minI(add(jj0, cI(x)), last)));
        SmallVector<Value> inits(jb * nv, splatF(0.0f, kLanes));
        SmallVector<Value> res;
        if (!dot_) {
          res = loop(cI(0), cI(d), cI(1), inits, [&](Value dd, ValueRange a) {
            SmallVector<Value> qv, out;
            for (int64_t y = 0; y < nv; ++y)
              qv.push_back(loadV(qpack_, {dd, cI((v0 + y) * kLanes)}, kLanes));
            for (int64_t x = 0; x < jb; ++x) {
              Value kb = splat(loadS(kSrc, {keys[x], dd}), kLanes);
              for (int64_t y = 0; y < nv; ++y)
                out.push_back(fma(kb, qv[y], a[x * nv + y]));
            }
            return out;
          });
        } else {
          // Two dims per step: 16 rows' (d, d+1) Q pairs against the key's
          // (d, d+1) pair broadcast, one vdpbf16ps per 32 products.
          auto step = [&](Value p, ValueRange a, bool single) {
            SmallVector<Value> qv, out;
            for (int64_t y = 0; y < nv; ++y)
              qv.push_back(
                  loadRaw(qpack_, {p, cI((v0 + y) * 2 * kLanes)}, 2 * kLanes));
            for (int64_t x = 0; x < jb; ++x) {
              Value kb = splatPair(f_.k, {keys[x], mul(p, cI(2))}, single);
              for (int64_t y = 0; y < nv; ++y)
                out.push_back(dotBf16(kb, qv[y], a[x * nv + y]));
            }
            return out;
          };
          res = loop(cI(0), cI(d / 2), cI(1), inits,
                     [&](Value p, ValueRange a) { return step(p, a, false); });
          if (d % 2)
            res = step(cI(d / 2), res, true);
        }
        // jb need not divide the range (G = 3: 5 keys): past its last key
        // the block recomputed the last key's scores, so store them there
        // again rather than past the range.
        for (int64_t x = 0; x < jb; ++x)
          for (int64_t y = 0; y < nv; ++y)
            storeV(res[x * nv + y], scores_,
                   {minI(add(jj0, cI(x)), last), cI((v0 + y) * kLanes)});
      });
    };
    // keyEnd[v]: the keys of the tile vector v computes (its scores past
    // them stay unset: the mask gives those keys -inf; the softmax and P·V
    // stop there).
    SmallVector<Value> keyEnd;
    if (vectorHi.empty()) {
      const int64_t rvb = std::min<int64_t>(rv, 4);
      for (int64_t v0 = 0; v0 < rv; v0 += rvb)
        qkBlocks(v0, std::min(rvb, rv - v0), kLanes / rvb, cI(0), bk);
    } else {
      // The diagonal of a causal tile: keys [keyEnd[s-1], keyEnd[s]) are
      // seen by vectors s.. only (keyEnd non-decreasing: clamped to the
      // tile, each at least the one before). A run of 16 / nv keys per
      // block keeps 16 accumulators.
      Value k0 = cI(0);
      for (int64_t v = 0; v < rv; ++v) {
        Value end = minI(
            bk, arith::MaxSIOp::create(b_, loc_, sub(vectorHi[v], j0), k0));
        keyEnd.push_back(end);
        for (int64_t v0 = v; v0 < rv; v0 += 4) {
          const int64_t nv = std::min<int64_t>(4, rv - v0);
          qkBlocks(v0, nv, kLanes / nv, k0, end);
        }
        k0 = end;
      }
    }
    // Modifier + online softmax, one vector of 16 rows at a time, over its
    // keys [0, kEnd).
    auto softmax = [&](Value vi, Value kEnd) {
      Value col = mul(vi, cI(kLanes));
      Value g = arith::DivUIOp::create(b_, loc_, col, cI(f_.bq));
      Value ibase = arith::RemUIOp::create(b_, loc_, col, cI(f_.bq));
      Value iv = iota(ibase, kLanes);
      // Key j's logits through the modifier, stored back, for the max.
      auto modified = [&](Value j) {
        Value s = loadV(scores_, {j, col}, kLanes);
        // i8 K: the integer dot products times the key's
        // scale (the dequantized key's logits).
        if (f_.kScale)
          s = fmul(s, splat(loadS(f_.kScale, {add(j0, j)}), kLanes));
        Value bias;
        if (f_.bias) {
          SmallVector<Value> el;
          Value key = add(j0, j);
          for (int64_t l = 0; l < kLanes; ++l) {
            Value i = minI(add(ibase, cI(l)), sub(bq, cI(1)));
            el.push_back(loadS(f_.bias, {g, add(i0, i), key}));
          }
          bias = vector::FromElementsOp::create(b_, loc_, vec(kLanes), el);
        }
        Value s2 = modifier(s, bias, g, iv, j, i0, j0);
        storeV(s2, scores_, {j, col});
        return s2;
      };
      // The tile max in two chains (even / odd keys): one chain waits out
      // vmaxps' latency key after key, ~1.4% of a prefill on a core with
      // two FMA ports. An odd last key goes through a one-trip loop.
      Value even = mul(arith::DivUIOp::create(b_, loc_, kEnd, cI(2)), cI(2));
      SmallVector<Value> m2 =
          loop(cI(0), even, cI(2),
               ValueRange{splatF(negInf, kLanes), splatF(negInf, kLanes)},
               [&](Value j, ValueRange a) {
                 Value s0 = modified(j);
                 Value s1 = modified(add(j, cI(1)));
                 return SmallVector<Value>{fmax(a[0], s0), fmax(a[1], s1)};
               });
      Value mt = loop(even, kEnd, cI(1), ValueRange{fmax(m2[0], m2[1])},
                      [&](Value j, ValueRange a) {
                        return SmallVector<Value>{fmax(a[0], modified(j))};
                      })[0];
      Value mOld = loadV(mrow_, {col}, kLanes);
      Value mn = fmax(mOld, mt);
      Value isNinf = arith::CmpFOp::create(b_, loc_, arith::CmpFPredicate::OEQ,
                                           mn, splatF(negInf, kLanes));
      Value ms =
          arith::SelectOp::create(b_, loc_, isNinf, splatF(0.0f, kLanes), mn);
      Value alpha = exp2(fsub(mOld, ms));
      Value sum =
          loop(cI(0), kEnd, cI(1), ValueRange{splatF(0.0f, kLanes)},
               [&](Value j, ValueRange a) {
                 Value p = exp2(fsub(loadV(scores_, {j, col}, kLanes), ms));
                 // l sums P itself; P.V weighs the integer V row by
                 // P * v_scale.
                 Value pv = p;
                 if (f_.vScale)
                   pv = fmul(p, splat(loadS(f_.vScale, {add(j0, j)}), kLanes));
                 storeV(pv, scores_, {j, col});
                 return SmallVector<Value>{fadd(a[0], p)};
               })[0];
      Value lOld = loadV(lrow_, {col}, kLanes);
      storeV(fma(lOld, alpha, sum), lrow_, {col});
      storeV(mn, mrow_, {col});
      storeV(alpha, alpha_, {col});
    };
    if (keyEnd.empty())
      loop(cI(0), cI(rv), cI(1), [&](Value vi) { softmax(vi, bk); });
    else
      for (int64_t v = 0; v < rv; ++v)
        softmax(cI(v), keyEnd[v]);
    // P·V (the prefill accumulator is always accᵀ, see emit()).
    // V's tile widened right before P·V reads it (as K's before QKᵀ).
    if (widenV && f_.vTransposed) {
      loop(cI(0), cI(d), cI(1), [&](Value e) {
        for (auto [o, w] : chunks(bkMax))
          storeV(loadMasked(f_.v, {e, add(j0, cI(o))}, w, sub(bk, cI(o))),
                 vTile, {e, cI(o)});
      });
    } else if (widenV) {
      widenRows(f_.v, vTile);
    }
    if (widenV)
      pvTransposedPrefill(vTile, cI(0), bk, keyEnd);
    else
      pvTransposedPrefill(f_.v, j0, bk, keyEnd);
  });
  epilogue(i0, bq);
}

} // namespace attnkit::compiled::vectorize
