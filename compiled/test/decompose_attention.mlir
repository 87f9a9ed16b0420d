// attnkit-decompose-attention: attnkit.attention -> the naive Linalg chain
// (the --emit=naive stage), what it leaves alone.
// RUN: attnkit-opt %s --split-input-file --attnkit-decompose-attention | FileCheck %s
// The pass takes no option (the tiles are the flash rewrite's):
// RUN: not attnkit-opt %s --pass-pipeline='builtin.module(func.func(attnkit-decompose-attention{query-tile=4}))' 2>&1 | FileCheck %s --check-prefix=OPTION
// OPTION: no such option query-tile
// An op that fails its verifier never reaches the pass:
// RUN: not attnkit-opt %S/attnkit_ops_invalid.mlir --split-input-file --attnkit-decompose-attention 2>&1 | FileCheck %s --check-prefix=INVALID
// INVALID: error: 'attnkit.attention' op expects q of rank 3
// From the stage dumper: GQA, bf16, window mask.
// RUN: attnkit-compile --emit=naive --heads 8 --kv-heads 2 --head-dim 32 --mask window:16 --dtype bf16 \
// RUN:   | FileCheck %s --check-prefix=NAIVE
// NAIVE-LABEL: func.func @attention
// NAIVE-NOT:   attnkit.attention
// NAIVE:       linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "reduction"]{{.*}}outs(%{{.*}} : tensor<4x?x?xf32>)
// NAIVE:         arith.extf
// NAIVE:       linalg.index 1
// NAIVE:       linalg.index 2
// NAIVE:       arith.cmpi sgt
// NAIVE:       arith.andi
// NAIVE:       math.exp
// NAIVE:       arith.divf

// The plain case: S = Q.K^T materialized (S x S), scaled, softmax in four
// generics, P.V (V's unit-stride dim innermost), the log-sum-exp.
// CHECK-LABEL: func.func @plain
// CHECK-NOT:     attnkit.attention
// CHECK:         %[[S:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "reduction"]{{.*}} outs(%{{.*}} : tensor<2x?x?xf32>)
// CHECK:         %[[X:.*]] = linalg.generic {{.*}} ins(%[[S]] : tensor<2x?x?xf32>)
// CHECK:           arith.mulf %{{.*}}, %arg3 : f32
// CHECK:         %[[M:.*]] = linalg.generic {{.*}} ins(%[[X]] : tensor<2x?x?xf32>) outs(%{{.*}} : tensor<2x?xf32>)
// CHECK:           arith.maximumf
// CHECK:         %[[E:.*]] = linalg.generic {{.*}} ins(%[[X]], %[[M]] : tensor<2x?x?xf32>, tensor<2x?xf32>)
// CHECK:           math.exp
// CHECK:         %[[L:.*]] = linalg.generic {{.*}} ins(%[[E]] : tensor<2x?x?xf32>) outs(%{{.*}} : tensor<2x?xf32>)
// CHECK:         %[[P:.*]] = linalg.generic {{.*}} ins(%[[E]], %[[L]] : tensor<2x?x?xf32>, tensor<2x?xf32>)
// CHECK:           arith.divf
// CHECK:         %[[O:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "reduction", "parallel"]{{.*}} ins(%[[P]], %arg2
// CHECK:         %[[LSE:.*]] = linalg.generic {{.*}} ins(%[[M]], %[[L]] : tensor<2x?xf32>, tensor<2x?xf32>)
// CHECK:           math.log
// CHECK:         return %[[O]], %[[LSE]]
func.func @plain(%q: tensor<2x?x16xf32>, %k: tensor<?x16xf32>,
                 %v: tensor<?x16xf32>, %scale: f32)
    -> (tensor<2x?x16xf32>, tensor<2x?xf32>) {
  %o, %lse = attnkit.attention q(%q : tensor<2x?x16xf32>)
      k(%k : tensor<?x16xf32>) v(%v : tensor<?x16xf32>) scale(%scale)
      -> tensor<2x?x16xf32>, tensor<2x?xf32> {
  ^bb0(%i: index, %j: index, %x: f32):
    attnkit.yield %x : f32
  }
  return %o, %lse : tensor<2x?x16xf32>, tensor<2x?xf32>
}

// -----

// A bias and a transposed V: the bias is an input of the modifier generic,
// P.V iterates (g, i, d, j) over V[d, j].
// CHECK-LABEL: func.func @bias_vt
// CHECK:         linalg.generic {{.*}} ins(%{{.*}}, %arg4 : tensor<1x?x?xf32>, tensor<1x?x?xf32>)
// CHECK:           %[[X:.*]] = arith.mulf %{{.*}}, %arg3 : f32
// CHECK:           arith.addf %[[X]], %{{.*}} : f32
// CHECK:         linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "reduction"]{{.*}} ins(%{{.*}}, %arg2 : tensor<1x?x?xf32>, tensor<8x?xf32>)
func.func @bias_vt(%q: tensor<1x?x8xf32>, %k: tensor<?x8xf32>,
                   %v: tensor<8x?xf32>, %scale: f32, %b: tensor<1x?x?xf32>)
    -> (tensor<1x?x8xf32>, tensor<1x?xf32>) {
  %o, %lse = attnkit.attention q(%q : tensor<1x?x8xf32>)
      k(%k : tensor<?x8xf32>) v(%v : tensor<8x?xf32>) v_transposed
      scale(%scale) bias(%b : tensor<1x?x?xf32>)
      -> tensor<1x?x8xf32>, tensor<1x?xf32> {
  ^bb0(%i: index, %j: index, %x: f32, %bias: f32):
    %s = arith.addf %x, %bias : f32
    attnkit.yield %s : f32
  }
  return %o, %lse : tensor<1x?x8xf32>, tensor<1x?xf32>
}

// -----

// No attention op: nothing to do.
// CHECK-LABEL: func.func @no_attention
// CHECK-NEXT:    arith.addf
// CHECK-NEXT:    return
func.func @no_attention(%x: f32) -> f32 {
  %y = arith.addf %x, %x : f32
  return %y : f32
}
