// The exp2 lowerings' values, run (mlir-runner): attnkit-approximate-math's
// polynomial everywhere, and its vscalefps form (avx512) on a CPU with
// AVX-512F and DQ. Over x in [-133, 127.5) (step 0.0151, 17248 points) the largest
// relative error against libm's f64 exp2 must stay under 2.5e-7 (~2 ulp; both
// measure ~6-7e-8), counting none where exp2(x) < 2^-125.5 and the result is
// flushed to at most that; then the special values exactly: exp2(-inf) = 0
// (masked keys), NaN stays NaN, +inf and 200 give +inf, exp2(0) = 1. Below
// -125.5 the avx512 form gives 0 (its write mask: no subnormal result), the
// polynomial keeps 2^-126 and flushes from -127.
// RUN: attnkit-opt %s --pass-pipeline="builtin.module(attnkit-approximate-math,convert-scf-to-cf,convert-vector-to-scf{full-unroll=1},convert-vector-to-llvm{enable-x86vector=1},convert-scf-to-cf,convert-math-to-llvm,convert-arith-to-llvm,convert-func-to-llvm,convert-cf-to-llvm,reconcile-unrealized-casts)" | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_c_runner_utils | FileCheck %s --check-prefixes=CHECK,POLY
// RUN: %if avx512dq %{ attnkit-opt %s --pass-pipeline="builtin.module(attnkit-approximate-math{avx512=1},convert-scf-to-cf,convert-vector-to-scf{full-unroll=1},convert-vector-to-llvm{enable-x86vector=1},convert-scf-to-cf,convert-math-to-llvm,convert-arith-to-llvm,convert-func-to-llvm,convert-cf-to-llvm,reconcile-unrealized-casts)" | mlir-runner -e main -entry-point-result=void -shared-libs=%mlir_c_runner_utils | FileCheck %s --check-prefixes=CHECK,AVX512 %}

// CHECK:       max rel err
// CHECK-NEXT:  within 2.5e-7: 1
// Inputs: -inf, NaN, +inf, -200, 200, 0, 1, -125.5, -125.6, -126, 0.5,
// -0.5, 127, -1, 3, -127.
// POLY-NEXT:   specials ( 0, nan, inf, 0, inf, 1, 2, 1.6624e-38, 1.55108e-38, 1.17549e-38, 1.41421, 0.707107, 1.70141e+38, 0.5, 8, 0 )
// AVX512-NEXT: specials ( 0, nan, inf, 0, inf, 1, 2, 1.6624e-38, 0, 0, 1.41421, 0.707107, 1.70141e+38, 0.5, 8, 0 )

func.func @main() {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant 1078 : index
  %lanes = arith.constant dense<[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0]> : vector<16xf32>
  %step = arith.constant dense<0.0151> : vector<16xf32>
  %start = arith.constant dense<-133.0> : vector<16xf32>
  %zero = arith.constant 0.0 : f64
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%worst = %zero) -> f64 {
    %ii = arith.index_cast %i : index to i32
    %fi = arith.sitofp %ii : i32 to f32
    %sixteen = arith.constant 16.0 : f32
    %base = arith.mulf %fi, %sixteen : f32
    %bv = vector.broadcast %base : f32 to vector<16xf32>
    %k = arith.addf %bv, %lanes : vector<16xf32>
    %off = arith.mulf %k, %step : vector<16xf32>
    %x = arith.addf %start, %off : vector<16xf32>
    %y = func.call @approx_exp2(%x) : (vector<16xf32>) -> vector<16xf32>
    %xd = arith.extf %x : vector<16xf32> to vector<16xf64>
    %yd = math.exp2 %xd : vector<16xf64>
    %y64 = arith.extf %y : vector<16xf32> to vector<16xf64>
    %diff = arith.subf %y64, %yd : vector<16xf64>
    %ad = math.absf %diff : vector<16xf64>
    %rel = arith.divf %ad, %yd : vector<16xf64>
    %tiny = arith.constant dense<1.6624e-38> : vector<16xf64>
    %small = arith.cmpf olt, %yd, %tiny : vector<16xf64>
    %tinyf = arith.constant dense<1.6625e-38> : vector<16xf64>
    %yok = arith.cmpf ole, %y64, %tinyf : vector<16xf64>
    %big = arith.constant dense<1.0e30> : vector<16xf64>
    %zerov = arith.constant dense<0.0> : vector<16xf64>
    %flushbad = arith.select %yok, %zerov, %big : vector<16xi1>, vector<16xf64>
    %e = arith.select %small, %flushbad, %rel : vector<16xi1>, vector<16xf64>
    %m = vector.reduction <maxnumf>, %e : vector<16xf64> into f64
    %w = arith.maxnumf %worst, %m : f64
    scf.yield %w : f64
  }
  vector.print str "max rel err "
  vector.print %r : f64
  %tol = arith.constant 2.5e-7 : f64
  %ok = arith.cmpf olt, %r, %tol : f64
  vector.print str "within 2.5e-7: "
  vector.print %ok : i1
  %sp = arith.constant dense<[0xFF800000, 0x7FC00000, 0x7F800000, -200.0, 200.0, 0.0, 1.0, -125.5, -125.6, -126.0, 0.5, -0.5, 127.0, -1.0, 3.0, -127.0]> : vector<16xf32>
  %spy = func.call @approx_exp2(%sp) : (vector<16xf32>) -> vector<16xf32>
  vector.print str "specials "
  vector.print %spy : vector<16xf32>
  return
}

// A call: constant inputs would be folded (by libm) before the pass rewrites
// the op. Not named exp2: the f64 reference's libm call would bind to it.
func.func @approx_exp2(%x: vector<16xf32>) -> vector<16xf32> attributes {llvm.noinline} {
  %y = math.exp2 %x : vector<16xf32>
  return %y : vector<16xf32>
}
