// attnkit-approximate-math alone: exp2/exp/log2/log on f32 become
// polynomials (no libm call left), f64 and other math ops stay; its one
// option, avx512, puts exp2 of 16-lane vectors on vscalefps.
// RUN: attnkit-opt %s --split-input-file --attnkit-approximate-math | FileCheck %s
// RUN: attnkit-opt %s --split-input-file --pass-pipeline='builtin.module(attnkit-approximate-math{avx512=1})' | FileCheck %s --check-prefix=AVX512
// RUN: not attnkit-opt %s --pass-pipeline='builtin.module(attnkit-approximate-math{degree=7})' 2>&1 | FileCheck %s --check-prefix=OPTION
// OPTION: no such option degree

// exp2: NaN-keeping clamps to [-127, 128], floor, a degree-6 polynomial
// (Horner: 6 FMAs), the exponent inserted as bits.
// CHECK-LABEL: func.func @exp2_scalar
// CHECK-NOT:     math.exp
// CHECK:         arith.cmpf ogt
// CHECK:         arith.select
// CHECK:         arith.cmpf olt
// CHECK:         arith.select
// CHECK:         math.floor
// CHECK-COUNT-6: math.fma
// CHECK:         arith.fptosi
// CHECK:         arith.shli
// CHECK:         arith.bitcast
// CHECK:         arith.mulf
// CHECK-NOT:     math.exp
// CHECK:         return
func.func @exp2_scalar(%x: f32) -> f32 {
  %y = math.exp2 %x : f32
  return %y : f32
}

// Without 16 lanes there is no vscalefps: a scalar takes the polynomial
// above with avx512 too.
// AVX512-LABEL: func.func @exp2_scalar
// AVX512:         math.floor
// AVX512:         arith.bitcast
// AVX512-NOT:     x86vector

// -----

// The softmax's case: vectors of 16.
// CHECK-LABEL: func.func @exp_vector
// CHECK-NOT:     math.exp
// CHECK:         math.fma {{.*}} : vector<16xf32>
// CHECK-NOT:     math.exp
// CHECK:         return

// avx512: f = x - round(x) from one vreduceps (the LLVM intrinsic; imm 8:
// nearest, no precision exception), zeroed (like the result) where not
// x >= -125.5 (unordered: NaN stays), n = x - f, simd's polynomial (6 FMAs,
// the last adding 1), then p * 2^n in one masked scalef (operands in the
// intrinsic's order: the value, the exponents, the masked-off lanes' 0),
// both masks the compare's 16 bits. No clamp, no round, no exponent bits,
// no floor.
// AVX512-LABEL: func.func @exp_vector
// AVX512-NOT:     arith.minimumf
// AVX512:         %[[KEEP:.*]] = arith.cmpf uge, %[[X:.*]], %{{.*}} : vector<16xf32>
// AVX512:         %[[BITS:.*]] = vector.bitcast %[[KEEP]] : vector<16xi1> to vector<1xi16>
// AVX512:         %[[K:.*]] = vector.extract %[[BITS]][0] : i16 from vector<1xi16>
// AVX512:         %[[F:.*]] = llvm.call_intrinsic "llvm.x86.avx512.mask.reduce.ps.512"(%[[X]], %c8_i32, %[[ZERO:[^,]+]], %[[K]], %c4_i32) : (vector<16xf32>, i32, vector<16xf32>, i16, i32) -> vector<16xf32>
// AVX512:         %[[N:.*]] = arith.subf %[[X]], %[[F]] : vector<16xf32>
// AVX512-COUNT-6: math.fma %{{.*}}, %[[F]], %{{.*}}
// AVX512:         x86vector.avx512.mask.scalef %{{.*}}, %[[N]], %[[ZERO]], %[[K]], %{{.*}} : vector<16xf32>
// AVX512-NOT:     math.roundeven
// AVX512-NOT:     arith.shli
// AVX512-NOT:     math.floor
// AVX512:         return
func.func @exp_vector(%x: vector<16xf32>) -> vector<16xf32> {
  %y = math.exp %x : vector<16xf32>
  return %y : vector<16xf32>
}

// -----

// CHECK-LABEL: func.func @log2_vector
// CHECK-NOT:     math.log
// CHECK:         math.fma {{.*}} : vector<16xf32>
// CHECK-NOT:     math.log
// CHECK:         return
func.func @log2_vector(%x: vector<16xf32>) -> vector<16xf32> {
  %y = math.log2 %x : vector<16xf32>
  return %y : vector<16xf32>
}

// -----

// No match: f64 goes to libm; sqrt and tanh are not this pass's.
// CHECK-LABEL: func.func @left_alone
// CHECK-NEXT:    math.exp %{{.*}} : f64
// CHECK-NEXT:    math.sqrt %{{.*}} : f32
// CHECK-NEXT:    math.tanh %{{.*}} : f32
func.func @left_alone(%x: f64, %y: f32) -> (f64, f32, f32) {
  %a = math.exp %x : f64
  %b = math.sqrt %y : f32
  %c = math.tanh %y : f32
  return %a, %b, %c : f64, f32, f32
}
