// attnkit-approximate-math alone: exp2/exp/log2/log on f32 become
// polynomials (no libm call left), f64 and other math ops stay, and the pass
// takes no option.
// RUN: attnkit-opt %s --split-input-file --attnkit-approximate-math | FileCheck %s
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

// -----

// The softmax's case: vectors of 16.
// CHECK-LABEL: func.func @exp_vector
// CHECK-NOT:     math.exp
// CHECK:         math.fma {{.*}} : vector<16xf32>
// CHECK-NOT:     math.exp
// CHECK:         return
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
